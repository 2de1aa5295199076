"""``sm120patch doctor``: what stands between this host and a running fused allreduce.

Read-only.  Each finding states one fact and where it comes from (a command's output, a
file, an upstream issue).  A fact that blocks the fused path is an error where an SM12x
GPU is present, a warning elsewhere; "no GPU" is an answer, not an error.

The pipeline: ``patch_states`` and ``host.read_host`` read; ``checks`` and ``launch`` hold
one function per check, each returning its findings; ``diagnose`` puts them in one report.
"""

from __future__ import annotations

from collections.abc import Mapping

from sm120patch.doctor import checks, launch
from sm120patch.doctor.findings import DoctorReport, Severity
from sm120patch.doctor.host import Host
from sm120patch.locate.tree import SglangTree
from sm120patch.patchkit.model import State


def diagnose(
    tree: SglangTree | None,
    locate_error: str | None,
    states: Mapping[str, State],
    host: Host,
    tp: int | None = None,
) -> DoctorReport:
    """Judge what was read.  ``states`` is each patch's state in ``tree`` (``patch_states``)."""
    seen, gpu_source = host.visible_gpus()
    blocking = Severity.ERROR if any(g.sm12x for g in seen) else Severity.WARNING
    report = DoctorReport(checks.gpus(seen, gpu_source) + checks.sglang(tree, locate_error))
    if tree is not None:
        report.findings += checks.flashinfer(tree, blocking)
    report.findings += checks.patches(tree, states, blocking)
    report.findings += checks.skipped(host)
    report.findings += checks.p2p(host, seen, blocking)
    report.findings += checks.multicast(host, states, blocking)
    report.findings += checks.gdr(host, blocking)
    report.findings += checks.alloc_conf(host.alloc_conf, blocking)
    if tree is not None:
        options = launch.release_options(tree)
        report.findings += launch.launch(tree, options)
        report.findings += launch.tp(tp, options)
    return report
