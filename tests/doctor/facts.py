"""Host facts built directly (no probe, no processes) for the check tests."""

from __future__ import annotations

from sm120patch.doctor.gpus import Gpu, GpuReport
from sm120patch.doctor.host import DeviceFacts, DriverFacts, Host, HostFacts, PeerAccess, TorchFacts
from tests.fakes import RTX_PRO_6000

TWO_SM120 = (Gpu(0, RTX_PRO_6000, (12, 0)), Gpu(1, RTX_PRO_6000, (12, 0)))
PYTHON = "/env/bin/python"
TORCH = TorchFacts(ok=True, version="2.9.0", cuda="12.9")
DRIVER = DriverFacts(ok=True, module="cuda.bindings.driver")


def host_with(
    p2p: tuple[bool, bool] = (True, True),
    multicast: tuple[bool, bool] = (False, False),
    gdr_vmm: tuple[bool, bool] = (True, True),
    torch: TorchFacts = TORCH,
    driver: DriverFacts = DRIVER,
    error: str | None = None,
    alloc_conf: str | None = None,
) -> Host:
    """Two RTX PRO 6000 on nvidia-smi, and what host_facts says about them."""
    facts = HostFacts(
        torch=torch,
        gpus=TWO_SM120,
        p2p=(PeerAccess(0, 1, p2p[0]), PeerAccess(1, 0, p2p[1])),
        driver=driver,
        devices=tuple(DeviceFacts(i, multicast[i], gdr_vmm[i]) for i in (0, 1)),
        error=error,
    )
    return Host(GpuReport(TWO_SM120, "nvidia-smi"), facts, PYTHON, alloc_conf)
