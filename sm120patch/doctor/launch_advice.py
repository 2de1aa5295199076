"""What doctor says about how sglang is launched: the fusion flag, the escape hatch, the TP
size (the options themselves and which a release accepts: ``sglang/options.py``)."""

from __future__ import annotations

from sm120patch.doctor.findings import HostFinding, Severity
from sm120patch.patcher.exports import AUTO_ENABLE_OFF
from sm120patch.sglang.options import BACKEND, ENABLE, HATCH
from sm120patch.sglang.tree import SglangTree


def fusion_flag(options: set[str]) -> tuple[str, str] | None:
    """The flag that turns fusion on in this release, and a note on it; None without one."""
    if BACKEND in options:
        return (
            f"{BACKEND} trtllm",
            "auto resolves to trtllm on one node once fusion-backend-resolver is applied",
        )
    if ENABLE in options:
        return ENABLE, ""
    return None


def escape(options: set[str]) -> str:
    """How to turn fusion off again in this release."""
    if HATCH in options:
        return f"{HATCH} turns it off again, also for the models sglang auto-enables"
    return f"no option turns off the auto-enable here; {AUTO_ENABLE_OFF} keeps fusion opt-in"


def launch(tree: SglangTree, options: set[str]) -> list[HostFinding]:
    """Which flag turns fusion on, and which turns it off again."""
    source = f"{tree.path('srt/server_args.py')} (and arg_groups/)"
    flag = fusion_flag(options)
    if flag is None:
        return [
            HostFinding("launch", Severity.WARNING, "no fusion option found in this release's arguments", "", source)
        ]
    name, note = flag
    detail = "; ".join(p for p in (note, escape(options)) if p)
    return [HostFinding("launch", Severity.INFO, f"turn fusion on with {name}", detail, source)]


def tp(size: int | None, options: set[str]) -> list[HostFinding]:
    """What upstream measured at this TP size; nothing without ``--tp`` or a fusion option."""
    if size is None or fusion_flag(options) is None:
        return []
    if size <= 1:
        return [HostFinding("tp", Severity.INFO, "TP 1: no allreduce to fuse", "", "--tp")]
    if size == 2:
        return [
            HostFinding(
                "tp",
                Severity.INFO,
                "TP 2: upstream measured +5.2 % median decode on SM12x with FlashInfer's Lamport allreduce "
                "(not the fused norm) against NCCL",
                "2x RTX PRO 6000, PCIe; measure it on this host: `sm120patch bench kernel --tp 2`",
                "sglang#30700 (comment), sglang#32330",
            )
        ]
    return [
        HostFinding(
            "tp",
            Severity.WARNING,
            f"TP {size}: a regression was reported at TP4 on PCIe",
            f"measure fused against unfused on this host before keeping it: `sm120patch bench kernel --tp {size}`; "
            f"the patched model auto-enable leaves fusion off at TP {size} unless `sm120patch apply "
            f"--auto-enable-tp any` was asked; {escape(options)}",
            "sglang#32330 (closing comment)",
        )
    ]
