"""``bench server --fuse-up-to``: the limit its third setting runs with, taken from the saved
kernel bench result at the TP asked (``measured``), and its refusal of a release whose gate
also compares the batch with a number of its own (0.5.4 - 0.5.7), where setting sglang's
constant in its processes would not move the limit.  ``driver.run`` is replaced by a stand-in
that records its settings, so no sglang process starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sm120patch.bench import fuse_limit
from sm120patch.bench.server import driver
from tests.bench.server.fakes import fake_server_site
from tests.bench.server.hand import result
from tests.bench.server.test_driver import GATE
from tests.cli.test_fuse_up_to_measured import recorded, save_result
from tests.support.cli import run

#: 0.5.7's gate method as FakeSglang's gate module: it compares the batch with 2048 itself,
#: beside the module constant.
LITERAL_GATE = """\
FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048


class CommunicateWithAllReduceAndLayerNormFn:
    @staticmethod
    def _gather_hidden_states_and_residual(hidden_states, residual):
        if (_is_sm100_supported or _is_sm90_supported) and hidden_states.shape[0] <= 2048:
            return "fused"
        return "unfused"


_is_sm90_supported = _is_sm100_supported = True
"""


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch) -> list[driver.Settings]:
    """The settings each bench run hands the driver (a stand-in for ``driver.run`` answering
    a hand-built result)."""
    handed: list[driver.Settings] = []

    def fake_run(settings: driver.Settings, on_status: Any) -> driver.ServerResult:  # the fake driver
        handed.append(settings)
        return result()

    monkeypatch.setattr(driver, "run", fake_run)
    return handed


def bench(package: Path, *args: str) -> tuple[int, dict[str, Any]]:
    code, stdout, _ = run("bench", "server", "--sglang-path", str(package), "--json", "--no-kernel", *args)
    return code, json.loads(stdout)


def test_measured_runs_the_third_setting_at_the_saved_crossover_for_the_tp_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: list[driver.Settings]
) -> None:
    """A TP-2 result on a host where CUDA shows four GPUs: ``--tp 2`` says it is the TP served."""
    package = fake_server_site(tmp_path / "site", gate=GATE)
    save_result(package, recorded())  # fusion wins up to 512 tokens
    monkeypatch.setattr(fuse_limit, "_gpus", lambda: ["NVIDIA H200"] * 4)
    code, data = bench(package, "--tp", "2", "--fuse-up-to", "measured")
    assert code == 0, data
    assert [(s.fuse_up_to, s.sglang_limit, s.tp) for s in settings] == [(512, 2048, 2)]


def test_a_release_whose_gate_also_compares_a_number_is_refused(
    tmp_path: Path, settings: list[driver.Settings]
) -> None:
    package = fake_server_site(tmp_path / "site", version="0.5.7", gate=LITERAL_GATE)
    code, data = bench(package, "--tp", "2", "--fuse-up-to", "512")
    assert code == 2 and not settings
    assert data["code"] == "usage"
    assert "(CommunicateWithAllReduceAndLayerNormFn._gather_hidden_states_and_residual: " in data["error"]
    assert data["error"].endswith(
        "`sm120patch apply --fuse-up-to measured`, then a plain `sm120patch bench server`, compare the limits there"
    )
