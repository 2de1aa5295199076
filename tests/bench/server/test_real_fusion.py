"""The call counter and the fallback detection against sglang's real fusion module (slow: real
releases, the CPU build of torch; fakes of the CUDA parts only, named in real_fusion.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from sm120patch.bench.server import counter, parse
from sm120patch.bench.server.driver import Run, _check
from sm120patch.bench.server.flags import choose
from sm120patch.sglang.options import ENABLE, HATCH
from tests.bench.server.real_fusion import check_source_names, run_real_fusion

pytestmark = pytest.mark.slow
FLAGS = choose({ENABLE, HATCH})
assert FLAGS is not None


def on_run(lines: list[str], counts: Path) -> Run:
    run = Run("on", 1, [])
    run.counts = counter.read(counts)
    run.fallbacks = parse.said(lines, parse.FALLBACKS)
    return run


@pytest.mark.parametrize(("version", "kernel"), [("0.5.13", "allreduce_fusion"), ("0.5.9", "trtllm_allreduce_fusion")])
def test_fused_calls_are_counted_eager_and_in_capture(
    version: str, kernel: str, release: Callable[..., Path], cpu_torch_python: Path, tmp_path: Path
) -> None:
    package = release(version)
    check_source_names(package)
    results, lines, counts_dir = run_real_fusion(cpu_torch_python, package, tmp_path)
    assert results == [True, True], lines
    counts = counter.read(counts_dir)
    assert counts.ran and counts.ranks_fused == 1
    assert counts.fused.as_json() == {"eager": 1, "capture": 1, "fell_back": 0}
    assert counts.entry.as_json() == {"eager": 1, "capture": 1, "fell_back": 0}
    assert counts.sglang_processes == 1
    assert any(line.startswith("FlashInfer workspace initialized for rank 0") for line in lines)
    assert _check(on_run(lines, counts_dir), FLAGS, 2) is None
    (data,) = [json.loads(p.read_text()) for p in counts_dir.glob("*.json")]
    assert set(data["counts"]) == {counter.ENTRY, f"flashinfer.{kernel}[pattern=1]"}


def test_no_multicast_preflight_fallback_is_found(
    release: Callable[..., Path], cpu_torch_python: Path, tmp_path: Path
) -> None:
    results, lines, counts_dir = run_real_fusion(cpu_torch_python, release("0.5.13"), tmp_path, multicast=False)
    assert results == [False, False]
    run = on_run(lines, counts_dir)
    assert not run.counts.ran
    assert run.counts.entry.as_json() == {"eager": 1, "capture": 1, "fell_back": 2}
    problem = _check(run, FLAGS, 2)
    assert problem is not None
    assert problem.startswith(f"fusion was asked for ({ENABLE}) but never ran: the workspace preflight")
    assert "FlashInfer workspace preflight probe failed (cuMulticastGetGranularity failed" in problem


def test_workspace_failure_fallback_is_found(
    release: Callable[..., Path], cpu_torch_python: Path, tmp_path: Path
) -> None:
    results, lines, counts_dir = run_real_fusion(cpu_torch_python, release("0.5.13"), tmp_path, workspace_fails=True)
    assert results == [False, False]
    problem = _check(on_run(lines, counts_dir), FLAGS, 2)
    assert problem is not None and "Disabling flashinfer allreduce fusion permanently" in problem
    assert "FlashInfer's workspace could not be created" in problem
