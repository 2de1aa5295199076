"""How the installed sglang calls FlashInfer's fused allreduce, read from its code.

``flashinfer_allreduce_residual_rmsnorm`` in ``srt/layers/flashinfer_comm_fusion.py`` is
the one entry point every release with the fusion has (0.4.9+).  Its parameter defaults
give ``max_token_num``, ``use_oneshot``, ``trigger_completion_at_end`` and ``fp32_acc``
(the layernorm callers pass none of them but ``max_token_num=max(tokens, 2048)``), and its
call into FlashInfer gives ``launch_with_pdl``.  Found by structure, with ``ast``; what is
not found keeps the value of the release named in ``REFERENCE`` and says so.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FUSION_FILE = "srt/layers/flashinfer_comm_fusion.py"
ENTRY = "flashinfer_allreduce_residual_rmsnorm"
FLASHINFER_CALLS = {"allreduce_fusion", "trtllm_allreduce_fusion"}
ROUTED_ALLREDUCE = "flashinfer_allreduce"  # 0.5.18+: plain allreduces go to kAllReduce with fusion on
REFERENCE = "0.5.23"
#: sglang 0.5.23's values, the newest release read (``flashinfer_comm_fusion.py``).
REFERENCE_CALL: dict[str, Any] = {
    "max_token_num": 2048,
    "use_oneshot": None,
    "trigger_completion_at_end": False,
    "fp32_acc": True,
    "launch_with_pdl": True,
}
#: FlashInfer's oneshot/twoshot table is keyed by these world sizes; any other (16) raises KeyError.
AUTO_ONESHOT_WORLDS = (2, 4, 8)


@dataclass(frozen=True)
class SglangCall:
    """The arguments of the fused call, and where each came from."""

    values: dict[str, Any]
    source: str  # "sglang 0.5.9 (srt/layers/flashinfer_comm_fusion.py:142)" or the fallback
    defaulted: tuple[str, ...] = ()  # names that kept REFERENCE's value
    notes: list[str] = field(default_factory=list)
    #: With fusion on, the release sends plain allreduces to FlashInfer's kAllReduce too
    #: (``flashinfer_allreduce`` in its fusion module, 0.5.18+).
    routes_allreduce: bool = False

    def for_world(self, world: int) -> SglangCall:
        """``use_oneshot=None`` only where FlashInfer's table knows the world size."""
        if self.values["use_oneshot"] is not None or world in AUTO_ONESHOT_WORLDS:
            return self
        values = dict(self.values, use_oneshot=True)
        note = (
            f"use_oneshot=True: sglang passes None, but FlashInfer's oneshot table knows only TP "
            f"{', '.join(map(str, AUTO_ONESHOT_WORLDS))} (KeyError at TP {world})"
        )
        return SglangCall(values, self.source, self.defaulted, [*self.notes, note], self.routes_allreduce)


def _literal(node: ast.expr) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except ValueError:
        return False, None


def _entry(tree: ast.Module) -> ast.FunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == ENTRY:
            return node
    return None


def _defaults(func: ast.FunctionDef) -> dict[str, Any]:
    args = func.args
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
    found = {}
    for arg, default in pairs:
        ok, value = _literal(default)
        if ok:
            found[arg.arg] = value
    return found


def _call_keywords(func: ast.FunctionDef) -> dict[str, Any]:
    """Literal keywords of the call into FlashInfer: a direct call, or the ``dict(...)``
    that 0.5.13+ build and pass as ``**kwargs``."""
    found: dict[str, Any] = {}
    for node in ast.walk(func):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        is_kwargs_dict = name == "dict" and any(k.arg == "pattern" for k in node.keywords)
        if name in FLASHINFER_CALLS or is_kwargs_dict:
            for keyword in node.keywords:
                ok, value = _literal(keyword.value)
                if keyword.arg and ok:
                    found.setdefault(keyword.arg, value)
    return found


def read_call(package_dir: Path | None, version: str | None) -> SglangCall:
    """The installed release's call (``package_dir``: the ``sglang`` package), else 0.5.23's."""
    fallback = f"sglang {REFERENCE}'s call (the newest release read)"
    if package_dir is None:
        return SglangCall(
            dict(REFERENCE_CALL),
            f"{fallback}: no sglang located (--python / --sglang-path)",
            tuple(REFERENCE_CALL),
            routes_allreduce=True,  # as 0.5.23 does
        )
    path = package_dir / FUSION_FILE
    try:
        module = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return SglangCall(dict(REFERENCE_CALL), f"{fallback}: {path} not readable", tuple(REFERENCE_CALL))
    func = _entry(module)
    release = f"sglang {version}" if version else "the installed sglang"
    if func is None:
        return SglangCall(
            dict(REFERENCE_CALL), f"{fallback}: {release} has no {ENTRY}() in {FUSION_FILE}", tuple(REFERENCE_CALL)
        )
    read = {**_defaults(func), **_call_keywords(func)}
    values = {name: read.get(name, reference) for name, reference in REFERENCE_CALL.items()}
    defaulted = tuple(name for name in REFERENCE_CALL if name not in read)
    routes = any(isinstance(n, ast.FunctionDef) and n.name == ROUTED_ALLREDUCE for n in module.body)
    return SglangCall(values, f"{release} ({FUSION_FILE}:{func.lineno}, {ENTRY})", defaulted, routes_allreduce=routes)
