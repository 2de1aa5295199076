"""``sm120patch doctor``: read-only, what stands between this host and the fused kernel."""

from __future__ import annotations

from pathlib import Path

import click

from sm120patch.cli import main
from sm120patch.cli.options import location_options, locators, timeout_option
from sm120patch.cli.run import guarded, show_result
from sm120patch.errors import ToolError


@main.command()
@location_options
@timeout_option
@click.option("--tp", type=click.IntRange(min=1), help="The tensor-parallel size you serve with.")
def doctor(python: str | None, sglang_path: Path | None, as_json: bool, timeout: float, tp: int | None) -> None:
    """Read-only: what stands between this host and a running fused allreduce (GPUs,
    patches, FlashInfer's SM12x kernel, P2P, multicast, GPUDirect RDMA, launch flags).
    Exit 1 when any finding is an error, 2 when no sglang is found (the host checks still run)."""
    python, sglang_path = locators(python, sglang_path)
    from sm120patch.doctor import render
    from sm120patch.doctor.diagnose import diagnose
    from sm120patch.doctor.host import read_host
    from sm120patch.patcher.exports import tree_states
    from sm120patch.runner.locate import default_python, locate

    def run() -> int:
        tree, problem = None, None
        try:
            tree = locate(python=python, sglang_path=sglang_path, timeout=timeout)
        except ToolError as exc:  # no sglang: the host checks still run, then exit 2
            problem = str(exc)
        states, sm_checks = tree_states(tree) if tree is not None else ({}, [])
        host = read_host(default_python(tree, python), timeout=timeout)
        report = diagnose(tree, problem, states, host, tp, sm_checks)
        return show_result(render.DoctorResult(tree, report, problem), as_json)

    guarded(as_json, run)
