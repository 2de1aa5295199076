"""SM12x is compute capability 12.x: the RTX PRO 6000 / RTX 5090 (12.0) and GB10 (12.1)."""

from __future__ import annotations

import pytest

from sm120patch.runner.gpus import Gpu, GpuReport


@pytest.mark.parametrize(
    ("capability", "sm12x"), [((12, 0), True), ((12, 1), True), ((10, 0), False), ((9, 0), False), ((11, 0), False)]
)
def test_every_12_x_is_sm12x(capability: tuple[int, int], sm12x: bool) -> None:
    assert Gpu(0, "GPU", capability).sm12x is sm12x


def test_a_gb10_host_is_an_sm12x_host() -> None:
    report = GpuReport((Gpu(0, "NVIDIA GB10", (12, 1)),), "nvidia-smi")
    assert [g.index for g in report.sm12x] == [0]
