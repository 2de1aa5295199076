"""``sm120patch doctor``: what stands between this host and a running fused allreduce.

Read-only.  Each finding states one fact and where it comes from (a command's output, a
file, an upstream issue).  A fact that blocks the fused path is an error where an SM12x
GPU is present (nvidia-smi's or torch's word), a warning elsewhere; a GPU whose capability
nobody tells is said to be one, so that no error turns into a warning silently.  "No GPU"
is an answer, not an error.

The pipeline: ``patch_states`` and ``host.read_host`` read; ``checks`` and ``launch`` hold
one function per check, each returning its findings; ``diagnose`` puts them in one report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sm120patch.doctor import allreduce, checks, launch_advice
from sm120patch.doctor.findings import DoctorReport, Severity
from sm120patch.doctor.host import Host
from sm120patch.doctor.token_limit import token_limit
from sm120patch.patcher.exports import State
from sm120patch.sglang import releases
from sm120patch.sglang.options import release_options
from sm120patch.sglang.tree import SglangTree


def refusal(tree: SglangTree | None, states: Mapping[str, State]) -> str | None:
    """Why sm120patch refuses this release, where ``states`` says it does."""
    if tree is None or not any(s is State.REFUSED for s in states.values()):
        return None
    return releases.refusal(tree) or "sm120patch refuses this release (see `sm120patch apply`)"


def diagnose(
    tree: SglangTree | None,
    locate_error: str | None,
    states: Mapping[str, State],
    host: Host,
    tp: int | None = None,
    sm_checks: Sequence[str] = (),
) -> DoctorReport:
    """Judge what was read.  ``states`` is each patch's state in ``tree`` (``patch_states``),
    ``sm_checks`` the SM checks on the fused path no patch owns (``tree_states``)."""
    seen, gpu_source = host.visible_gpus()
    sm12x = any(g.sm12x for g in (*seen, *host.torch_gpus))
    blocking = Severity.ERROR if sm12x else Severity.WARNING
    refused = refusal(tree, states)
    report = DoctorReport(
        checks.gpus(seen, gpu_source, host.torch_gpus, host.gpus.unread) + checks.sglang(tree, locate_error),
        gpus=seen,
        refusal=refused,
    )
    report.findings += checks.cuda_visible_devices(host)
    report.findings += checks.torch_gpus(host)
    if tree is not None:
        report.findings += checks.flashinfer(tree, blocking, refused=refused is not None)
    if tree is not None and refused is not None:
        report.findings += checks.refused(tree, refused, blocking)
    else:
        report.findings += checks.patches(tree, states, blocking)
        if tree is not None:
            report.findings += token_limit(tree, states, seen, tp)
    if tree is not None:
        report.findings += checks.sm_checks(tree, sm_checks)
    report.findings += checks.skipped(host)
    report.findings += checks.p2p(host, blocking, tp)
    report.findings += allreduce.allreduce(tree, host, tp)
    report.findings += allreduce.pcie_ipc(tree, host, tp)
    report.findings += checks.multicast(host, states, blocking)
    report.findings += checks.gdr(host, blocking)
    report.findings += checks.alloc_conf(host, blocking)
    report.findings += checks.tp_gpus(host, tp, blocking)
    if tree is not None and refused is None:  # no launch or bench advice for a release apply refuses
        options = release_options(tree)
        report.findings += launch_advice.launch(tree, options)
        report.findings += launch_advice.tp(tp, options)
    return report
