"""``sm120patch doctor``: what stands between this host and a running fused allreduce.

Read-only.  Each finding states one fact and where it comes from (a command's output, a
file, an upstream issue).  A fact that blocks the fused path is an error where an SM12x
GPU is present, a warning elsewhere; "no GPU" is an answer, not an error.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from sm120patch.doctor import gpus as gpu_module
from sm120patch.locate.tree import SglangTree
from sm120patch.plan import releases
from sm120patch.probes import host_facts, run_script


class Severity(str, Enum):
    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Severity
    summary: str
    detail: str = ""
    source: str = ""

    def to_json(self) -> dict[str, str]:
        return {
            "id": self.id,
            "severity": self.severity.value,
            "summary": self.summary,
            "detail": self.detail,
            "source": self.source,
        }


@dataclass
class Host:
    """What was read off the host: GPUs and what the serving interpreter's torch and CUDA
    driver bindings say (``host_facts``)."""

    gpus: gpu_module.GpuReport
    probe: dict[str, Any]
    python: str
    alloc_conf: str | None


@dataclass
class DoctorReport:
    findings: list[Finding] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if any(f.severity is Severity.ERROR for f in self.findings) else 0

    @property
    def headline(self) -> str:
        errors = [f for f in self.findings if f.severity is Severity.ERROR]
        warnings = [f for f in self.findings if f.severity is Severity.WARNING]
        if errors:
            return f"{len(errors)} error(s) stand between this host and the fused allreduce: " + ", ".join(
                f.id for f in errors
            )
        if warnings:
            return f"no blocking error; {len(warnings)} warning(s) to read"
        return "nothing stands in the way of the fused allreduce"


def run_host_facts(python: str, timeout: float = 120.0) -> dict[str, Any]:
    """Run ``host_facts`` in the serving interpreter; a failure is part of the answer."""
    try:
        proc = run_script(python, host_facts.__file__, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"could not run {python} ({exc})"}
    try:
        data: dict[str, Any] = json.loads(proc.stdout)
        return data
    except ValueError:
        last = (proc.stderr.strip() or f"exit {proc.returncode}").splitlines()[-1]
        return {"error": f"{python} {host_facts.__file__} gave no answer: {last}"}


def read_host(python: str, env: Mapping[str, str] | None = None) -> Host:
    env = os.environ if env is None else env
    return Host(gpu_module.from_nvidia_smi(), run_host_facts(python), python, env.get("PYTORCH_CUDA_ALLOC_CONF"))


def _gpus(host: Host) -> tuple[list[gpu_module.Gpu], str]:
    """nvidia-smi first; torch in the serving interpreter when nvidia-smi gives nothing."""
    if host.gpus.answered:
        return list(host.gpus.gpus), host.gpus.source
    seen = [
        gpu_module.Gpu(g["index"], g["name"], (g["capability"][0], g["capability"][1]))
        for g in host.probe.get("gpus") or []
    ]
    torch = host.probe.get("torch") or {}
    answer = "answered" if torch.get("ok") else f"did not answer: {torch.get('error') or host.probe.get('error')}"
    return seen, f"{host.gpus.source} ({host.gpus.error}); torch.cuda in {host.python} ({answer})"


def diagnose(
    tree: SglangTree | None,
    locate_error: str | None,
    states: Mapping[str, str],
    host: Host,
    tp: int | None = None,
) -> DoctorReport:
    """Judge what was read.  ``states`` is each patch's state in ``tree`` (verify's plan)."""
    report = DoctorReport()
    add = report.findings.append
    gpus, gpu_source = _gpus(host)
    sm12x = [g for g in gpus if g.sm12x]
    blocking = Severity.ERROR if sm12x else Severity.WARNING

    if not gpus:
        add(Finding("gpus", Severity.INFO, "no NVIDIA GPU seen", "", gpu_source))
    elif sm12x:
        add(
            Finding(
                "gpus",
                Severity.OK,
                f"{len(sm12x)} SM12x GPU(s): the patches matter here",
                "; ".join(g.describe() for g in gpus),
                gpu_source,
            )
        )
    else:
        add(
            Finding(
                "gpus",
                Severity.INFO,
                "no SM12x GPU: the patches change nothing at run time on this host",
                "; ".join(g.describe() for g in gpus),
                gpu_source,
            )
        )

    if tree is None:
        add(Finding("sglang", Severity.ERROR, "no sglang found", locate_error or "", "sm120patch locate"))
    else:
        add(
            Finding(
                "sglang",
                Severity.INFO,
                f"sglang {tree.version or '(unknown version)'} ({tree.install_kind.value})",
                str(tree.package_dir),
                tree.how_found,
            )
        )
        _flashinfer_finding(report, tree, blocking)
    _patch_findings(report, tree, states, blocking)
    _host_findings(report, host, gpus, states, blocking)
    if tree is not None:
        _launch_findings(report, tree, tp)
    return report


def _patch_findings(
    report: DoctorReport, tree: SglangTree | None, states: Mapping[str, str], blocking: Severity
) -> None:
    source = f"sm120patch verify ({tree.package_dir})" if tree is not None else "sm120patch verify"
    for pid, state in states.items():
        if state in ("applied", "not-needed"):
            report.findings.append(Finding(f"patch:{pid}", Severity.OK, f"{pid}: {state}", "", source))
        elif state == "pending":
            report.findings.append(
                Finding(f"patch:{pid}", blocking, f"{pid}: pending (not applied)", "run `sm120patch apply`", source)
            )
        else:
            report.findings.append(
                Finding(
                    f"patch:{pid}",
                    blocking,
                    f"{pid}: {state}",
                    "see `sm120patch verify` for what the code looks like",
                    source,
                )
            )


def _flashinfer_finding(report: DoctorReport, tree: SglangTree, blocking: Severity) -> None:
    facts = tree.flashinfer_facts
    pin = releases.pin_for(tree.version)
    if not facts.found:
        report.findings.append(
            Finding(
                "flashinfer",
                blocking,
                "FlashInfer is not installed beside sglang",
                f"sglang {tree.version} pins {pin}" if pin else "",
                facts.source,
            )
        )
        return
    name = f"FlashInfer {facts.version or '(unknown version)'}"
    if facts.sm12x_kernel:
        report.findings.append(
            Finding("flashinfer", Severity.OK, f"{name} builds the trtllm allreduce for SM12x", "", facts.source)
        )
    elif facts.sm12x_kernel is None:
        report.findings.append(
            Finding(
                "flashinfer",
                Severity.WARNING,
                f"{name}: cannot tell whether it builds the SM12x kernel",
                "",
                facts.source,
            )
        )
    else:
        report.findings.append(
            Finding(
                "flashinfer",
                blocking,
                f"{name} lacks the SM12x allreduce kernel (>= {releases.FLASHINFER_SM12X} needed)",
                f"the fused path fails at JIT on SM12x (sglang#15650); pip install -U "
                f"'flashinfer-python>={releases.FLASHINFER_SM12X}'",
                f"{facts.source}; flashinfer#3903",
            )
        )


def _host_findings(
    report: DoctorReport, host: Host, gpus: list[gpu_module.Gpu], states: Mapping[str, str], blocking: Severity
) -> None:
    add = report.findings.append
    probe = host.probe
    torch = probe.get("torch") or {}
    driver = probe.get("driver") or {}
    where = f"{host.python} ({host_facts.__name__})"
    skipped = []
    if probe.get("error") or not torch.get("ok"):
        skipped = ["P2P access", "multicast", "GPUDirect RDMA with VMM"]
        reason = probe.get("error") or torch.get("error") or "torch did not answer"
    elif not driver.get("ok"):
        skipped = ["multicast", "GPUDirect RDMA with VMM"]
        reason = driver.get("error") or "the CUDA driver bindings did not answer"
    if skipped:
        add(
            Finding(
                "host-checks",
                Severity.WARNING,
                f"skipped: {', '.join(skipped)}",
                f"torch / cuda.bindings did not import or answer in {host.python}: {reason}",
                where,
            )
        )
    if "P2P access" not in skipped and gpus:
        pairs = probe.get("p2p") or []
        missing = [f"{i}->{j}" for i, j, ok in pairs if not ok]
        if len(gpus) < 2:
            add(
                Finding(
                    "p2p",
                    Severity.INFO,
                    "one GPU: no peer access needed (and no allreduce at TP1)",
                    "",
                    f"torch.cuda.can_device_access_peer in {host.python}",
                )
            )
        elif missing:
            add(
                Finding(
                    "p2p",
                    blocking,
                    f"no P2P access between GPUs {', '.join(missing)}",
                    "the trtllm allreduce exchanges IPC buffers between GPUs and needs peer access",
                    f"torch.cuda.can_device_access_peer in {host.python}",
                )
            )
        else:
            add(
                Finding(
                    "p2p",
                    Severity.OK,
                    f"P2P access between all {len(pairs)} GPU pairs",
                    "",
                    f"torch.cuda.can_device_access_peer in {host.python}",
                )
            )
    devices = probe.get("devices") or []
    if "multicast" not in skipped and devices:
        source = f"cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED) via {driver.get('module')}"
        without = [d["index"] for d in devices if not d["multicast"]]
        preflight = states.get("workspace-preflight")
        if not without:
            add(Finding("multicast", Severity.OK, "multicast supported on every GPU", "", source))
        elif preflight in ("applied", "not-needed"):
            add(
                Finding(
                    "multicast",
                    Severity.INFO,
                    f"no multicast on GPU(s) {without}",
                    f"workspace-preflight is {preflight}: the workspace preflight does not ask "
                    "for it on SM12x, and FlashInfer allocates without it",
                    source,
                )
            )
        else:
            add(
                Finding(
                    "multicast",
                    blocking,
                    f"no multicast on GPU(s) {without}",
                    "sglang's workspace preflight queries cuMulticastGetGranularity, fails here and "
                    "turns fusion off for the run; `sm120patch apply` (workspace-preflight) fixes that",
                    f"{source}; sglang#32330",
                )
            )
        gdr_attribute = "CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED"
        source = f"cuDeviceGetAttribute({gdr_attribute}) via {driver.get('module')}"
        without = [d["index"] for d in devices if not d["gdr_vmm"]]
        if without:
            add(
                Finding(
                    "gdr",
                    blocking,
                    f"no GPUDirect RDMA with VMM on GPU(s) {without}",
                    "FlashInfer and sglang's preflight allocate the workspace with "
                    "gpuDirectRDMACapable=1, which fails without it (made optional by flashinfer#4634, "
                    "not in a release yet)",
                    f"{source}; flashinfer#4634",
                )
            )
        else:
            add(Finding("gdr", Severity.OK, "GPUDirect RDMA with VMM supported on every GPU", "", source))
    conf = host.alloc_conf or ""
    if "expandable_segments:true" in conf.replace(" ", "").lower():
        add(
            Finding(
                "alloc-conf",
                blocking,
                f"PYTORCH_CUDA_ALLOC_CONF={conf}",
                "expandable segments break the CUDA IPC the fused allreduce relies on; unset it for the server",
                "environment variable PYTORCH_CUDA_ALLOC_CONF",
            )
        )
    else:
        add(
            Finding(
                "alloc-conf",
                Severity.OK,
                f"PYTORCH_CUDA_ALLOC_CONF={conf}" if conf else "PYTORCH_CUDA_ALLOC_CONF is not set",
                "",
                "environment variable PYTORCH_CUDA_ALLOC_CONF",
            )
        )


FUSION_OPTIONS = (
    "--flashinfer-allreduce-fusion-backend",
    "--enable-flashinfer-allreduce-fusion",
    "--enforce-disable-flashinfer-allreduce-fusion",
)


def release_options(tree: SglangTree) -> set[str]:
    """The fusion options this release's server accepts, read from its argument code: an
    ``add_argument("--x")`` literal, or a ServerArgs field ``x: ...`` (0.5.14+ derive the
    option from the field, unless it is marked ``no_cli=True``)."""
    fields = {option[2:].replace("-", "_"): option for option in FUSION_OPTIONS}
    options: set[str] = set()
    arg_groups = tree.path("srt/arg_groups")
    files = [tree.path("srt/server_args.py"), *sorted(arg_groups.rglob("*.py"))]
    for path in files:
        try:
            source = path.read_bytes()
            parsed = ast.parse(source)
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(parsed):
            if isinstance(node, ast.Constant) and node.value in FUSION_OPTIONS:
                options.add(node.value)
            elif (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id in fields
                and "no_cli=True" not in ast.unparse(node.annotation).replace(" ", "")
            ):
                options.add(fields[node.target.id])
    return options


def _launch_findings(report: DoctorReport, tree: SglangTree, tp: int | None) -> None:
    add = report.findings.append
    options = release_options(tree)
    source = f"{tree.path('srt/server_args.py')} (and arg_groups/)"
    if "--flashinfer-allreduce-fusion-backend" in options:
        flag = "--flashinfer-allreduce-fusion-backend trtllm"
        detail = "auto resolves to trtllm on one node once fusion-backend-resolver is applied"
    elif "--enable-flashinfer-allreduce-fusion" in options:
        flag, detail = "--enable-flashinfer-allreduce-fusion", ""
    else:
        add(Finding("launch", Severity.WARNING, "no fusion option found in this release's arguments", "", source))
        return
    hatch = "--enforce-disable-flashinfer-allreduce-fusion"
    escape = (
        f"{hatch} turns it off again, also for the models sglang auto-enables"
        if hatch in options
        else "no option turns off the auto-enable here; "
        "`sm120patch apply --skip server-args-auto-enable` keeps fusion opt-in"
    )
    add(
        Finding(
            "launch", Severity.INFO, f"turn fusion on with {flag}", "; ".join(p for p in (detail, escape) if p), source
        )
    )
    if tp is None:
        return
    if tp <= 1:
        add(Finding("tp", Severity.INFO, "TP 1: no allreduce to fuse", "", "--tp"))
    elif tp == 2:
        add(
            Finding(
                "tp",
                Severity.INFO,
                "TP 2: upstream measured +5.2 % median decode with fusion on SM12x",
                "2x RTX PRO 6000, PCIe; measure it on this host: `sm120patch bench --tp 2`",
                "sglang#30700 (comment), sglang#32330",
            )
        )
    else:
        add(
            Finding(
                "tp",
                Severity.WARNING,
                f"TP {tp}: a regression was reported at TP4 on PCIe",
                f"measure fused against unfused on this host before keeping it: `sm120patch bench --tp {tp}`; {escape}",
                "sglang#32330 (closing comment)",
            )
        )


def patch_states(tree: SglangTree) -> dict[str, str]:
    """Each patch's state in ``tree`` (``refused`` for all when the release is refused)."""
    from sm120patch.plan.current import current_plan
    from sm120patch.plan.registry import all_patches

    plan = current_plan(tree)
    if plan.refusal:
        return {p.id: "refused" for p in all_patches()}
    return {r.id: r.state.value for r in plan.reports}


def default_python(tree: SglangTree | None, python: str | None) -> str:
    """The interpreter that serves sglang: --python, the one the tree was found in, or ours."""
    if python:
        exe = Path(python)
        if exe.is_dir():
            for candidate in (exe / "bin" / "python", exe / "Scripts" / "python.exe"):
                if candidate.exists():
                    return str(candidate)
        return python
    if tree is not None and tree.python:
        return tree.python
    return sys.executable
