"""``Row.with_timing``: a variant measured again keeps the allreduces the row already names, and
names one for the variant only where it is given."""

from __future__ import annotations

from sm120patch.bench.kernel.measure import PCIE_IPC, UNFUSED, Timing
from tests.bench.kernel.rows import measured_row

ROW = measured_row(1, Timing(5.0, 6.0), Timing(20.0, 21.0), Timing(4.0, 5.0), {}, {}, True, allreduce_name="NCCL")


def test_a_named_allreduce_is_added_beside_the_ones_named_before() -> None:
    row = ROW.with_timing(PCIE_IPC, Timing(4.0, 4.5), "PCIe-IPC")
    assert row.allreduces == {UNFUSED: "NCCL", PCIE_IPC: "PCIe-IPC"}
    assert (row.allreduce_name, row.pcie_ipc_name, row.timings[PCIE_IPC]) == ("NCCL", "PCIe-IPC", Timing(4.0, 4.5))


def test_a_timing_without_an_allreduce_names_none_for_it() -> None:
    row = ROW.with_timing(PCIE_IPC, Timing(4.0, 4.5))
    assert row.allreduces == {UNFUSED: "NCCL"} and row.timings[PCIE_IPC] == Timing(4.0, 4.5)
