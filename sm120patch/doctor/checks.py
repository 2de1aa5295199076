"""One function per check of what was read: each returns its findings.

``blocking`` is the severity of a fact that blocks the fused path: an error where an SM12x
GPU is present, a warning elsewhere (``diagnose`` decides).  The launch flags and the TP
size are judged in ``launch``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sm120patch.doctor.findings import HostFinding, Severity
from sm120patch.doctor.gpus import Gpu
from sm120patch.doctor.host import Host
from sm120patch.locate.tree import SglangTree
from sm120patch.patchkit.model import State
from sm120patch.plan import releases
from sm120patch.probes import host_facts

#: Patch states that leave nothing to do.
DONE = (State.APPLIED, State.NOT_NEEDED)
ALLOC_CONF_SOURCE = "environment variable PYTORCH_CUDA_ALLOC_CONF"


def gpus(seen: Sequence[Gpu], source: str) -> list[HostFinding]:
    """Which GPUs this host has; no GPU is an answer, not an error."""
    if not seen:
        return [HostFinding("gpus", Severity.INFO, "no NVIDIA GPU seen", "", source)]
    described = "; ".join(g.describe() for g in seen)
    sm12x = [g for g in seen if g.sm12x]
    if sm12x:
        return [
            HostFinding("gpus", Severity.OK, f"{len(sm12x)} SM12x GPU(s): the patches matter here", described, source)
        ]
    summary = "no SM12x GPU: the patches change nothing at run time on this host"
    return [HostFinding("gpus", Severity.INFO, summary, described, source)]


def sglang(tree: SglangTree | None, locate_error: str | None) -> list[HostFinding]:
    """The sglang found, or why none was."""
    if tree is None:
        return [HostFinding("sglang", Severity.ERROR, "no sglang found", locate_error or "", "sm120patch locate")]
    summary = f"sglang {tree.version or '(unknown version)'} ({tree.install_kind.value})"
    return [HostFinding("sglang", Severity.INFO, summary, str(tree.package_dir), tree.how_found)]


def flashinfer(tree: SglangTree, blocking: Severity) -> list[HostFinding]:
    """Whether the FlashInfer beside sglang builds the trtllm allreduce for SM12x."""
    facts = tree.flashinfer_facts
    if not facts.found:
        pin = releases.pin_for(tree.version)
        detail = f"sglang {tree.version} pins {pin}" if pin else ""
        return [HostFinding("flashinfer", blocking, "FlashInfer is not installed beside sglang", detail, facts.source)]
    name = f"FlashInfer {facts.version or '(unknown version)'}"
    if facts.sm12x_kernel:
        summary = f"{name} builds the trtllm allreduce for SM12x"
        return [HostFinding("flashinfer", Severity.OK, summary, "", facts.source)]
    if facts.sm12x_kernel is None:
        summary = f"{name}: cannot tell whether it builds the SM12x kernel"
        return [HostFinding("flashinfer", Severity.WARNING, summary, "", facts.source)]
    return [
        HostFinding(
            "flashinfer",
            blocking,
            f"{name} lacks the SM12x allreduce kernel (>= {releases.FLASHINFER_SM12X} needed)",
            f"the fused path fails at JIT on SM12x (sglang#15650); pip install -U "
            f"'flashinfer-python>={releases.FLASHINFER_SM12X}'",
            f"{facts.source}; flashinfer#3903",
        )
    ]


def patches(tree: SglangTree | None, states: Mapping[str, State], blocking: Severity) -> list[HostFinding]:
    """Each patch's state: applied or not needed is fine, anything else blocks."""
    source = f"sm120patch verify ({tree.package_dir})" if tree is not None else "sm120patch verify"
    found = []
    for pid, state in states.items():
        if state in DONE:
            found.append(HostFinding(f"patch:{pid}", Severity.OK, f"{pid}: {state.value}", "", source))
        elif state is State.PENDING:
            summary = f"{pid}: pending (not applied)"
            found.append(HostFinding(f"patch:{pid}", blocking, summary, "run `sm120patch apply`", source))
        else:
            detail = "see `sm120patch verify` for what the code looks like"
            found.append(HostFinding(f"patch:{pid}", blocking, f"{pid}: {state.value}", detail, source))
    return found


def skipped(host: Host) -> list[HostFinding]:
    """One warning naming the host checks that cannot be judged, and why."""
    facts = host.facts
    if not facts.torch_answered:
        names = "P2P access, multicast, GPUDirect RDMA with VMM"
        reason = facts.error or facts.torch.error or "torch did not answer"
    elif not facts.driver_answered:
        names = "multicast, GPUDirect RDMA with VMM"
        reason = facts.driver.error or "the CUDA driver bindings did not answer"
    else:
        return []
    detail = f"torch / cuda.bindings did not import or answer in {host.python}: {reason}"
    where = f"{host.python} ({host_facts.__name__})"
    return [HostFinding("host-checks", Severity.WARNING, f"skipped: {names}", detail, where)]


def p2p(host: Host, seen: Sequence[Gpu], blocking: Severity) -> list[HostFinding]:
    """Peer access between every pair of GPUs (the trtllm allreduce exchanges IPC buffers)."""
    if not host.facts.torch_answered or not seen:
        return []
    source = f"torch.cuda.can_device_access_peer in {host.python}"
    if len(seen) < 2:
        return [
            HostFinding("p2p", Severity.INFO, "one GPU: no peer access needed (and no allreduce at TP1)", "", source)
        ]
    pairs = host.facts.p2p
    missing = [f"{p.source}->{p.target}" for p in pairs if not p.ok]
    if missing:
        return [
            HostFinding(
                "p2p",
                blocking,
                f"no P2P access between GPUs {', '.join(missing)}",
                "the trtllm allreduce exchanges IPC buffers between GPUs and needs peer access",
                source,
            )
        ]
    return [HostFinding("p2p", Severity.OK, f"P2P access between all {len(pairs)} GPU pairs", "", source)]


def multicast(host: Host, states: Mapping[str, State], blocking: Severity) -> list[HostFinding]:
    """Multicast on every GPU, or the workspace-preflight patch that makes it unneeded."""
    facts = host.facts
    if not facts.driver_answered or not facts.devices:
        return []
    source = f"cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED) via {facts.driver.module}"
    without = [d.index for d in facts.devices if not d.multicast]
    preflight = states.get("workspace-preflight")
    if not without:
        return [HostFinding("multicast", Severity.OK, "multicast supported on every GPU", "", source)]
    if preflight is not None and preflight in DONE:
        return [
            HostFinding(
                "multicast",
                Severity.INFO,
                f"no multicast on GPU(s) {without}",
                f"workspace-preflight is {preflight.value}: the workspace preflight does not ask "
                "for it on SM12x, and FlashInfer allocates without it",
                source,
            )
        ]
    return [
        HostFinding(
            "multicast",
            blocking,
            f"no multicast on GPU(s) {without}",
            "sglang's workspace preflight queries cuMulticastGetGranularity, fails here and "
            "turns fusion off for the run; `sm120patch apply` (workspace-preflight) fixes that",
            f"{source}; sglang#32330",
        )
    ]


def gdr(host: Host, blocking: Severity) -> list[HostFinding]:
    """GPUDirect RDMA with VMM on every GPU (the workspace is allocated gpuDirectRDMACapable)."""
    facts = host.facts
    if not facts.driver_answered or not facts.devices:
        return []
    attribute = "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED"
    source = f"cuDeviceGetAttribute({attribute}) via {facts.driver.module}"
    without = [d.index for d in facts.devices if not d.gdr_vmm]
    if not without:
        return [HostFinding("gdr", Severity.OK, "GPUDirect RDMA with VMM supported on every GPU", "", source)]
    return [
        HostFinding(
            "gdr",
            blocking,
            f"no GPUDirect RDMA with VMM on GPU(s) {without}",
            "FlashInfer and sglang's preflight allocate the workspace with "
            "gpuDirectRDMACapable=1, which fails without it (made optional by flashinfer#4634, "
            "not in a release yet)",
            f"{source}; flashinfer#4634",
        )
    ]


def alloc_conf(conf: str | None, blocking: Severity) -> list[HostFinding]:
    """PYTORCH_CUDA_ALLOC_CONF: expandable segments break the CUDA IPC fusion relies on."""
    conf = conf or ""
    if "expandable_segments:true" in conf.replace(" ", "").lower():
        return [
            HostFinding(
                "alloc-conf",
                blocking,
                f"PYTORCH_CUDA_ALLOC_CONF={conf}",
                "expandable segments break the CUDA IPC the fused allreduce relies on; unset it for the server",
                ALLOC_CONF_SOURCE,
            )
        ]
    summary = f"PYTORCH_CUDA_ALLOC_CONF={conf}" if conf else "PYTORCH_CUDA_ALLOC_CONF is not set"
    return [HostFinding("alloc-conf", Severity.OK, summary, "", ALLOC_CONF_SOURCE)]
