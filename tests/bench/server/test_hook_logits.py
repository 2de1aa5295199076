"""The hook's record of the logits, in this process: FakeSglang's ``ModelRunner.forward``
wrapped as the hook wraps the real one, FakeTorch's tensors in ``sys.modules``; and what the
counter makes of the processes' records."""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from sm120patch.bench.remote import server_hook
from sm120patch.bench.server.counter import read
from tests.bench.server.fakes import MODEL_RUNNER, TENSOR


def module(name: str, source: str) -> types.ModuleType:
    made = types.ModuleType(name)
    exec(compile(source, name, "exec"), made.__dict__)
    return made


@pytest.fixture
def hooked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """FakeSglang's model runner module as the hook leaves it once loaded, and a fresh record."""
    torch = module("torch", TENSOR)
    torch.cuda = types.SimpleNamespace(is_current_stream_capturing=lambda: False)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(server_hook, "_logits", {"forwards": 0, "nonfinite": 0, "first": {}})
    monkeypatch.setattr(server_hook, "_loaded", [])
    monkeypatch.setattr(server_hook, "_state", {"dirty": False, "written": 0.0})
    monkeypatch.setenv(server_hook.COUNT_DIR_ENV, str(tmp_path))
    runner = module(server_hook.MODEL_RUNNER, MODEL_RUNNER)
    server_hook._after_load(runner)
    return runner


def record(tmp_path: Path) -> dict[str, Any]:
    server_hook.flush()
    data: dict[str, Any] = json.loads(next(tmp_path.glob("*.json")).read_text())["logits"]
    return data


def test_forward_is_wrapped_once_and_its_logits_recorded(hooked: Any, tmp_path: Path) -> None:
    wrapped = hooked.ModelRunner.forward
    server_hook._after_load(hooked)  # a second load does not wrap it again
    assert hooked.ModelRunner.forward is wrapped
    runner = hooked.ModelRunner(fusion=False)
    runner.forward(hooked.batch([[1, 2], [3, 4]], False))  # the extend: two requests
    runner.forward(hooked.batch([[5], [6]], True))
    runner.forward(hooked.batch([[9], [9]], True))  # a later decode: counted, not kept
    data = record(tmp_path)
    assert (data["forwards"], data["nonfinite"]) == (3, 0)
    extend, decode = data["first"]["extend"], data["first"]["decode"]
    assert extend["shape"] == [2, 32] and extend["input_ids"] == [1, 2, 3, 4]
    assert extend["head"] == pytest.approx([math.sin(3 + i) for i in range(32)])  # row 0: ids 1 + 2
    assert decode["input_ids"] == [5, 6] and decode["head"][0] == pytest.approx(math.sin(5))
    best = max(range(32), key=lambda i: math.sin(5 + i))
    assert decode["top_indices"][0] == best and len(decode["top_values"]) == server_hook.TOP_K


def test_nan_in_any_forward_is_counted_and_held_as_null(
    hooked: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(hooked, "MODE", "nan-on")
    runner = hooked.ModelRunner(fusion=True)
    for _ in range(3):
        runner.forward(hooked.batch([[1]], True))
    data = record(tmp_path)
    assert (data["forwards"], data["nonfinite"]) == (3, 3)
    assert data["first"]["decode"]["head"][3] is None  # NaN is not JSON: the count says it


def test_capture_and_what_is_not_logits_are_passed_over(hooked: Any, tmp_path: Path) -> None:
    runner = hooked.ModelRunner(fusion=False)
    sys.modules["torch"].cuda.is_current_stream_capturing = lambda: True  # type: ignore[attr-defined]
    runner.forward(hooked.batch([[1]], True))
    sys.modules["torch"].cuda.is_current_stream_capturing = lambda: False  # type: ignore[attr-defined]
    assert server_hook._logits["forwards"] == 0
    server_hook._record((None, None), (runner,), {})  # an older release's (logits_output, ...) of None
    server_hook._record(types.SimpleNamespace(logits_output=None), (runner,), {})
    assert server_hook._logits["forwards"] == 0


def test_an_error_reading_the_logits_is_said_and_the_server_goes_on(hooked: Any, tmp_path: Path) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no isfinite")

    sys.modules["torch"].isfinite = broken  # type: ignore[attr-defined]
    out = hooked.ModelRunner(fusion=False).forward(hooked.batch([[1]], True))
    assert out.logits_output.next_token_logits.shape == (1, 32)
    assert record(tmp_path)["error"] == "RuntimeError: no isfinite"


def test_the_counter_takes_rank_0s_first_steps_and_sums_the_bad_forwards(tmp_path: Path) -> None:
    def write(name: str, rank: Any, head: float, nonfinite: int) -> None:
        logits = {"forwards": 5, "nonfinite": nonfinite, "first": {"decode": {"head": [head]}}}
        (tmp_path / name).write_text(json.dumps({"rank": rank, "logits": logits}))

    write("1.json", 1, 1.0, 0)
    write("2.json", 0, 2.0, 2)
    write("3.json", None, 3.0, 1)
    (tmp_path / "4.json").write_text(json.dumps({"rank": None, "logits": {"forwards": 0, "error": "E: x"}}))
    logits = read(tmp_path).logits
    assert (logits.forwards, logits.nonfinite, logits.rank, logits.errors) == (15, 3, 0, ["E: x"])
    assert logits.first == {"decode": {"head": [2.0]}}


class FakeNumpy(types.SimpleNamespace):
    """numpy as the hook sees it once imported: ``random.seed`` records what it was given."""

    def __init__(self) -> None:
        seeds: list[Any] = []
        super().__init__(__name__="numpy", seeds=seeds, random=types.SimpleNamespace(seed=seeds.append))


def test_numpy_is_seeded_as_it_is_imported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(server_hook, "_loaded", [])
    monkeypatch.setattr(server_hook, "_state", {"dirty": False, "written": 0.0})
    monkeypatch.setenv(server_hook.COUNT_DIR_ENV, str(tmp_path))
    numpy = FakeNumpy()
    monkeypatch.setenv(server_hook.NUMPY_SEED_ENV, "1234")
    server_hook._after_load(numpy)
    assert numpy.seeds == [1234]
    assert json.loads(next(tmp_path.glob("*.json")).read_text())["numpy_seed"] == 1234
    for value in ("", "x"):  # not asked for, or not a number: numpy is left alone
        monkeypatch.setenv(server_hook.NUMPY_SEED_ENV, value)
        server_hook._after_load(other := FakeNumpy())
        assert other.seeds == []
    assert "numpy" in server_hook._Finder.watched
