"""One function per check of what was read: each returns its findings.

``blocking`` is the severity of a fact that blocks the fused path: an error where an SM12x
GPU is present, a warning elsewhere (``diagnose`` decides).  The launch flags and the TP
size are judged in ``launch``.  Text never shows a Python repr: lists of GPUs read
``GPUs 0, 1``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sm120patch.doctor.findings import HostFinding, Severity
from sm120patch.doctor.host import Host, torch_view
from sm120patch.doctor.remote import host_facts
from sm120patch.output.words import counted
from sm120patch.patcher.exports import State, keeps_fused_path_shut
from sm120patch.runner.gpus import Gpu, describe_all
from sm120patch.runner.visibility import VARIABLE, assignment, gpu_names, select
from sm120patch.sglang import releases
from sm120patch.sglang.tree import SglangTree

#: Patch states that leave nothing to do.
DONE = (State.APPLIED, State.NOT_NEEDED)
#: The spellings of torch's allocator variable: the old one, and the one torch 2.9+ reads first.
ALLOC_CONF_NAMES = host_facts.ALLOC_CONF_NAMES


def _indices(indices: Sequence[int]) -> str:
    return f"GPU {indices[0]}" if len(indices) == 1 else "GPUs " + ", ".join(map(str, indices))


def gpus(
    seen: Sequence[Gpu], source: str, torch_gpus: Sequence[Gpu] = (), unread: Sequence[str] = ()
) -> list[HostFinding]:
    """Which GPUs this host has; no GPU is an answer, not an error.  A GPU whose capability
    nobody could tell is said to be one, and that blockers are then judged as warnings."""
    if not seen:
        if unread:
            detail = "it printed: " + " | ".join(unread[:3])
            return [
                HostFinding("gpus", Severity.WARNING, "nvidia-smi answered, but no line reads as a GPU", detail, source)
            ]
        return [HostFinding("gpus", Severity.INFO, "no NVIDIA GPU seen", "", source)]
    described = describe_all(seen)
    if unread:  # lines that name no GPU it could read: shown, not dropped silently
        described += "; nvidia-smi also printed: " + " | ".join(unread[:3])
    sm12x = [g for g in seen if g.sm12x]
    unknown = [g for g in seen if g.capability is None]
    torch_sm12x = [g for g in torch_gpus if g.sm12x]
    if sm12x:
        return [
            HostFinding(
                "gpus", Severity.OK, f"{counted(len(sm12x), 'SM12x GPU')}: the patches matter here", described, source
            )
        ]
    if unknown and torch_sm12x:
        summary = f"torch sees {counted(len(torch_sm12x), 'SM12x GPU')}: the patches matter here"
        detail = f"{described}; torch: {describe_all(torch_gpus)}"
        return [HostFinding("gpus", Severity.OK, summary, detail, source)]
    if unknown:
        what = "it is an SM12x GPU" if len(unknown) == 1 else "they are SM12x GPUs"
        summary = f"compute capability unknown for {gpu_names(unknown)}: blockers below are warnings, errors if {what}"
        told = describe_all(torch_gpus)
        detail = f"{described}; torch sees: {told}" if told else f"{described}; torch lists no GPU to tell it by"
        return [HostFinding("gpus", Severity.WARNING, summary, detail, source)]
    summary = "no SM12x GPU: the patches change nothing at run time on this host"
    return [HostFinding("gpus", Severity.INFO, summary, described, source)]


def cuda_visible_devices(host: Host) -> list[HostFinding]:
    """``CUDA_VISIBLE_DEVICES`` where it is set: doctor's (which the server inherits) and the
    serving interpreter's, and what it selects of nvidia-smi's GPUs."""
    mine, theirs = host.env.get(VARIABLE), host.serving_env.get(VARIABLE)
    if mine is None and theirs is None:
        return []
    env = host.serving_env  # doctor's own where the serving interpreter did not tell its own
    listed = host.gpus.gpus
    detail = select(theirs, listed, env.get("CUDA_DEVICE_ORDER")).why if listed else ""
    source = f"{VARIABLE} in doctor's environment (the server inherits it)"
    if host.facts.environ is not None:
        source += f" and in os.environ of {host.python}"
        if mine != theirs:
            there = assignment(theirs) if theirs is not None else f"{VARIABLE} unset"
            here = assignment(mine) if mine is not None else f"{VARIABLE} unset"
            detail = "; ".join(p for p in (f"doctor has {here}, the serving interpreter {there}", detail) if p)
    summary = assignment(theirs) if theirs is not None else f"{VARIABLE} unset in the serving interpreter"
    return [HostFinding("cuda-visible-devices", Severity.INFO, summary, detail, source)]


def torch_gpus(host: Host) -> list[HostFinding]:
    """When torch sees fewer GPUs than nvidia-smi lists: which, and why."""
    view = torch_view(host)
    if view is None:
        return []
    which = f"hidden: {gpu_names(view.hidden)}" if view.hidden else "which ones cannot be told (no UUIDs to match)"
    summary = f"torch sees {view.seen} of the {counted(view.listed, 'GPU')} nvidia-smi lists"
    severity = Severity.INFO if view.explained and view.seen else Severity.WARNING
    detail = f"{which}; {view.why}; the server started from this environment sees the same"
    source = f"torch.cuda.device_count() in {host.python}; {host.gpus.source}"
    return [HostFinding("torch-gpus", severity, summary, detail, source)]


def sglang(tree: SglangTree | None, locate_error: str | None) -> list[HostFinding]:
    """The sglang found, or why none was."""
    if tree is None:
        return [HostFinding("sglang", Severity.ERROR, "no sglang found", locate_error or "", "sm120patch locate")]
    summary = f"sglang {tree.version or '(unknown version)'} ({tree.install_kind.value})"
    return [HostFinding("sglang", Severity.INFO, summary, str(tree.package_dir), tree.how_found)]


def flashinfer(tree: SglangTree, blocking: Severity, refused: bool = False) -> list[HostFinding]:
    """Whether the FlashInfer beside sglang builds the trtllm allreduce for SM12x.  On a
    release sm120patch refuses, upgrading sglang comes first (no FlashInfer advice)."""
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
    detail = (
        f"sglang >= {releases.FIRST_PINNING_SM12X} pins a FlashInfer that has it"
        if refused
        else f"the fused path fails at JIT on SM12x (sglang#15650); `pip install -U "
        f"'flashinfer-python>={releases.FLASHINFER_SM12X}'`"
    )
    return [
        HostFinding(
            "flashinfer",
            blocking,
            f"{name} lacks the SM12x allreduce kernel (>= {releases.FLASHINFER_SM12X} needed)",
            detail,
            f"{facts.source}; flashinfer#3903",
        )
    ]


def patches(tree: SglangTree | None, states: Mapping[str, State], blocking: Severity) -> list[HostFinding]:
    """Each patch's state: applied or not needed is fine, anything else blocks."""
    source = f"sm120patch verify ({tree.package_dir})" if tree is not None else "sm120patch verify"
    found = []
    for pid, state in states.items():
        if state in DONE:
            found.append(HostFinding(f"patch:{pid}", Severity.OK, state.value, "", source))
        elif state is State.PENDING:
            summary = "pending (not applied)"
            found.append(HostFinding(f"patch:{pid}", blocking, summary, "run `sm120patch apply`", source))
        elif state is State.SKIPPED and keeps_fused_path_shut(pid):  # as asked, but the fused path stays shut
            detail = (
                "the last apply was asked to leave it out (--only / --skip), and the fused path stays shut on SM12x "
                f"without it; `sm120patch apply --only {pid}` adds it"
            )
            found.append(HostFinding(f"patch:{pid}", blocking, f"{pid}: skipped", detail, source))
        elif state is State.SKIPPED:  # as asked, and harmless to the fused path: told, not held against the host
            detail = "the last apply was asked to leave it out (--only / --skip); a plain `sm120patch apply` adds it"
            found.append(HostFinding(f"patch:{pid}", Severity.INFO, "skipped", detail, source))
        else:
            detail = "see `sm120patch verify` for what the code looks like"
            found.append(HostFinding(f"patch:{pid}", blocking, state.value, detail, source))
    return found


def sm_checks(tree: SglangTree, found: Sequence[str]) -> list[HostFinding]:
    """The SM checks on the fused path that no patch owns: each may keep SM12x off it."""
    source = f"sm120patch's sweep of {tree.package_dir}"
    detail = "a gate sglang added or moved since the patches were written; the fused path may stay shut on SM12x"
    return [HostFinding("sm-check", Severity.WARNING, sentence, detail, source) for sentence in found]


def refused(tree: SglangTree, refusal: str, blocking: Severity) -> list[HostFinding]:
    """A release sm120patch refuses: one finding, the refusal and the upgrade (no patch rows)."""
    release = f"sglang {tree.version}" if tree.version else "this sglang"
    summary = (
        f"{release} cannot be patched: upgrade to sglang >= {releases.FIRST_SUPPORTED} "
        f"(>= {releases.FIRST_PINNING_SM12X} pins a FlashInfer with the SM12x kernel)"
    )
    return [HostFinding("patches", blocking, summary, refusal, f"sm120patch apply ({tree.package_dir})")]


def skipped(host: Host) -> list[HostFinding]:
    """One finding naming the host checks that cannot be judged, and why: torch or the
    driver bindings did not answer, or the driver lists no GPU (a warning where nvidia-smi
    lists some: they are hidden from the server)."""
    facts = host.facts
    where = f"{host.python} ({host_facts.__name__})"
    if not facts.torch_answered:
        names = "P2P access, multicast, GPUDirect RDMA with VMM"
        reason = facts.error or facts.torch.error or "torch did not answer"
    elif not facts.driver_answered:
        names = "multicast, GPUDirect RDMA with VMM"
        reason = facts.driver.error or "the CUDA driver bindings did not answer"
    elif not facts.devices:
        names = "multicast, GPUDirect RDMA with VMM"
        listed = host.gpus.gpus
        value = host.serving_env.get(VARIABLE)
        why = f" ({assignment(value)})" if value is not None else ""
        detail = f"the CUDA driver in {host.python} lists no GPU{why}: there is no device to ask"
        if listed:
            detail += f", while nvidia-smi lists {counted(len(listed), 'GPU')}"
        severity = Severity.WARNING if listed else Severity.INFO
        return [HostFinding("host-checks", severity, f"skipped: {names}", detail, where)]
    else:
        return []
    detail = f"torch / cuda.bindings did not import or answer in {host.python}: {reason}"
    return [HostFinding("host-checks", Severity.WARNING, f"skipped: {names}", detail, where)]


def p2p(host: Host, blocking: Severity, tp: int | None = None) -> list[HostFinding]:
    """Peer access between every pair of the GPUs torch sees (the trtllm allreduce exchanges
    IPC buffers).  Fewer than two GPUs: nothing was checked, never "ok"."""
    facts = host.facts
    if not facts.torch_answered:
        return []
    source = f"torch.cuda.can_device_access_peer in {host.python}"
    count = len(facts.gpus)
    if count < 2:
        wanted = tp is not None and tp > max(count, 1)
        detail = f"--tp {tp} needs peer access between {tp} GPUs" if wanted else ""
        severity = Severity.WARNING if wanted else Severity.INFO
        summary = f"P2P: torch sees {counted(count, 'GPU')}, no pair to check"
        return [HostFinding("p2p", severity, summary, detail, source)]
    expected = count * (count - 1)
    pairs = facts.p2p
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
    if len(pairs) < expected:
        summary = f"P2P: {len(pairs)} of {expected} GPU pairs checked"
        detail = f"torch failed part way: {facts.torch.error}" if facts.torch.error else ""
        return [HostFinding("p2p", Severity.WARNING, summary, detail, source)]
    return [HostFinding("p2p", Severity.OK, f"P2P access between all {len(pairs)} GPU pairs", "", source)]


def multicast(host: Host, states: Mapping[str, State], blocking: Severity) -> list[HostFinding]:
    """Multicast on every GPU, or the workspace-preflight patch that makes it unneeded."""
    facts = host.facts
    if not facts.driver_answered or not facts.devices:
        return []  # ``skipped`` says why
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
                f"no multicast on {_indices(without)}",
                f"workspace-preflight is {preflight.value}: the workspace preflight does not ask "
                "for it on SM12x, and FlashInfer allocates without it",
                source,
            )
        ]
    return [
        HostFinding(
            "multicast",
            blocking,
            f"no multicast on {_indices(without)}",
            "sglang's workspace preflight queries cuMulticastGetGranularity, fails here and "
            "turns fusion off for the run; `sm120patch apply` (workspace-preflight) fixes that",
            f"{source}; sglang#32330",
        )
    ]


def gdr(host: Host, blocking: Severity) -> list[HostFinding]:
    """GPUDirect RDMA with VMM on every GPU (the workspace is allocated gpuDirectRDMACapable)."""
    facts = host.facts
    if not facts.driver_answered or not facts.devices:
        return []  # ``skipped`` says why
    attribute = "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED"
    source = f"cuDeviceGetAttribute({attribute}) via {facts.driver.module}"
    without = [d.index for d in facts.devices if not d.gdr_vmm]
    if not without:
        return [HostFinding("gdr", Severity.OK, "GPUDirect RDMA with VMM supported on every GPU", "", source)]
    return [
        HostFinding(
            "gdr",
            blocking,
            f"no GPUDirect RDMA with VMM on {_indices(without)}",
            "FlashInfer and sglang's preflight allocate the workspace with "
            "gpuDirectRDMACapable=1, which fails without it (made optional by flashinfer#4634, "
            "not in a release yet)",
            f"{source}; flashinfer#4634",
        )
    ]


def _expandable(conf: str) -> bool:
    return "expandable_segments:true" in conf.replace(" ", "").lower()


def alloc_conf(host: Host, blocking: Severity) -> list[HostFinding]:
    """torch's allocator variable, in each spelling the serving torch reads
    (``PYTORCH_ALLOC_CONF`` from torch 2.9, ``PYTORCH_CUDA_ALLOC_CONF``), in doctor's
    environment and the serving interpreter's: expandable segments break the CUDA IPC the
    fusion relies on."""
    torch = host.facts.torch
    reads = torch.alloc_reads if host.facts.torch_answered else None
    names = reads if reads is not None else ALLOC_CONF_NAMES
    settings: list[tuple[str, str]] = []  # (name, value) as set in either environment
    for env in (host.env, host.serving_env):
        for name in ALLOC_CONF_NAMES:
            value = env.get(name)
            if value is not None and value.strip() and (name, value) not in settings:
                settings.append((name, value))
    if not host.facts.torch_answered:
        told = f"torch did not answer in {host.python}: both spellings are checked"
    elif reads is None:
        told = "which spelling this torch reads could not be told"
        told += f" ({torch.alloc_evidence})" if torch.alloc_evidence else ""
        told += ": both are checked"
    else:
        which = " and ".join(reads) if reads else "neither spelling"
        who = f"torch {torch.version}" if torch.version else "torch"
        told = f"{who} in {host.python} reads {which}"
    source = f"{' / '.join(ALLOC_CONF_NAMES)} in doctor's environment and in {host.python}"
    if torch.alloc_evidence and reads is not None:
        source += f"; the names found in {torch.alloc_evidence}"
    bad = [(n, v) for n, v in settings if n in names and _expandable(v)]
    if bad:
        name, value = bad[0]
        detail = (
            "expandable segments break the CUDA IPC the fused allreduce relies on; unset it for the server; " + told
        )
        return [HostFinding("alloc-conf", blocking, f"{name}={value}", detail, source)]
    unread = [(n, v) for n, v in settings if n not in names and _expandable(v)]
    if unread:
        name, value = unread[0]
        return [HostFinding("alloc-conf", Severity.INFO, f"{name}={value} (not read by this torch)", told, source)]
    if settings:
        summary = "; ".join(f"{n}={v}" for n, v in settings)
    else:
        summary = " and ".join(names or ALLOC_CONF_NAMES) + (" is not set" if len(names) == 1 else " are not set")
    return [HostFinding("alloc-conf", Severity.OK, summary, told, source)]


def tp_gpus(host: Host, tp: int | None, blocking: Severity) -> list[HostFinding]:
    """``--tp N`` against the GPUs the server will see: torch's in the serving interpreter,
    else nvidia-smi's as CUDA_VISIBLE_DEVICES selects them."""
    if tp is None:
        return []
    note = ""
    if host.facts.torch_answered:
        visible, who = len(host.facts.gpus), f"torch in {host.python}"
        source = f"torch.cuda.device_count() in {host.python}; --tp"
    elif host.gpus.answered:
        env = host.serving_env
        value = env.get(VARIABLE)
        selection = select(value, host.gpus.gpus, env.get("CUDA_DEVICE_ORDER"))
        visible, who = len(host.gpus.gpus), "nvidia-smi"
        source = f"{host.gpus.source}; --tp"
        if value is not None:
            note = f"; {selection.why}"
            source = f"{host.gpus.source}; {VARIABLE}; --tp"
            if selection.gpus is not None:
                visible, who = len(selection.gpus), f"CUDA under {assignment(value)}"
    else:
        summary = f"TP {tp}: how many GPUs the server will see is unknown"
        detail = "neither nvidia-smi nor torch in the serving interpreter answered"
        return [HostFinding("tp-gpus", Severity.WARNING, summary, detail, "--tp")]
    if tp <= visible:
        summary = f"TP {tp}: {who} shows {counted(visible, 'GPU')}"
        return [HostFinding("tp-gpus", Severity.OK, summary, note.removeprefix("; "), source)]
    listed = len(host.gpus.gpus)
    detail = f"sglang needs one GPU per rank; {who} shows {counted(visible, 'GPU')}"
    if host.gpus.answered and listed > visible:
        detail += f" of the {listed} nvidia-smi lists" + (" (see torch-gpus)" if host.facts.torch_answered else "")
    return [
        HostFinding(
            "tp-gpus", blocking, f"TP {tp} needs {counted(tp, 'GPU')}, {visible} visible", detail + note, source
        )
    ]
