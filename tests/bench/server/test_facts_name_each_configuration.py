"""bench server's facts under its table (``render.render``), from results built by hand
(hand.py): each configuration's counts and the plain allreduces its own runs took, under the
table's name for it (``fusion off``) or, beyond the table, its own name (``pcie-ipc``)."""

from __future__ import annotations

import io

from rich.console import Console

from sm120patch.bench.server import render
from sm120patch.bench.server.counter import Calls, Counts
from tests.bench.server.hand import result, run


def took(backend: str) -> Counts:
    """A run of two processes whose plain allreduces went to ``backend``: 2 eager, 2 captured."""
    return Counts(2, 2, allreduce={backend: Calls(2, 2)})


#: Two default runs whose allreduces went two ways, one fusion run, one PCIe-IPC run.
RUNS = [
    run("off", 1, {1: 10.0, 8: 12.0}, counts=took("custom allreduce")),
    run("off", 2, {1: 10.0, 8: 12.0}, counts=took("NCCL")),
    run("on", 1, {1: 9.0, 8: 11.0}),
    run("off", 1, {1: 9.5, 8: 11.5}, config="pcie-ipc", counts=took("PCIe-IPC")),
]


def facts() -> list[str]:
    """The text as a pipe gets it: each fact whole on a line."""
    buffer = io.StringIO()
    render.render(result(runs=RUNS), Console(file=buffer, width=120, color_system=None))
    return buffer.getvalue().splitlines()


def test_a_configuration_beyond_the_table_is_under_its_own_name() -> None:
    lines = facts()
    assert "pcie-ipc: the fused kernel was never called" in lines
    assert "pcie-ipc: plain allreduces: PCIe-IPC 4x" in lines


def test_each_configuration_says_every_way_its_own_runs_took_the_allreduces() -> None:
    lines = facts()
    assert "fusion off: plain allreduces: custom allreduce 4x / plain allreduces: NCCL 4x" in lines
    assert not any(line.startswith("fusion on: plain allreduces") for line in lines)  # its run saw none
