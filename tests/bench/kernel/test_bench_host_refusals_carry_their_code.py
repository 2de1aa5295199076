"""Every way ``bench kernel`` cannot run on this host or interpreter (bench/kernel/measure.run
and run_probe) carries the code ``bench-host``: a probe that fails, a host the probe's answer
refuses, and a rank that finds no kernel, a broken environment or a declined fusion."""

from __future__ import annotations

from typing import Any

import pytest

from sm120patch.bench.kernel import measure
from sm120patch.errors import ExitCode, ToolError
from sm120patch.runner import ProbeError
from sm120patch.runner.ranks import FailureKind, RankFailure
from sm120patch.sglang.fusion_call import read_call
from tests.bench.kernel.test_measure import PY, STANDIN_DONE, Ranks, probe, settings


def test_a_probe_that_fails_is_bench_host(monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(*args: Any, **kwargs: Any) -> Any:
        raise ProbeError(f"{PY} could not import torch and FlashInfer for bench: it ran past 30 s")

    monkeypatch.setattr(measure, "run_script", fails)
    with pytest.raises(ToolError) as raised:
        measure.run_probe(PY, 2, 1.0)
    assert (raised.value.code, raised.value.exit_code) == ("bench-host", ExitCode.ENVIRONMENT)


def test_a_refused_host_is_bench_host(monkeypatch: pytest.MonkeyPatch) -> None:
    Ranks(monkeypatch, probe(2), STANDIN_DONE)
    with pytest.raises(ToolError) as raised:
        measure.run(settings(tp=4), read_call(None, None), "`--off`")
    assert (raised.value.code, raised.value.exit_code) == ("bench-host", ExitCode.ENVIRONMENT)


@pytest.mark.parametrize(
    ("kind", "exit_code"),
    [
        (FailureKind.NO_KERNEL, ExitCode.ENVIRONMENT),
        (FailureKind.ENVIRONMENT, ExitCode.ENVIRONMENT),
        (FailureKind.DECLINED, ExitCode.NOT_AS_ASKED),
    ],
)
def test_a_rank_that_cannot_run_here_is_bench_host(
    monkeypatch: pytest.MonkeyPatch, kind: FailureKind, exit_code: ExitCode
) -> None:
    ranks = Ranks(monkeypatch, probe(2), STANDIN_DONE)
    ranks.failure = RankFailure(1, "workspace", kind, "no SM120 build")
    with pytest.raises(ToolError) as raised:
        measure.run(settings(), read_call(None, None), "`--off`")
    assert (raised.value.code, raised.value.exit_code) == ("bench-host", exit_code)
