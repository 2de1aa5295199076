"""``sm120patch bench kernel``'s command in this process: the model of the estimate, how fusion is
kept off in a release, the status line's words, the plot written whole, and what is
printed.  The measurement is a stand-in (``measure.run`` replaced, named in each test)
answering the two-H200 figures of test_render.py; sglang is the miniature release of
tests/support/mini_sglang.py, only located and read."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from sm120patch.bench import shown
from sm120patch.bench.kernel import command
from sm120patch.bench.kernel.estimate import Model
from sm120patch.bench.kernel.verdict import KEEP_OFF_DEFAULT
from sm120patch.cli.run import show_result
from sm120patch.errors import EnvironmentProblem
from sm120patch.runner import ranks as launch
from sm120patch.sglang.fusion_call import read_call
from tests.bench.fakes import StatusRecorder, Terminal
from tests.bench.kernel.test_render import result
from tests.support.cli import run
from tests.support.mini_sglang import write_mini_sglang

HATCH = "--enforce-disable-flashinfer-allreduce-fusion"


def test_how_fusion_is_kept_off_in_each_release() -> None:
    assert command.keep_off(None) == KEEP_OFF_DEFAULT
    assert command.keep_off({HATCH, "--tp-size"}) == (
        f"`{HATCH}` / `sm120patch revert`, then `sm120patch apply --skip server-args-auto-enable`"
    )
    assert command.keep_off({"--enable-flashinfer-allreduce-fusion"}) == (
        "launch without `--enable-flashinfer-allreduce-fusion` / `sm120patch revert`, then "
        "`sm120patch apply --skip server-args-auto-enable`"
    )
    assert command.keep_off(set()) == command.keep_off({"--enable-flashinfer-allreduce-fusion"})


def test_the_model_of_the_estimate(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 61, "hidden_size": 7168, "architectures": ["DeepseekV3"]}))
    read = command.model_for(config, None, None)
    assert read == Model(61, 7168, False, f"{config} (DeepseekV3)")
    assert command.model_for(config, None, 7168) == read  # the same hidden size is no contradiction
    assert command.model_for(config, 4, None) == Model(4, 7168, False, f"{config} (DeepseekV3)")
    with pytest.raises(EnvironmentProblem) as raised:
        command.model_for(config, None, 4096)
    assert str(raised.value) == "--hidden 4096 contradicts --model-config (hidden size 7168)"
    assert command.model_for(None, 10, None) == Model(10, 7168, None, "--layers/--hidden")
    assert command.model_for(None, 10, 2048) == Model(10, 2048, None, "--layers/--hidden")
    assert command.model_for(None, None, 2048) is None
    assert command.DEFAULT_HIDDEN == 7168


def test_the_status_line_says_rank_0s_phase() -> None:
    assert command.phase_text(0, {"event": "phase", "phase": "workspace"}) == (
        "creating FlashInfer's workspace (the first run builds its trtllm_comm module: minutes)"
    )
    assert command.phase_text(0, {"event": "phase", "phase": "tokens 128", "index": 3, "total": 12}) == (
        "measuring tokens 128 (4/12)"
    )
    assert command.phase_text(0, {"event": "phase", "phase": "tokens 1", "total": 12}) == "measuring tokens 1 (1/12)"
    assert command.phase_text(0, {"event": "phase", "phase": "init"}) == "init"
    assert command.phase_text(0, {"event": "phase"}) == "None"
    assert command.phase_text(1, {"event": "phase", "phase": "init"}) is None
    assert command.phase_text(0, {"event": "row", "phase": "init"}) is None


def test_a_plot_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    drawn: list[Path] = []

    def draw(done: object, path: Path) -> None:
        drawn.append(path)
        path.write_text(f"plot of {done}")

    target = tmp_path / "bench.png"
    assert shown.draw_plot(draw, "R", target) is None
    assert drawn == [tmp_path / f".bench.{os.getpid()}.sm120patch-tmp.png"]
    assert target.read_text() == "plot of R"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.png"]

    def half(done: object, path: Path) -> None:
        path.write_text("half")
        raise OSError(28, "No space left on device")

    assert shown.draw_plot(half, "R", tmp_path / "b.svg") == (
        f"--plot {tmp_path / 'b.svg'}: cannot write it (No space left on device); the measurements are reported "
        "without it"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.png"]  # the half-written temp is gone

    def bare(done: object, path: Path) -> None:
        raise OSError("no errno")

    assert shown.draw_plot(bare, "R", tmp_path / "c.png") == (
        f"--plot {tmp_path / 'c.png'}: cannot write it (no errno); the measurements are reported without it"
    )


def test_a_problem_ends_the_json_object_with_the_error_keys() -> None:
    assert shown.with_problem({"ok": True, "exit_code": 0, "rows": [1]}, None) == {
        "ok": True,
        "exit_code": 0,
        "rows": [1],
    }
    assert shown.with_problem({"ok": True, "exit_code": 0, "rows": [1]}, "--plot x: cannot write it") == {
        "ok": False,
        "exit_code": 2,
        "rows": [1],
        "error": "--plot x: cannot write it",
    }


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """The miniature sglang; ``measure.run`` (as the command imported it) replaced by a
    stand-in that records its arguments, reports rank events and answers ``answer["result"]``
    or raises ``answer["raise"]``; the status line by ``StatusRecorder``."""
    answer: dict[str, Any] = {"package": write_mini_sglang(tmp_path / "site"), "raise": None}

    def fake_run(settings: Any, call: Any, hatch: str, on_event: Any, version: Any, model: Any) -> Any:
        answer["args"] = (settings, call, hatch, version, model)
        on_event(0, {"event": "phase", "phase": "workspace"})
        on_event(1, {"event": "phase", "phase": "workspace"})
        on_event(0, {"event": "row"})
        on_event(0, {"event": "phase", "phase": "tokens 8", "index": 1, "total": 3})
        if answer["raise"] is not None:
            raise answer["raise"]
        return result(model=model)

    monkeypatch.setattr(command, "run", fake_run)
    answer["status"] = StatusRecorder()
    monkeypatch.setattr(command, "StatusLine", answer["status"])
    return answer


def bench(answer: dict[str, Any], *args: str) -> tuple[int, str, str]:
    return run("bench", "--sglang-path", str(answer["package"]), *args)


def test_the_settings_handed_to_the_measurement(measured: dict[str, Any]) -> None:
    code, stdout, _ = bench(
        measured,
        "--json",
        "--tp",
        "4",
        "--tokens",
        "8,1",
        "--hidden",
        "4096",
        "--layers",
        "30",
        "--dtype",
        "fp16",
        "--replays",
        "50",
        "--timeout",
        "77",
        "--baseline",
        "stand-in",
        "--disable-custom-all-reduce",
    )
    assert code == 0, stdout
    settings, call, hatch, version, model = measured["args"]
    assert (settings.python, settings.tp, settings.tokens, settings.hidden, settings.dtype) == (
        sys.executable,
        4,
        (1, 8),
        4096,
        "fp16",
    )
    assert (settings.timeout, settings.replays, settings.baseline, settings.custom_allreduce) == (
        77.0,
        50,
        "stand-in",
        False,
    )
    assert settings.pcie_ipc is False  # 0.5.11 has no PCIe IPC allreduce option
    assert call == read_call(measured["package"], "0.5.11")
    assert version == "0.5.11"
    assert (
        hatch == "launch without `--enable-flashinfer-allreduce-fusion` / `sm120patch revert`, then "
        "`sm120patch apply --skip server-args-auto-enable`"
    )
    assert model == Model(30, 4096, None, "--layers/--hidden")
    assert json.loads(stdout)["estimate"] is not None
    assert measured["status"].made == [(False, "starting the ranks")]
    assert measured["status"].said == [
        "creating FlashInfer's workspace (the first run builds its trtllm_comm module: minutes)",
        "measuring tokens 8 (2/3)",
    ]


def test_the_defaults_handed_to_the_measurement(measured: dict[str, Any]) -> None:
    code, _, _ = bench(measured, "--json")
    assert code == 0
    settings, _, _, _, model = measured["args"]
    assert (settings.tp, settings.hidden, settings.dtype, settings.timeout, settings.replays) == (
        None,
        7168,
        "bf16",
        300.0,
        40,
    )
    assert (settings.baseline, settings.custom_allreduce, model) == ("auto", True, None)
    assert settings.tokens == (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


def test_without_sglang_the_newest_call_is_mirrored(measured: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """locate is replaced by a stand-in that finds no sglang in this interpreter."""

    def nothing(python: Any = None, sglang_path: Any = None) -> Any:
        raise EnvironmentProblem("no sglang found in this interpreter")

    monkeypatch.setattr("sm120patch.runner.locate.locate", nothing)
    code, stdout, _ = run("bench", "--json", "--tp", "2")
    assert code == 0, stdout
    settings, call, hatch, version, _ = measured["args"]
    assert (call, hatch, version, settings.pcie_ipc) == (read_call(None, None), KEEP_OFF_DEFAULT, None, False)
    assert settings.python == sys.executable


def test_an_sglang_path_that_is_not_sglang_is_refused(measured: dict[str, Any], tmp_path: Path) -> None:
    code, stdout, _ = run("bench", "--sglang-path", str(tmp_path / "missing"), "--json")
    assert code == 2 and "args" not in measured
    assert str(tmp_path / "missing") in json.loads(stdout)["error"]


def test_the_text_report(measured: dict[str, Any]) -> None:
    code, stdout, err = bench(measured, "--tp", "2")
    assert code == 0 and stdout == ""
    assert measured["status"].made == [(False, "starting the ranks")]
    flat = " ".join(err.split())
    assert (
        "indicative only (no sglang): fusion pays here at TP 2: 63 % to 84 % faster at 1 to 2048 tokens: leave it on"
        " kept for `sm120patch apply --fuse-up-to measured`: "
    ) in flat
    assert flat.endswith("/sglang/.sm120patch/bench-last.json")
    assert "error:" not in err


def test_a_plot_that_cannot_be_written_is_said_after_the_report(
    measured: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """render.plot is replaced by a stand-in that fails as a full disk does."""
    from sm120patch.bench.kernel import render

    def full(done: Any, path: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(render, "plot", full)
    target = tmp_path / "bench.png"
    said = f"--plot {target}: cannot write it (No space left on device); the measurements are reported without it"
    code, stdout, err = bench(measured, "--tp", "2", "--plot", str(target))
    assert code == 2 and stdout == ""
    assert " ".join(err.split()).endswith(f"error: {said}")
    assert "leave it on" in " ".join(err.split())
    code, stdout, _ = bench(measured, "--tp", "2", "--plot", str(target), "--json")
    data = json.loads(stdout)
    assert (code, data["exit_code"], data["ok"], data["error"]) == (2, 2, False, said)
    assert [row["tokens"] for row in data["rows"]] == [1, 128, 2048]


def test_a_plot_is_drawn(measured: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """render.plot is replaced by a stand-in that writes the result's row count."""
    from sm120patch.bench.kernel import render

    monkeypatch.setattr(render, "plot", lambda done, path: path.write_text(str(len(done.rows))))
    target = tmp_path / "bench.svg"
    code, stdout, _ = bench(measured, "--tp", "2", "--plot", str(target), "--json")
    assert code == 0 and target.read_text() == "3"
    assert "error" not in json.loads(stdout)


@pytest.mark.parametrize(
    ("kind", "code", "said"),
    [
        ("timeout", 2, "bench stopped: rank 1, phase tokens 8: no progress for 300 s"),
        ("declined", 1, "bench failed: rank 1, phase tokens 8: no progress for 300 s"),
        ("failure", 1, "bench failed: rank 1, phase tokens 8: no progress for 300 s"),
    ],
)
def test_a_rank_that_hangs_or_fails(measured: dict[str, Any], kind: str, code: int, said: str) -> None:
    measured["raise"] = launch.RankFailure(1, "tokens 8", launch.FailureKind(kind), "no progress for 300 s")
    got, stdout, _ = bench(measured, "--tp", "2", "--json")
    data = json.loads(stdout)
    assert (got, data["exit_code"], data["error"]) == (code, code, said)


@pytest.mark.parametrize(("as_json", "shown"), [(False, True), (True, False)])
def test_the_status_line_shows_on_a_terminal_unless_json(
    measured: dict[str, Any], monkeypatch: pytest.MonkeyPatch, as_json: bool, shown: bool
) -> None:
    monkeypatch.setattr(sys, "stderr", Terminal())
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    asked = command.bench(
        python=None,
        sglang_path=measured["package"],
        as_json=as_json,
        tp=2,
        tokens=(1, 8),
        hidden=None,
        dtype="bf16",
        replays=40,
        timeout=300.0,
        plot=None,
    )
    code = show_result(asked, as_json)
    assert code == 0
    assert measured["status"].made == [(shown, "starting the ranks")]
