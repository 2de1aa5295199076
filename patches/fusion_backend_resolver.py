"""fusion-backend-resolver: stop ``_resolve_backend`` raising on SM12x (0.5.14+)."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
from packaging.version import Version

from sm120patch.cst_helpers import find_functions, walk
from sm120patch.registry import Example, Finding, Patch, PatchContext, State
from sm120patch.sm_terms import admits_sm12x, clauses_in_test, describe, has_sm120_term
from sm120patch.targets import COMM_FUSION
from sm120patch.widening import applied_or_missing_import, widen_clauses

FUNCTION = "_resolve_backend"
SINCE = Version("0.5.14")


def _raises(block: cst.BaseSuite) -> bool:
    return any(isinstance(node, cst.Raise) for node in walk(block))


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

    Releases: 0.5.14+ (``is_sm90_supported()`` spelling to 0.5.18, ``get_platform()``
    from 0.5.19); before 0.5.14 there is no resolver and the patch is not needed.
    Remove when: upstream's resolver admits SM12x (#32330 was closed unmerged).
    """

    id = "fusion-backend-resolver"
    summary = "let SM12x through _resolve_backend (auto -> trtllm on one node)"
    examples = (
        Example(
            before=(
                "from sglang.srt.utils import (\n"
                "    is_sm90_supported,\n"
                "    is_sm100_supported,\n"
                ")\n"
                "def _resolve_backend(backend: str, is_multi_node: bool = False) -> str:\n"
                "    if not (is_sm90_supported() or is_sm100_supported()):\n"
                "        raise ValueError('FlashInfer allreduce fusion requires SM90 or SM10X')\n"
                "    if backend == 'auto':\n"
                "        return 'mnnvl' if is_sm100_supported() else 'trtllm'\n"
            ),
            after=(
                "from sglang.srt.utils import (\n"
                "    is_sm90_supported,\n"
                "    is_sm100_supported,\n"
                "    is_sm120_supported,\n"
                ")\n"
                "def _resolve_backend(backend: str, is_multi_node: bool = False) -> str:\n"
                "    if not (is_sm90_supported() or is_sm100_supported() or is_sm120_supported()):\n"
                "        raise ValueError('FlashInfer allreduce fusion requires SM90 or SM10X')\n"
                "    if backend == 'auto':\n"
                "        return 'mnnvl' if is_sm100_supported() else 'trtllm'\n"
            ),
        ),
        Example(
            before=(
                "def _resolve_backend(backend: str, is_multi_node: bool = False) -> str:\n"
                "    if not (get_platform().is_sm90 or get_platform().is_sm100):\n"
                "        raise ValueError('requires SM90 or SM10X')\n"
                "    if backend == 'cutedsl':\n"
                "        if not get_platform().is_sm100:\n"
                "            raise ValueError('cutedsl requires Blackwell')\n"
            ),
            after=(
                "def _resolve_backend(backend: str, is_multi_node: bool = False) -> str:\n"
                "    if not (get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120):\n"
                "        raise ValueError('requires SM90 or SM10X')\n"
                "    if backend == 'cutedsl':\n"
                "        if not get_platform().is_sm100:\n"
                "            raise ValueError('cutedsl requires Blackwell')\n"
            ),
        ),
        Example(
            before=(
                "def _resolve_backend(backend):\n"
                "    return backend\n"
            ),
            state=State.DRIFT,
            detail="raise",
        ),
    )

    def target(self, exists: Callable[[str], bool]) -> str:
        return COMM_FUSION

    def absent(self, ctx: PatchContext, rel: str) -> Finding:
        if ctx.version is not None and ctx.version < SINCE:
            return Finding(State.NOT_NEEDED, f"no backend resolver before sglang {SINCE}")
        return Finding(State.DRIFT, f"{rel} does not exist in {ctx.release}")

    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        functions = find_functions(module, [FUNCTION])
        if not functions:
            if ctx.version is not None and ctx.version < SINCE:
                return Finding(State.NOT_NEEDED, f"no backend resolver before sglang {SINCE}")
            return Finding(State.DRIFT, f"no function {FUNCTION}: the backend resolver moved")
        if len(functions) > 1:
            return Finding(State.DRIFT, f"{len(functions)} functions named {FUNCTION}", FUNCTION)
        guards = [
            clause
            for node in walk(functions[0].body)
            if isinstance(node, cst.If) and _raises(node.body)
            for clause in clauses_in_test(node.test)
            if clause.negated and len(clause.probes) > 1
        ]
        if len(guards) != 1:
            return Finding(
                State.DRIFT,
                f"expected one guard `if not (<SM90> or <SM100>): raise ...` in {FUNCTION}, "
                f"found {len(guards)}",
                FUNCTION,
            )
        evidence = [guards[0].node]
        if has_sm120_term(guards[0].probes):
            return applied_or_missing_import(module, guards, FUNCTION, evidence)
        if admits_sm12x(guards[0].probes):
            return Finding(
                State.NOT_NEEDED, f"{FUNCTION} already admits SM12x: {describe(guards[0].probes)}", FUNCTION, evidence
            )
        return widen_clauses(module, ctx, guards, FUNCTION, evidence)
