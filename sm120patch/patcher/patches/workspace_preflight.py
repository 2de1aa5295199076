"""workspace-preflight: keep the workspace preflight from switching fusion off on SM12x."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import libcst as cst

from sm120patch.patcher.kit.cst_helpers import (
    ancestry,
    binds,
    binds_at_import,
    code,
    names_bound,
    names_read,
    replace_all,
    walk,
)
from sm120patch.patcher.kit.decide import find_anchored, helper_import, label, sought, unbound_sm120
from sm120patch.patcher.kit.imports import ImportSite, insert_after
from sm120patch.patcher.kit.model import Anchor, Edit, Example, Finding, Patch, PatchContext, Releases, Role, State
from sm120patch.patcher.kit.role_shapes import calls
from sm120patch.patcher.kit.sm_terms import (
    HELPER,
    PLATFORM,
    admits_sm12x,
    clauses_in_test,
    first_sm_term,
    names_sm120,
    sm120_term,
    sm_terms_in,
)
from sm120patch.sglang.layout import COMM_FUSION, PREFLIGHT, SM120_FLAG, SM120_HELPER

FUNCTION = "_flashinfer_trtllm_workspace_allocation_sizes"  # the anchor rows' name: check() reads the rows
QUERY = "cuMulticastGetGranularity"
SINCE = "0.5.11"


def _is_multicast_api(node: cst.Attribute | cst.Name) -> bool:
    """``driver.cuMulticastGetGranularity``, ``driver.CUmulticastObjectProp`` and kin."""
    name = node.attr.value if isinstance(node, cst.Attribute) else node.value
    return name.lower().startswith("cumulticast")


def _uses_multicast(node: cst.CSTNode) -> bool:
    return any(isinstance(n, (cst.Attribute, cst.Name)) and _is_multicast_api(n) for n in walk(node))


def _query_calls(node: cst.CSTNode) -> list[cst.Call]:
    return [
        n
        for n in walk(node)
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == QUERY
    ]


def _negated_sm_guard(chain: list[cst.CSTNode]) -> tuple[cst.If, bool] | None:
    """The ``if not <SM12x term>:`` the query sits in, and whether it names SM120 itself."""
    for node, below in itertools.pairwise(chain):
        if isinstance(node, cst.If) and below is node.body:
            for clause in clauses_in_test(node.test):
                if clause.negated and admits_sm12x(clause.terms):
                    return node, names_sm120(clause.terms)
    return None


def _bound_outside(function: cst.FunctionDef, statements: Sequence[cst.CSTNode]) -> set[str]:
    """Names the function binds (parameters included) outside ``statements``."""
    inside = {id(n) for s in statements for n in walk(s)}
    bound = {p.name.value for p in walk(function.params) if isinstance(p, cst.Param)}
    for node in walk(function.body):
        if id(node) not in inside:
            bound |= binds(node)
    return bound


def _sm12x_term(module: cst.Module, ctx: PatchContext) -> tuple[cst.BaseExpression, ImportSite | None] | str:
    """The SM12x test in this file's spelling, and the import to extend (if any); or why
    there is none."""
    platform = first_sm_term(module, PLATFORM)
    if platform is not None:
        return sm120_term(platform), None
    if binds_at_import(module, SM120_FLAG):
        return cst.Name(SM120_FLAG), None
    call = cst.Call(func=cst.Name(SM120_HELPER))
    if binds_at_import(module, SM120_HELPER) or SM120_HELPER in ctx.provided:
        return call, None
    anchor = "is_sm100_supported" if first_sm_term(module, HELPER) is not None else None
    site = helper_import(module, ctx, anchor)
    return site if isinstance(site, str) else (call, site)


class WorkspacePreflight(Patch):
    """Skip the multicast granularity query of the workspace preflight on SM12x.

    Why: from 0.5.11 sglang probes FlashInfer's allreduce workspace before creating it
    (``_preflight_check_workspace_memory``).  The size helper
    ``_flashinfer_trtllm_workspace_allocation_sizes`` asks ``cuMulticastGetGranularity``
    and raises when it fails, which it does on every GPU without multicast: every PCIe
    RTX PRO 6000 / RTX 5090 box.  The preflight then logs "Skipping allreduce fusion" and
    the fusion stays off for the whole run, however the gates are set.  FlashInfer itself
    (0.6.17+, ``comm/trtllm_ar.py``) allocates that workspace with
    ``SymmDeviceMemory(..., enable_multicast=False)``: no multicast query and no multicast
    rounding.  So on SM12x the statements from the multicast property through the rounding
    go under ``if not <SM12x term>:``, and the sizes equal what FlashInfer allocates.  On
    SM90 / SM100 nothing changes: same calls, same raise, same rounding.  sglang#32330
    (tested on 2x RTX PRO 6000, TP2 decode +5.2 %) removed the query for the same reason
    ("rejects valid non-multicast configurations").

    The SM12x test is spelled as the file spells its terms: ``get_platform().is_sm120``
    (0.5.19+), else ``is_sm120_supported()``, imported from ``sglang.srt.utils`` where the
    file lacks it (0.5.11 - 0.5.13); both are true on 12.0 and 12.1 (GB10).  Not needed
    before 0.5.11 (no preflight) or where the function makes no multicast query.

    Remove when: upstream's preflight stops querying multicast on GPUs without it.
    """

    id = "workspace-preflight"
    summary = "skip the preflight's multicast granularity query on SM12x (it turns fusion off)"
    edits = Edit.GUARD
    since = SINCE
    place = PREFLIGHT
    role = Role(
        f"the workspace preflight (calls {QUERY})",
        words=(QUERY,),
        matches=lambda function: calls(function, QUERY),
    )
    anchors = (
        Anchor(COMM_FUSION, FUNCTION, Releases("0.5.19"), note="get_platform() spelling"),
        Anchor(
            COMM_FUSION, FUNCTION, Releases("0.5.14", "0.5.18"), note="helper spelling, imported by the resolver patch"
        ),
        Anchor(COMM_FUSION, FUNCTION, Releases(SINCE, "0.5.13.post1"), imports=True, note="no SM term in the file yet"),
    )
    examples = (
        Example(
            "no SM term in the file: the helper is imported (0.5.11 - 0.5.13)",
            """
            from sglang.srt.utils import (
                ceil_align,
                get_cuda_driver_bindings,
            )
            def _flashinfer_trtllm_workspace_allocation_sizes(cuda_driver, prop, sizes):
                out = []
                for size in sizes:
                    err, gran = cuda_driver.cuMemGetAllocationGranularity(prop, 0)
                    allocation_size = ceil_align(size + 2048, gran)

                    # multicast
                    mc_prop = cuda_driver.CUmulticastObjectProp()
                    mc_prop.size = allocation_size
                    err, mc_granularity = cuda_driver.cuMulticastGetGranularity(mc_prop, 0)
                    if err != cuda_driver.CUresult.CUDA_SUCCESS:
                        raise RuntimeError(err)
                    allocation_size = ceil_align(allocation_size, mc_granularity)
                    out.append(allocation_size)
                return out
            """,
            after="""
            from sglang.srt.utils import (
                ceil_align,
                get_cuda_driver_bindings,
                is_sm120_supported,
            )
            def _flashinfer_trtllm_workspace_allocation_sizes(cuda_driver, prop, sizes):
                out = []
                for size in sizes:
                    err, gran = cuda_driver.cuMemGetAllocationGranularity(prop, 0)
                    allocation_size = ceil_align(size + 2048, gran)

                    # multicast
                    if not is_sm120_supported():
                        mc_prop = cuda_driver.CUmulticastObjectProp()
                        mc_prop.size = allocation_size
                        err, mc_granularity = cuda_driver.cuMulticastGetGranularity(mc_prop, 0)
                        if err != cuda_driver.CUresult.CUDA_SUCCESS:
                            raise RuntimeError(err)
                        allocation_size = ceil_align(allocation_size, mc_granularity)
                    out.append(allocation_size)
                return out
            """,
            detail=(
                "will put the 5 multicast statements of _flashinfer_trtllm_workspace_allocation_sizes under"
                " `if not is_sm120_supported():` and import is_sm120_supported from sglang.srt.utils"
            ),
            evidence=(13,),
        ),
        Example(
            "platform spelling, taken from the resolver (0.5.19+)",
            """
            def _resolve_backend(backend):
                return 'mnnvl' if get_platform().is_sm100 else 'trtllm'
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                mc_prop = d.CUmulticastObjectProp()
                err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                size = size + mc_gran
                return [size]
            """,
            after="""
            def _resolve_backend(backend):
                return 'mnnvl' if get_platform().is_sm100 else 'trtllm'
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                if not get_platform().is_sm120:
                    mc_prop = d.CUmulticastObjectProp()
                    err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                    size = size + mc_gran
                return [size]
            """,
        ),
        Example(
            "already guarded",
            """
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                if not get_platform().is_sm120:
                    err, mc_gran = d.cuMulticastGetGranularity(None, 0)
                    size = size + mc_gran
                return [size]
            """,
            state=State.APPLIED,
            detail=(
                "_flashinfer_trtllm_workspace_allocation_sizes: `if not get_platform().is_sm120:` guards the"
                " multicast query"
            ),
            evidence=(3,),
        ),
        Example(
            "a cached SM120 flag in the file spells the guard",
            """
            _is_sm120_supported = is_cuda() and is_sm120_supported()
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                mc_prop = d.CUmulticastObjectProp()
                err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                size = size + mc_gran
                return [size]
            """,
            after="""
            _is_sm120_supported = is_cuda() and is_sm120_supported()
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                if not _is_sm120_supported:
                    mc_prop = d.CUmulticastObjectProp()
                    err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                    size = size + mc_gran
                return [size]
            """,
            detail=(
                "will put the 3 multicast statements of _flashinfer_trtllm_workspace_allocation_sizes under"
                " `if not _is_sm120_supported:`"
            ),
        ),
        Example(
            "is_sm120_supported already imported (0.5.14 - 0.5.18, by the resolver patch)",
            """
            from sglang.srt.utils import ceil_align, is_sm90_supported, is_sm100_supported, is_sm120_supported
            def _resolve_backend(backend):
                if not (is_sm90_supported() or is_sm100_supported() or is_sm120_supported()):
                    raise ValueError('requires SM90 or SM10X')
                return backend
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                mc_prop = d.CUmulticastObjectProp()
                err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                size = ceil_align(size, mc_gran)
                return [size]
            """,
            after="""
            from sglang.srt.utils import ceil_align, is_sm90_supported, is_sm100_supported, is_sm120_supported
            def _resolve_backend(backend):
                if not (is_sm90_supported() or is_sm100_supported() or is_sm120_supported()):
                    raise ValueError('requires SM90 or SM10X')
                return backend
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                if not is_sm120_supported():
                    mc_prop = d.CUmulticastObjectProp()
                    err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                    size = ceil_align(size, mc_gran)
                return [size]
            """,
            detail=(
                "will put the 3 multicast statements of _flashinfer_trtllm_workspace_allocation_sizes under"
                " `if not is_sm120_supported():`"
            ),
        ),
        Example(
            "the resolver left unpatched (0.5.14 - 0.5.18): the helper is imported next to is_sm100_supported",
            """
            from sglang.srt.utils import (
                is_sm90_supported,
                is_sm100_supported,
                get_cuda_driver_bindings,
            )
            def _resolve_backend(backend):
                if not (is_sm90_supported() or is_sm100_supported()):
                    raise ValueError('requires SM90 or SM10X')
                return backend
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                mc_prop = d.CUmulticastObjectProp()
                err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                size = size + mc_gran
                return [size]
            """,
            after="""
            from sglang.srt.utils import (
                is_sm90_supported,
                is_sm100_supported,
                is_sm120_supported,
                get_cuda_driver_bindings,
            )
            def _resolve_backend(backend):
                if not (is_sm90_supported() or is_sm100_supported()):
                    raise ValueError('requires SM90 or SM10X')
                return backend
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                if not is_sm120_supported():
                    mc_prop = d.CUmulticastObjectProp()
                    err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                    size = size + mc_gran
                return [size]
            """,
        ),
        Example(
            "the multicast property class imported by name",
            """
            from cuda.bindings.driver import CUmulticastObjectProp
            from sglang.srt.utils import ceil_align
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                mc_prop = CUmulticastObjectProp()
                mc_prop.size = size
                err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                size = ceil_align(size, mc_gran)
                return [size]
            """,
            after="""
            from cuda.bindings.driver import CUmulticastObjectProp
            from sglang.srt.utils import ceil_align, is_sm120_supported
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                if not is_sm120_supported():
                    mc_prop = CUmulticastObjectProp()
                    mc_prop.size = size
                    err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                    size = ceil_align(size, mc_gran)
                return [size]
            """,
        ),
        Example(
            "a Blackwell guard already skips the query on SM12x",
            """
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                if not get_platform().is_blackwell:
                    err, mc_gran = d.cuMulticastGetGranularity(None, 0)
                    size = size + mc_gran
                return [size]
            """,
            state=State.NOT_NEEDED,
            detail=(
                "_flashinfer_trtllm_workspace_allocation_sizes already skips the multicast query on SM12x:"
                " `if not get_platform().is_blackwell:`"
            ),
            evidence=(3,),
        ),
        Example(
            "guarded by hand without importing the helper: NameError at warm-up",
            """
            from sglang.srt.utils import ceil_align
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                if not is_sm120_supported():
                    err, mc_gran = d.cuMulticastGetGranularity(None, 0)
                    size = ceil_align(size, mc_gran)
                return [size]
            """,
            state=State.DRIFT,
            detail=(
                "_flashinfer_trtllm_workspace_allocation_sizes uses is_sm120_supported but the module never binds"
                " it (a hand edit?)"
            ),
            evidence=(4,),
        ),
        Example(
            "no sglang.srt.utils import to add the helper to",
            """
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                mc_prop = d.CUmulticastObjectProp()
                err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                size = size + mc_gran
                return [size]
            """,
            state=State.DRIFT,
            detail=(
                "_flashinfer_trtllm_workspace_allocation_sizes: no module-level `from sglang.srt.utils import ...`"
                " to add is_sm120_supported to"
            ),
        ),
        Example(
            "two multicast queries",
            """
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                mc_prop = d.CUmulticastObjectProp()
                err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                err, mc_min = d.cuMulticastGetGranularity(mc_prop, 1)
                return [n + mc_gran + mc_min]
            """,
            state=State.DRIFT,
            detail="expected one cuMulticastGetGranularity call in _flashinfer_trtllm_workspace_allocation_sizes, found 2",
        ),
        Example(
            "the size helper defined twice",
            """
            if _is_cuda:
                def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                    err, mc_gran = d.cuMulticastGetGranularity(None, 0)
                    return [n + mc_gran]
            else:
                def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                    return [n]
            """,
            state=State.DRIFT,
            detail="2 functions named _flashinfer_trtllm_workspace_allocation_sizes",
        ),
        Example(
            "a negated SM100 test around the query is no SM12x guard: the guard goes inside it",
            """
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                if not get_platform().is_sm100:
                    mc_prop = d.CUmulticastObjectProp()
                    err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                    size = size + mc_gran
                return [size]
            """,
            after="""
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                if not get_platform().is_sm100:
                    if not get_platform().is_sm120:
                        mc_prop = d.CUmulticastObjectProp()
                        err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                        size = size + mc_gran
                return [size]
            """,
        ),
        Example(
            "the query removed, as sglang#32330 proposed",
            """
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                err, gran = d.cuMemGetAllocationGranularity(None, 0)
                return [n + gran]
            """,
            state=State.NOT_NEEDED,
            detail="_flashinfer_trtllm_workspace_allocation_sizes makes no multicast query (as sglang#32330 proposed)",
        ),
        Example(
            "no workspace preflight (before 0.5.11)",
            """
            def _resolve_backend(backend):
                return backend
            """,
            state=State.NOT_NEEDED,
            detail="no workspace preflight here (sglang adds it in 0.5.11)",
        ),
        Example(
            "the query moved to another function",
            """
            def _workspace_sizes(d, n):
                err, mc_gran = d.cuMulticastGetGranularity(None, 0)
                return [n + mc_gran]
            """,
            state=State.DRIFT,
            detail=(
                "the module queries multicast but has no function _flashinfer_trtllm_workspace_allocation_sizes"
                " (seen in 0.5.11 - now): the workspace preflight was renamed or moved"
            ),
        ),
        Example(
            "a `continue` among the multicast statements",
            """
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                for size in n:
                    mc_prop = d.CUmulticastObjectProp()
                    err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                    if err:
                        continue
                    size = size + mc_gran
                return [size]
            """,
            state=State.DRIFT,
            detail=(
                "_flashinfer_trtllm_workspace_allocation_sizes: a `continue` among the multicast statements;"
                " skipping them would change more than the multicast rounding"
            ),
        ),
        Example(
            "the multicast granularity logged after the loop",
            """
            def _flashinfer_trtllm_workspace_allocation_sizes(d, sizes):
                out = []
                for size in sizes:
                    mc_prop = d.CUmulticastObjectProp()
                    err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                    out.append(size + mc_gran)
                logger.info("multicast granularity %d (%s)", mc_gran, mc_prop)
                return out
            """,
            state=State.DRIFT,
            detail=(
                "_flashinfer_trtllm_workspace_allocation_sizes: the multicast statements are not self-contained"
                " (mc_gran, mc_prop used outside them)"
            ),
        ),
        Example(
            "the rounded size kept in a name of its own",
            """
            from sglang.srt.utils import ceil_align
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                mc_prop = d.CUmulticastObjectProp()
                err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                aligned = ceil_align(n, mc_gran)
                return [aligned]
            """,
            state=State.DRIFT,
            detail=(
                "_flashinfer_trtllm_workspace_allocation_sizes: the multicast statements are not self-contained"
                " (aligned used outside them)"
            ),
        ),
        Example(
            "an unrelated statement among the multicast statements",
            """
            def _flashinfer_trtllm_workspace_allocation_sizes(d, n):
                size = n
                mc_prop = d.CUmulticastObjectProp()
                logger.info("probing")
                err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)
                size = size + mc_gran
                return [size]
            """,
            state=State.DRIFT,
            detail=(
                '_flashinfer_trtllm_workspace_allocation_sizes: `logger.info("probing")` sits among the multicast'
                " statements but is not part of the query; expected the property, the query, its check and the rounding"
            ),
        ),
    )

    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        rows = ctx.rows_of(self)
        found = find_anchored(module, rows)
        if not found:
            if _uses_multicast(module):
                return Finding(
                    State.DRIFT,
                    f"the module queries multicast but has no {sought(rows)}: "
                    "the workspace preflight was renamed or moved",
                )
            return Finding(State.NOT_NEEDED, f"no workspace preflight here (sglang adds it in {SINCE})")
        if len(found) > 1:
            names = ", ".join(dict.fromkeys(label(a) for a, _ in found))
            return Finding(State.DRIFT, f"{len(found)} functions named {names}", names)
        anchor, function = found[0]
        where = label(anchor)
        calls = _query_calls(function)
        if not calls:
            return Finding(State.NOT_NEEDED, f"{where} makes no multicast query (as sglang#32330 proposed)", where)
        if len(calls) > 1:
            return Finding(State.DRIFT, f"expected one {QUERY} call in {where}, found {len(calls)}", where)
        chain = ancestry(function, calls[0])
        guard = _negated_sm_guard(chain)
        if guard is None:
            return self._plan_guard(module, ctx, where, function, chain)
        node, named = guard
        shown = f"`if {code(node.test)}:`"
        if not named:
            return Finding(
                State.NOT_NEEDED,
                f"{where} already skips the multicast query on SM12x: {shown}",
                where,
                [node.test],
            )
        drift = unbound_sm120(module, ctx, sm_terms_in(node.test), where, [node.test])
        if drift is not None:
            return drift
        return Finding(
            State.APPLIED, f"{where}: {shown} guards the multicast query", where, [node.test], scopes=[function]
        )

    def _plan_guard(
        self, module: cst.Module, ctx: PatchContext, where: str, function: cst.FunctionDef, chain: list[cst.CSTNode]
    ) -> Finding:
        blocks = [i for i, node in enumerate(chain) if isinstance(node, cst.IndentedBlock)]
        block = chain[blocks[-1]]
        assert isinstance(block, cst.IndentedBlock)
        body = list(block.body)
        query_at = body.index(chain[blocks[-1] + 1])  # type: ignore[arg-type]
        start = next(i for i, stmt in enumerate(body) if _uses_multicast(stmt))
        # The names the multicast statements bind, and those only they bind (mc_prop,
        # mc_granularity; not `err`, which the allocation-granularity query binds too).
        # The guarded run ends with the last statement that reads one of the latter: the
        # rounding.  Every statement in the run must belong to the multicast query.
        multicast: list[cst.CSTNode] = [s for s in body if _uses_multicast(s)]
        from_multicast = set().union(*(names_bound(s) for s in multicast))
        only_multicast = from_multicast - _bound_outside(function, multicast)
        end = max([query_at, *(i for i, stmt in enumerate(body) if names_read(stmt) & only_multicast)])
        guarded = body[start : end + 1]
        for stmt in guarded:
            if not (_uses_multicast(stmt) or names_read(stmt) & from_multicast):
                return Finding(
                    State.DRIFT,
                    f"{where}: `{code(stmt)}` sits among the multicast statements but is not part of "
                    "the query; expected the property, the query, its check and the rounding",
                    where,
                )
            jumps = [n for n in walk(stmt) if isinstance(n, (cst.Return, cst.Break, cst.Continue))]
            if jumps:
                return Finding(
                    State.DRIFT,
                    f"{where}: a `{type(jumps[0]).__name__.lower()}` among the multicast statements; "
                    "skipping them would change more than the multicast rounding",
                    where,
                )
        # Skipping the run must leave every name read later bound, and the multicast-only
        # names must be read nowhere else.
        read_elsewhere = names_read(function.body, exclude=guarded)
        new_inside = names_bound(cst.IndentedBlock(body=guarded)) - _bound_outside(function, guarded)
        leaked = sorted((new_inside & read_elsewhere) | (only_multicast & read_elsewhere))
        if leaked:
            return Finding(
                State.DRIFT,
                f"{where}: the multicast statements are not self-contained ({', '.join(leaked)} used outside them)",
                where,
            )
        spelled = _sm12x_term(module, ctx)
        if isinstance(spelled, str):
            return Finding(State.DRIFT, f"{where}: {spelled}", where)
        term, site = spelled
        first = guarded[0]
        assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        new_guard = cst.If(
            test=cst.UnaryOperation(operator=cst.Not(), expression=term),
            body=cst.IndentedBlock(body=[first.with_changes(leading_lines=()), *guarded[1:]]),
            leading_lines=first.leading_lines,
        )
        new_block = block.with_changes(body=[*body[:start], new_guard, *body[end + 1 :]])

        def apply(tree: cst.Module) -> cst.Module:
            pairs: list[tuple[cst.CSTNode, cst.CSTNode]] = [(block, new_block)]
            if site is not None:
                pairs.append((site.node, insert_after(site, SM120_HELPER)))
            return replace_all(tree, pairs, [function])

        return Finding(
            State.PENDING,
            f"will put the {len(guarded)} multicast statements of {where} under `if not {code(term)}:`"
            + (f" and import {SM120_HELPER} from {site.source}" if site else ""),
            where,
            [body[query_at]],
            apply,
        )
