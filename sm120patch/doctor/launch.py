"""How sglang is launched: by which interpreter, with which fusion options, and what doctor
says about the launch (the fusion flag, the escape hatch, the TP size).

``bench`` uses the first two as well: ``default_python`` to run in, ``release_options`` to
say how to keep fusion off.
"""

from __future__ import annotations

import ast
import sys

from sm120patch.doctor.findings import HostFinding, Severity
from sm120patch.locate.tree import SglangTree, interpreter

BACKEND = "--flashinfer-allreduce-fusion-backend"  # 0.5.14+
ENABLE = "--enable-flashinfer-allreduce-fusion"
HATCH = "--enforce-disable-flashinfer-allreduce-fusion"  # 0.5.14+: fusion off, auto-enable included
FUSION_OPTIONS = (BACKEND, ENABLE, HATCH)


def default_python(tree: SglangTree | None, python: str | None) -> str:
    """The interpreter that serves sglang: --python (an env root stands for its python), the
    one the tree was found in, or ours."""
    if python:
        return str(interpreter(python))
    if tree is not None and tree.python:
        return tree.python
    return sys.executable


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
        except (OSError, SyntaxError, ValueError):  # ValueError: null bytes in the source
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
    return (
        "no option turns off the auto-enable here; "
        "`sm120patch apply --skip server-args-auto-enable` keeps fusion opt-in"
    )


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
                "TP 2: upstream measured +5.2 % median decode with fusion on SM12x",
                "2x RTX PRO 6000, PCIe; measure it on this host: `sm120patch bench --tp 2`",
                "sglang#30700 (comment), sglang#32330",
            )
        ]
    return [
        HostFinding(
            "tp",
            Severity.WARNING,
            f"TP {size}: a regression was reported at TP4 on PCIe",
            f"measure fused against unfused on this host before keeping it: `sm120patch bench --tp {size}`; "
            f"{escape(options)}",
            "sglang#32330 (closing comment)",
        )
    ]
