"""fusion-backend-resolver: stop ``_resolve_backend`` raising on SM12x (0.5.14+)."""

from __future__ import annotations

import libcst as cst
from packaging.version import Version

from sm120patch.patcher.kit.cst_helpers import walk
from sm120patch.patcher.kit.decide import decide, find_anchored, label, sought
from sm120patch.patcher.kit.model import Anchor, Edit, Example, Finding, Patch, PatchContext, Releases, Role, State
from sm120patch.patcher.kit.role_shapes import is_resolver, raises
from sm120patch.patcher.kit.sm_terms import clauses_in_test, sm_terms_in
from sm120patch.sglang.layout import COMM_FUSION, RESOLVER

FUNCTION = "_resolve_backend"  # the anchor rows' name: check() reads the rows
SINCE = "0.5.14"


class FusionBackendResolver(Patch):
    """Widen ``if not (is_sm90 or is_sm100): raise ValueError(...)`` in ``_resolve_backend``.

    Why: from 0.5.14 (sglang#28789) every fusion backend request is resolved at warm-up by
    ``layers/flashinfer_comm_fusion.py::_resolve_backend``, which raises "FlashInfer
    allreduce fusion requires SM90 or SM10X NVIDIA GPUs." for anything else: with the
    other gates widened, an SM12x server would fail to start.  Only the SM clause of that
    guard is widened.  The rest of the resolver already does the right thing for SM12x:
    ``auto`` resolves to ``trtllm`` on a single node (``mnnvl`` is chosen only for SM100,
    and FlashInfer builds no mnnvl kernel for SM12x), multi-node raises, an explicit
    ``mnnvl`` or ``cutedsl`` is still refused.  This is what sglang#32330 proposed.
    Not needed before 0.5.14, which has no resolver.

    Remove when: upstream's resolver admits SM12x (sglang#32330 was closed unmerged).
    """

    id = "fusion-backend-resolver"
    summary = "let SM12x through _resolve_backend (auto -> trtllm on one node)"
    edits = Edit.OR_TERM
    since = SINCE
    place = RESOLVER
    role = Role(
        "the fusion backend resolver (refuses every GPU but SM90 and SM100, names trtllm)",
        words=("is_sm", "trtllm", "allreduce", "raise"),
        matches=is_resolver,
    )
    anchors = (
        Anchor(COMM_FUSION, FUNCTION, Releases("0.5.19"), note="get_platform() spelling"),
        Anchor(COMM_FUSION, FUNCTION, Releases(SINCE, "0.5.18"), imports=True, note="helper spelling"),
    )
    examples = (
        Example(
            "helper spelling, import added (0.5.14 - 0.5.18)",
            """
            from sglang.srt.utils import (
                is_sm90_supported,
                is_sm100_supported,
            )
            def _resolve_backend(backend: str, is_multi_node: bool = False) -> str:
                if not (is_sm90_supported() or is_sm100_supported()):
                    raise ValueError('FlashInfer allreduce fusion requires SM90 or SM10X')
                if backend == 'auto':
                    return 'mnnvl' if is_sm100_supported() else 'trtllm'
            """,
            after="""
            from sglang.srt.utils import (
                is_sm90_supported,
                is_sm100_supported,
                is_sm120_supported,
            )
            def _resolve_backend(backend: str, is_multi_node: bool = False) -> str:
                if not (is_sm90_supported() or is_sm100_supported() or is_sm120_supported()):
                    raise ValueError('FlashInfer allreduce fusion requires SM90 or SM10X')
                if backend == 'auto':
                    return 'mnnvl' if is_sm100_supported() else 'trtllm'
            """,
            detail=(
                "_resolve_backend: will widen (is_sm90_supported() or is_sm100_supported()) with"
                " is_sm120_supported() and import is_sm120_supported from sglang.srt.utils"
            ),
            evidence=(7,),
        ),
        Example(
            "platform spelling; the cutedsl check stays SM100-only (0.5.19+)",
            """
            def _resolve_backend(backend: str, is_multi_node: bool = False) -> str:
                if not (get_platform().is_sm90 or get_platform().is_sm100):
                    raise ValueError('requires SM90 or SM10X')
                if backend == 'cutedsl':
                    if not get_platform().is_sm100:
                        raise ValueError('cutedsl requires Blackwell')
            """,
            after="""
            def _resolve_backend(backend: str, is_multi_node: bool = False) -> str:
                if not (get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120):
                    raise ValueError('requires SM90 or SM10X')
                if backend == 'cutedsl':
                    if not get_platform().is_sm100:
                        raise ValueError('cutedsl requires Blackwell')
            """,
        ),
        Example(
            "no resolver in the file (0.5.11 - 0.5.13)",
            """
            def _flashinfer_trtllm_workspace_allocation_sizes(cuda_driver, prop):
                return []
            """,
            state=State.NOT_NEEDED,
            detail="no backend resolver and no SM check in this file",
        ),
        Example(
            "the resolver renamed; its SM check is still in the file",
            """
            def _pick_allreduce_fusion_backend(backend: str, is_multi_node: bool = False) -> str:
                if not (get_platform().is_sm90 or get_platform().is_sm100):
                    raise ValueError('requires SM90 or SM10X')
                return backend
            """,
            state=State.DRIFT,
            detail="no function _resolve_backend (seen in 0.5.14 - now): the backend resolver moved",
        ),
        Example(
            "a resolver defined twice, with and without FlashInfer",
            """
            if _is_flashinfer_available:
                def _resolve_backend(backend: str, is_multi_node: bool = False) -> str:
                    if not (get_platform().is_sm90 or get_platform().is_sm100):
                        raise ValueError('requires SM90 or SM10X')
                    return backend
            else:
                def _resolve_backend(backend: str, is_multi_node: bool = False) -> str:
                    raise ImportError('FlashInfer is not installed')
            """,
            state=State.DRIFT,
            detail="2 functions named _resolve_backend",
        ),
        Example(
            "widened by hand without importing the helper: NameError at warm-up",
            """
            from sglang.srt.utils import is_sm90_supported, is_sm100_supported
            def _resolve_backend(backend):
                if not (is_sm90_supported() or is_sm100_supported() or is_sm120_supported()):
                    raise ValueError('requires SM90 or SM10X')
                return backend
            """,
            state=State.DRIFT,
            detail="uses is_sm120_supported but the module never binds it",
        ),
        Example(
            "a resolver that no longer raises",
            """
            def _resolve_backend(backend):
                return 'mnnvl' if get_platform().is_sm100 else backend
            """,
            state=State.DRIFT,
            detail="expected one guard `if not (<SM90> or <SM100>): raise ...` in _resolve_backend, found 0",
        ),
    )

    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        rows = ctx.rows_of(self)
        found = find_anchored(module, rows)
        if not found:
            if ctx.version is not None and ctx.version < Version(SINCE):
                return Finding(State.NOT_NEEDED, f"no backend resolver before sglang {SINCE}")
            if ctx.version is None and not sm_terms_in(module):
                return Finding(State.NOT_NEEDED, "no backend resolver and no SM check in this file")
            return Finding(State.DRIFT, f"no {sought(rows)}: the backend resolver moved")
        if len(found) > 1:
            names = ", ".join(dict.fromkeys(label(a) for a, _ in found))
            return Finding(State.DRIFT, f"{len(found)} functions named {names}", names)
        anchor, function = found[0]
        where = label(anchor)
        guards = [
            clause
            for node in walk(function.body)
            if isinstance(node, cst.If) and raises(node.body)
            for clause in clauses_in_test(node.test)
            if clause.negated and len(clause.terms) > 1
        ]
        if len(guards) != 1:
            return Finding(
                State.DRIFT,
                f"expected one guard `if not (<SM90> or <SM100>): raise ...` in {where}, found {len(guards)}",
                where,
            )
        return decide(module, ctx, guards, where, [guards[0].node], [function])
