"""communicator-import: bring ``is_sm120_supported`` into the fusion-gate module."""

from __future__ import annotations

import libcst as cst

from sm120patch.patcher.kit.cst_helpers import (
    binds_at_import,
    bound_name,
    import_froms,
    imported_names,
    replace_all,
)
from sm120patch.patcher.kit.decide import anchored_names, helper_import
from sm120patch.patcher.kit.imports import insert_after
from sm120patch.patcher.kit.model import (
    Anchor,
    Edit,
    Example,
    Finding,
    Kind,
    Patch,
    PatchContext,
    Releases,
    Role,
    State,
)
from sm120patch.patcher.kit.sm_terms import HELPER, first_sm_term
from sm120patch.sglang.layout import ADD_NORM, COMMUNICATOR, GATE, SM120_HELPER

_PLATFORM_FLAGS = "the SM flags read get_platform(), which already has is_sm120"


def _import_evidence(module: cst.Module, anchored: list[str]) -> list[cst.CSTNode]:
    shown = {"is_sm90_supported", *anchored, SM120_HELPER}
    return [alias for imp in import_froms(module) for alias in imported_names(imp) if bound_name(alias) in shown]


class CommunicatorImport(Patch):
    """Import ``is_sm120_supported`` where the fusion gate's SM flags are computed.

    Why: ``layers/communicator.py`` caches ``_is_sm90_supported`` and
    ``_is_sm100_supported`` from helpers imported out of ``sglang.srt.utils``; the SM120
    flag (communicator-flag) needs the SM120 helper in the same namespace.  This is the
    first of the three edits of the original hand fix (sglang#18758 did the same).
    The name goes on its own line right after ``is_sm100_supported``, after checking
    statically that ``sglang.srt.utils`` really defines it (from sglang 0.5.4).

    Not needed where nothing in the module calls an ``is_smXX_supported()`` helper: from
    0.5.19 the flags read ``get_platform().is_smXX``, and a gate that tests
    ``get_platform()`` inline needs no import either.

    Remove when: upstream's gate admits SM12x (sglang#32330 was closed unmerged).
    """

    id = "communicator-import"
    summary = "import is_sm120_supported next to is_sm100_supported in the fusion-gate module"
    edits = Edit.IMPORT
    provides = (SM120_HELPER,)
    place = GATE
    role = Role("wherever the SM flags are bound", follows="communicator-flag", kind=Kind.IMPORT)
    anchors = (
        Anchor(
            ADD_NORM,
            "is_sm100_supported",
            Releases("0.5.21"),
            kind=Kind.IMPORT,
            expect=State.NOT_NEEDED,
            note=_PLATFORM_FLAGS,
        ),
        Anchor(
            COMMUNICATOR,
            "is_sm100_supported",
            Releases("0.5.19", "0.5.20"),
            kind=Kind.IMPORT,
            expect=State.NOT_NEEDED,
            note=_PLATFORM_FLAGS,
        ),
        Anchor(COMMUNICATOR, "is_sm100_supported", Releases("0.5.4", "0.5.18"), kind=Kind.IMPORT, imports=True),
    )
    examples = (
        Example(
            "parenthesised import block (0.5.5.post3 - 0.5.18)",
            """
            from sglang.srt.utils import (
                is_cuda,
                is_sm90_supported,
                is_sm100_supported,
            )
            _is_sm100_supported = _is_cuda and is_sm100_supported()
            """,
            after="""
            from sglang.srt.utils import (
                is_cuda,
                is_sm90_supported,
                is_sm100_supported,
                is_sm120_supported,
            )
            _is_sm100_supported = _is_cuda and is_sm100_supported()
            """,
            detail="will add is_sm120_supported after is_sm100_supported in `from sglang.srt.utils import`",
            evidence=(3, 4, 5),
        ),
        Example(
            "a comment after the anchor stays on its line",
            """
            from sglang.srt.utils import (
                is_sm100_supported,  # Blackwell
                is_npu,
            )
            _is_sm100_supported = is_cuda() and is_sm100_supported()
            """,
            after="""
            from sglang.srt.utils import (
                is_sm100_supported,  # Blackwell
                is_sm120_supported,
                is_npu,
            )
            _is_sm100_supported = is_cuda() and is_sm100_supported()
            """,
        ),
        Example(
            "already imported (by sed or by hand)",
            """
            from sglang.srt.utils import is_cuda, is_sm100_supported, is_sm120_supported
            _is_sm100_supported = is_cuda() and is_sm100_supported()
            """,
            state=State.APPLIED,
            detail="is_sm120_supported is imported",
            evidence=(1,),
        ),
        Example(
            "flags from get_platform() (0.5.19+)",
            """
            from sglang.srt.runtime_context import get_platform
            _is_sm100_supported = _is_cuda and get_platform().is_sm100
            """,
            state=State.NOT_NEEDED,
            detail="nothing here calls an is_smXX_supported() helper: the SM flags read get_platform(), "
            "which already has is_sm120",
        ),
        Example(
            "a gate that tests get_platform() inline",
            """
            def flashinfer_ar_fusion_applies(batch_size):
                return (get_platform().is_sm90 or get_platform().is_sm100) and batch_size > 0
            """,
            state=State.NOT_NEEDED,
        ),
        Example(
            "the helper imported from elsewhere",
            """
            from sglang.srt.utils import is_cuda
            from sglang.srt.layers.utils import is_sm100_supported
            _is_sm100_supported = is_cuda() and is_sm100_supported()
            """,
            state=State.DRIFT,
            detail="no module-level `from sglang.srt.utils import ..., is_sm100_supported`",
        ),
        Example(
            "the helper from a star import: no name to add it after",
            """
            from sglang.srt.utils import *
            _is_sm100_supported = is_cuda() and is_sm100_supported()
            """,
            state=State.DRIFT,
            detail="no module-level `from sglang.srt.utils import ..., is_sm100_supported` to add is_sm120_supported to",
        ),
        Example(
            "sglang.srt.utils lacks is_sm120_supported (before 0.5.4)",
            """
            from sglang.srt.utils import is_cuda, is_sm100_supported
            _is_sm100_supported = is_cuda() and is_sm100_supported()
            """,
            state=State.DRIFT,
            detail="sglang.srt.utils does not define is_sm120_supported",
            undefined=(SM120_HELPER,),
        ),
    )

    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        anchored = anchored_names(ctx.rows_of(self), Kind.IMPORT)
        if binds_at_import(module, SM120_HELPER):
            return Finding(State.APPLIED, f"{SM120_HELPER} is imported", evidence=_import_evidence(module, anchored))
        if first_sm_term(module, HELPER) is None:
            return Finding(
                State.NOT_NEEDED,
                "nothing here calls an is_smXX_supported() helper: " + _PLATFORM_FLAGS,
            )
        # The new name goes after whichever anchored name this file imports.
        after = next((name for name in anchored if binds_at_import(module, name)), anchored[0])
        site = helper_import(module, ctx, after)
        if isinstance(site, str):
            return Finding(State.DRIFT, site)
        return Finding(
            State.PENDING,
            f"will add {SM120_HELPER} after {after} in `from {site.source} import`",
            evidence=_import_evidence(module, anchored),
            apply=lambda tree: replace_all(tree, [(site.node, insert_after(site, SM120_HELPER))]),
        )
