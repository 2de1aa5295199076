"""The next sglang release, made from a real one: its targets moved, renamed or respelled the
ways sglang has moved them before, so that role finding is tested on sglang's own code.

Each variant edits a hard-linked copy of a real release (``realtrees.copy_release``) by
replacing whole statements of its text; an edit that no longer matches its release raises,
so a variant never silently tests the release as it was.  No sglang source is kept here:
only the statements that move, written as the release writes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ADD_NORM = "srt/layers/layer_boundary/residual/add_norm.py"
OVERRIDES = "srt/arg_groups/overrides.py"
COMM_FUSION = "srt/layers/flashinfer_comm_fusion.py"
#: Where the variants put what moves out of add_norm.py.
NEW_GATE_MODULE = "srt/layers/layer_boundary/fusion_gates.py"
NEW_FLAGS_MODULE = "srt/layers/layer_boundary/platform_flags.py"

_FLAGS = (
    "_is_sm90_supported = _is_cuda and get_platform().is_sm90\n"
    "_is_sm100_supported = _is_cuda and get_platform().is_sm100\n"
)
_LIMIT = "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048\n"
_GATE_DEF = "def flashinfer_ar_fusion_applies(batch_size: int):\n"
_GATE_CLAUSE = "        (_is_sm90_supported or _is_sm100_supported)\n"


def _replace(path: Path, old: str, new: str) -> None:
    """Replace ``old`` (which must occur exactly once) in ``path``, through a new file: the
    copy is hard-linked to the cached release, which must stay as it is."""
    text = path.read_text()
    if text.count(old) != 1:
        raise AssertionError(f"{path}: expected {old!r} once, found it {text.count(old)} times")
    path.unlink()
    path.write_text(text.replace(old, new))


def _gate_block(text: str) -> str:
    """The gate function of add_norm.py, whole (up to the next top-level definition)."""
    start = text.index(_GATE_DEF)
    end = text.index("\ndef ", start + 1)
    return text[start : end + 1]


def renamed(package: Path) -> None:
    """The gate renamed in place, and every caller with it (as 0.5.22 renamed it)."""
    for path in package.rglob("*.py"):
        text = path.read_text(errors="replace")
        if "flashinfer_ar_fusion_applies" in text:
            path.unlink()
            path.write_text(text.replace("flashinfer_ar_fusion_applies", "ar_norm_fusion_enabled"))


def moved(package: Path) -> None:
    """The gate, its SM flags and its token limit moved into a new module and the gate
    renamed; add_norm.py imports them back under the old names (as 0.5.21 moved the gate
    out of communicator.py with its flags and its limit)."""
    add_norm = package / ADD_NORM
    text = add_norm.read_text()
    gate = _gate_block(text)
    module = (
        '"""The fusion gates of the layer boundary."""\n\n'
        "from sglang.srt.layers.dp_attention import is_dp_attention_enabled\n"
        "from sglang.srt.layers.flashinfer_comm_fusion import (\n"
        "    is_flashinfer_allreduce_unavailable,\n"
        "    uses_cutedsl_ar_fusion,\n"
        ")\n"
        "from sglang.srt.runtime_context import get_exec, get_platform\n"
        "from sglang.srt.utils import is_cuda, is_flashinfer_available\n\n"
        "_is_cuda = is_cuda()\n"
        "_is_flashinfer_available = is_flashinfer_available()\n"
        f"{_FLAGS}\n{_LIMIT}\n\n" + gate.replace("flashinfer_ar_fusion_applies", "ar_norm_fusion_enabled")
    )
    (package / NEW_GATE_MODULE).write_text(module)
    _replace(add_norm, gate, "")
    _replace(add_norm, _FLAGS, "")
    _replace(
        add_norm,
        _LIMIT,
        "from sglang.srt.layers.layer_boundary.fusion_gates import (  # noqa: F401\n"
        "    FUSE_ALLREDUCE_MAX_BATCH_SIZE,\n"
        "    ar_norm_fusion_enabled as flashinfer_ar_fusion_applies,\n"
        ")\n",
    )


def inline(package: Path) -> None:
    """The cached flags dropped: the gate tests ``get_platform()`` inline (the spelling of
    the resolver and the auto-enable since 0.5.19)."""
    add_norm = package / ADD_NORM
    _replace(add_norm, _FLAGS, "")
    _replace(add_norm, _GATE_CLAUSE, "        (get_platform().is_sm90 or get_platform().is_sm100)\n")


def flags_apart(package: Path) -> None:
    """The SM flags moved to a module of their own, which add_norm.py imports them from."""
    (package / NEW_FLAGS_MODULE).write_text(
        '"""Platform flags computed once at import."""\n\n'
        "from sglang.srt.runtime_context import get_platform\n"
        "from sglang.srt.utils import is_cuda\n\n"
        "_is_cuda = is_cuda()\n" + _FLAGS
    )
    _replace(
        package / ADD_NORM,
        _FLAGS,
        "from sglang.srt.layers.layer_boundary.platform_flags import _is_sm90_supported, _is_sm100_supported\n",
    )


def helpers_renamed(package: Path) -> None:
    """The resolver, the workspace preflight and the auto-enable renamed in place."""
    for rel, old, new in (
        (COMM_FUSION, "_resolve_backend", "_pick_fusion_backend"),
        (COMM_FUSION, "_flashinfer_trtllm_workspace_allocation_sizes", "_trtllm_workspace_sizes"),
        (OVERRIDES, "_flashinfer_allreduce_fusion_auto_enable", "_auto_enable_ar_fusion"),
    ):
        path = package / rel
        text = path.read_text()
        if old not in text:
            raise AssertionError(f"{path}: no {old}")
        path.unlink()
        path.write_text(text.replace(old, new))


@dataclass(frozen=True)
class Variant:
    name: str
    make: Callable[[Path], None]
    moves: tuple[str, ...]  # the patches whose target it moves (found by role after it)


#: The next release's shapes, each from a real 0.5.23.
VARIANTS = (
    Variant("gate renamed", renamed, ("communicator-fusion-gate",)),
    Variant(
        "gate, flags and limit moved to a new module, renamed",
        moved,
        ("communicator-fusion-gate", "communicator-flag", "fusion-token-limit"),
    ),
    Variant("gate respelled inline (no cached flags)", inline, ()),
    Variant("flags moved apart and imported", flags_apart, ("communicator-flag",)),
    Variant(
        "resolver, preflight and auto-enable renamed",
        helpers_renamed,
        ("fusion-backend-resolver", "workspace-preflight", "server-args-auto-enable"),
    ),
)
