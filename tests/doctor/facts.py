"""Host facts built directly (no probe, no processes) for the check tests."""

from __future__ import annotations

from sm120patch.doctor.host import DeviceFacts, DriverFacts, Host, HostFacts, PeerAccess, TorchFacts
from sm120patch.runner.gpus import Gpu, GpuReport
from tests.doctor.hostfakes import RTX_PRO_6000

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
    torch_gpus: tuple[Gpu, ...] = TWO_SM120,
    smi: tuple[Gpu, ...] = TWO_SM120,
    environ: dict[str, str] | None = None,
    serving_environ: dict[str, str] | None = None,
) -> Host:
    """Two RTX PRO 6000 on nvidia-smi, and what host_facts says about them (torch sees the
    ``torch_gpus``, the driver the same number of devices)."""
    count = len(torch_gpus)
    facts = HostFacts(
        torch=torch,
        gpus=torch_gpus,
        p2p=tuple(PeerAccess(i, j, p2p[i] if i < 2 else True) for i in range(count) for j in range(count) if i != j),
        driver=driver,
        devices=tuple(DeviceFacts(i, multicast[i % 2], gdr_vmm[i % 2]) for i in range(count)),
        error=error,
        environ=serving_environ,
    )
    if environ is None:
        environ = {} if alloc_conf is None else {"PYTORCH_CUDA_ALLOC_CONF": alloc_conf}
    return Host(GpuReport(smi, "nvidia-smi"), facts, PYTHON, alloc_conf, environ)
