"""Which allreduce sglang runs on this host with fusion off: what fusion has to beat.

Read from the released wheels (``GroupCoordinator.all_reduce`` and its communicators): the
custom allreduce takes tensors up to 8 MiB at TP 2, or at any TP with full NVLink, and only
where the GPUs pass its P2P test; with more than two GPUs and no full NVLink sglang turns it
off at start-up and every allreduce is NCCL.  From 0.5.13 a full-NVLink host gets the custom
allreduce V2 (up to 16 MiB).  0.5.21 adds an opt-in for PCIe hosts,
``SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1`` (FlashInfer's PCIe-IPC allreduce, sglang#34528): on an
SM12x PCIe box it competes with fusion, so doctor says it is there, whether it is on, and
that fusion takes the plain allreduces away from it (``pcie_ipc``); bench can measure both.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from sm120patch.doctor.findings import HostFinding, Severity
from sm120patch.doctor.host import Host
from sm120patch.sglang.options import PCIE_IPC_FLAG, pcie_ipc_option
from sm120patch.sglang.tree import SglangTree

V2_FROM = Version("0.5.13")
SOURCE = "sglang's GroupCoordinator.all_reduce and custom allreduce (srt/distributed), read per release"


def _version(tree: SglangTree | None) -> Version | None:
    try:
        return Version(tree.version) if tree is not None and tree.version else None
    except InvalidVersion:
        return None


def _full_nvlink(host: Host, tp: int) -> bool | None:
    """NVLink between every pair of the first ``tp`` GPUs; None where NVML did not say."""
    links = host.facts.nvlink
    if links is None:
        return None
    pairs = [link for link in links if link.source < tp and link.target < tp]
    return len(pairs) == tp * (tp - 1) and all(link.ok for link in pairs)


def _p2p(host: Host, tp: int) -> bool:
    pairs = [p for p in host.facts.p2p if p.source < tp and p.target < tp]
    return len(pairs) == tp * (tp - 1) and all(p.ok for p in pairs)


def allreduce(tree: SglangTree | None, host: Host, tp: int | None) -> list[HostFinding]:
    """One finding: the allreduce sglang picks here at ``tp`` (every GPU torch sees by
    default) with fusion off, and why."""
    if not host.facts.torch_answered:
        return []
    world = tp or len(host.facts.gpus)
    if world < 2:
        return []
    version = _version(tree)
    release = f"sglang {tree.version}" if tree is not None and tree.version else "sglang"
    has_pcie_ipc = tree is not None and pcie_ipc_option(tree)
    nvlink = _full_nvlink(host, world)
    sm12x = any(g.sm12x for g in host.facts.gpus[:world])
    where = f"TP {world}"
    if nvlink:
        v2 = version is None or version >= V2_FROM
        name = "custom allreduce V2 (up to 16 MiB)" if v2 else "custom allreduce (up to 8 MiB)"
        summary = f"{release} allreduce at {where}: {name}, NCCL above"
        detail = "every GPU pair has NVLink (NVML), so sglang keeps its custom allreduce at any TP"
        return [HostFinding("allreduce", Severity.INFO, summary, detail, SOURCE)]
    link = "no full NVLink" if nvlink is False else "NVLink not known (NVML did not answer; read as PCIe)"
    if not _p2p(host, world):
        summary = f"{release} allreduce at {where}: NCCL"
        detail = f"{link}; the custom allreduce needs P2P between the GPUs and these lack it"
        return [HostFinding("allreduce", Severity.INFO, summary, detail, SOURCE)]
    if world == 2:
        summary = f"{release} allreduce at {where}: custom allreduce up to 8 MiB, NCCL above"
        detail = f"{link}; at TP 2 sglang keeps its custom allreduce over PCIe (up to 585 tokens at hidden 7168, bf16)"
        return [HostFinding("allreduce", Severity.INFO, summary, detail, SOURCE)]
    summary = f"{release} allreduce at {where}: NCCL"
    detail = f"{link}: sglang turns its custom allreduce off with more than 2 GPUs without full NVLink"
    if has_pcie_ipc and sm12x:
        set_here = host.serving_env.get(PCIE_IPC_FLAG)
        detail += (
            f"; this release has {PCIE_IPC_FLAG}=1 (FlashInfer's PCIe-IPC allreduce for decode-sized batches, "
            f"sglang#34528){' (set here)' if set_here == '1' else ''}, a competitor to fusion on this host: "
            f"`{PCIE_IPC_FLAG}=1 sm120patch bench kernel --tp {world}` measures it"
        )
    return [HostFinding("allreduce", Severity.INFO, summary, detail, SOURCE)]


PCIE_IPC_SOURCE = (
    "sglang's pcie_ipc_ar.py docstring (8x SM120) and GroupCoordinator.all_reduce (srt/distributed), "
    "0.5.21+; sglang#34528"
)
#: The PCIe-IPC docstring's figures, one 8x SM120 host (sglang#34528).
PCIE_IPC_FIGURES = (
    "upstream measured 12 KiB in 5.3 µs vs NCCL's 205 µs, and at TP 8 with 8k context TPOT 21.1 -> 13.6 ms "
    "(35 -> 48 tok/s, +37 %)"
)
_TRUE = ("true", "1", "yes", "y")  # what sglang's EnvBool reads as set (srt/environ.py)


def pcie_ipc(tree: SglangTree | None, host: Host, tp: int | None) -> list[HostFinding]:
    """On a PCIe SM12x host whose sglang has the PCIe-IPC allreduce (0.5.21+): that it is
    there and off (or on, where the environment doctor sees sets it), and that fusion takes
    the plain allreduces from it and from the custom allreduce."""
    if tree is None or not pcie_ipc_option(tree) or not host.facts.torch_answered:
        return []
    world = tp or len(host.facts.gpus)
    if world < 2 or _full_nvlink(host, world) or not any(g.sm12x for g in host.facts.gpus[:world]):
        return []
    release = f"sglang {tree.version}" if tree.version else "this sglang"
    value = host.serving_env.get(PCIE_IPC_FLAG)
    on = value is not None and value.lower() in _TRUE
    state = (
        f"on ({PCIE_IPC_FLAG}={value} in the environment doctor sees)"
        if on
        else f"off ({PCIE_IPC_FLAG} is not set in the environment doctor sees; `{PCIE_IPC_FLAG}=1` turns it on)"
    )
    summary = f"{release} has a PCIe-IPC allreduce for PCIe SM12x hosts, {state}"
    detail = (
        "with fusion on, plain allreduces leave the custom allreduce and PCIe-IPC for FlashInfer's kAllReduce "
        "(GroupCoordinator.all_reduce asks _can_use_flashinfer_allreduce first); "
        f"`sm120patch bench server --tp {world}` decides between them on this host; {PCIE_IPC_FIGURES}"
    )
    return [HostFinding("pcie-ipc", Severity.INFO, summary, detail, PCIE_IPC_SOURCE)]
