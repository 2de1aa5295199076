"""workspace-preflight: keep the workspace preflight from switching fusion off on SM12x."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
from packaging.version import Version

from sm120patch.cst_helpers import (
    ancestry,
    binds,
    binds_at_import,
    code,
    find_functions,
    names_bound,
    names_read,
    replace_all,
    walk,
)
from sm120patch.imports import ImportSite, find_import_site, insert_after
from sm120patch.registry import Example, Finding, Patch, PatchContext, State
from sm120patch.sm_terms import Flavor, Probe, admits_sm12x, clauses_in_test, has_sm120_term, probe_of, sm120_term
from sm120patch.targets import COMM_FUSION
from sm120patch.widening import HELPER_MODULES, PROBE

FUNCTION = "_flashinfer_trtllm_workspace_allocation_sizes"
QUERY = "cuMulticastGetGranularity"
FLAG = "_is_sm120_supported"
SINCE = Version("0.5.11")


def _is_multicast_api(node: cst.CSTNode) -> bool:
    """``driver.cuMulticastGetGranularity``, ``driver.CUmulticastObjectProp`` and kin."""
    name = node.attr.value if isinstance(node, cst.Attribute) else getattr(node, "value", None)
    return isinstance(name, str) and name.lower().startswith("cumulticast")


def _uses_multicast(node: cst.CSTNode) -> bool:
    return any(isinstance(n, (cst.Attribute, cst.Name)) and _is_multicast_api(n) for n in walk(node))


def _query_calls(node: cst.CSTNode) -> list[cst.Call]:
    return [
        n
        for n in walk(node)
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == QUERY
    ]


def _negated_sm_guard(chain: list[cst.CSTNode]) -> tuple[cst.If, bool] | None:
    """The ``if not <SM12x probe>:`` the query sits in, and whether it names SM120 itself."""
    for node, below in zip(chain, chain[1:]):
        if isinstance(node, cst.If) and below is node.body:
            for clause in clauses_in_test(node.test):
                if clause.negated and admits_sm12x(clause.probes):
                    return node, has_sm120_term(clause.probes)
    return None


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
    rounding, so on SM12x the statements from the multicast property through the rounding
    are put under ``if not <SM12x probe>:`` and the sizes equal what FlashInfer allocates.
    On SM90 / SM100 nothing changes: same calls, same raise, same rounding.  sglang#32330
    (tested on 2x RTX PRO 6000, TP2 decode +5.2 %) removed the query for the same reason
    ("rejects valid non-multicast configurations").

    The SM12x test is spelled as the file spells its probes: ``get_platform().is_sm120``
    (0.5.19+), else ``is_sm120_supported()``, imported from ``sglang.srt.utils`` where the
    file lacks it (0.5.11 - 0.5.18); both are true on 12.0 and 12.1 (GB10).

    Releases: 0.5.11 - 0.5.23; not needed before 0.5.11 (no preflight) or where the
    function makes no multicast query.
    Remove when: upstream's preflight stops querying multicast on GPUs without it.
    """

    id = "workspace-preflight"
    summary = "skip the preflight's multicast granularity query on SM12x (it turns fusion off)"
    examples = (
        Example(
            before=(
                "from sglang.srt.utils import (\n"
                "    ceil_align,\n"
                "    get_cuda_driver_bindings,\n"
                ")\n"
                "def _flashinfer_trtllm_workspace_allocation_sizes(cuda_driver, prop, sizes):\n"
                "    out = []\n"
                "    for size in sizes:\n"
                "        err, gran = cuda_driver.cuMemGetAllocationGranularity(prop, 0)\n"
                "        allocation_size = ceil_align(size + 2048, gran)\n"
                "\n"
                "        # multicast\n"
                "        mc_prop = cuda_driver.CUmulticastObjectProp()\n"
                "        mc_prop.size = allocation_size\n"
                "        err, mc_granularity = cuda_driver.cuMulticastGetGranularity(mc_prop, 0)\n"
                "        if err != cuda_driver.CUresult.CUDA_SUCCESS:\n"
                "            raise RuntimeError(err)\n"
                "        allocation_size = ceil_align(allocation_size, mc_granularity)\n"
                "        out.append(allocation_size)\n"
                "    return out\n"
            ),
            after=(
                "from sglang.srt.utils import (\n"
                "    ceil_align,\n"
                "    get_cuda_driver_bindings,\n"
                "    is_sm120_supported,\n"
                ")\n"
                "def _flashinfer_trtllm_workspace_allocation_sizes(cuda_driver, prop, sizes):\n"
                "    out = []\n"
                "    for size in sizes:\n"
                "        err, gran = cuda_driver.cuMemGetAllocationGranularity(prop, 0)\n"
                "        allocation_size = ceil_align(size + 2048, gran)\n"
                "\n"
                "        # multicast\n"
                "        if not is_sm120_supported():\n"
                "            mc_prop = cuda_driver.CUmulticastObjectProp()\n"
                "            mc_prop.size = allocation_size\n"
                "            err, mc_granularity = cuda_driver.cuMulticastGetGranularity(mc_prop, 0)\n"
                "            if err != cuda_driver.CUresult.CUDA_SUCCESS:\n"
                "                raise RuntimeError(err)\n"
                "            allocation_size = ceil_align(allocation_size, mc_granularity)\n"
                "        out.append(allocation_size)\n"
                "    return out\n"
            ),
        ),
        Example(
            before=(
                "def _resolve_backend(backend):\n"
                "    return 'mnnvl' if get_platform().is_sm100 else 'trtllm'\n"
                "def _flashinfer_trtllm_workspace_allocation_sizes(d, n):\n"
                "    size = n\n"
                "    mc_prop = d.CUmulticastObjectProp()\n"
                "    err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)\n"
                "    size = size + mc_gran\n"
                "    return [size]\n"
            ),
            after=(
                "def _resolve_backend(backend):\n"
                "    return 'mnnvl' if get_platform().is_sm100 else 'trtllm'\n"
                "def _flashinfer_trtllm_workspace_allocation_sizes(d, n):\n"
                "    size = n\n"
                "    if not get_platform().is_sm120:\n"
                "        mc_prop = d.CUmulticastObjectProp()\n"
                "        err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)\n"
                "        size = size + mc_gran\n"
                "    return [size]\n"
            ),
        ),
        Example(
            before=(
                "def _flashinfer_trtllm_workspace_allocation_sizes(d, n):\n"
                "    size = n\n"
                "    if not get_platform().is_sm120:\n"
                "        err, mc_gran = d.cuMulticastGetGranularity(None, 0)\n"
                "        size = size + mc_gran\n"
                "    return [size]\n"
            ),
            state=State.APPLIED,
        ),
        Example(
            before=(
                "def _flashinfer_trtllm_workspace_allocation_sizes(d, n):\n"
                "    err, gran = d.cuMemGetAllocationGranularity(None, 0)\n"
                "    return [n + gran]\n"
            ),
            state=State.NOT_NEEDED,
            detail="makes no multicast query",
        ),
        Example(
            before="def _resolve_backend(backend):\n    return backend\n",
            state=State.NOT_NEEDED,
            detail="no workspace preflight",
        ),
        Example(
            before=(
                "def _workspace_sizes(d, n):\n"
                "    err, mc_gran = d.cuMulticastGetGranularity(None, 0)\n"
                "    return [n + mc_gran]\n"
            ),
            state=State.DRIFT,
            detail=FUNCTION,
        ),
        Example(
            before=(
                "def _flashinfer_trtllm_workspace_allocation_sizes(d, n):\n"
                "    for size in n:\n"
                "        mc_prop = d.CUmulticastObjectProp()\n"
                "        err, mc_gran = d.cuMulticastGetGranularity(mc_prop, 0)\n"
                "        if err:\n"
                "            continue\n"
                "        size = size + mc_gran\n"
                "    return [size]\n"
            ),
            state=State.DRIFT,
            detail="continue",
        ),
    )

    def target(self, exists: Callable[[str], bool]) -> str:
        return COMM_FUSION

    def absent(self, ctx: PatchContext, rel: str) -> Finding:
        if ctx.version is not None and ctx.version < SINCE:
            return Finding(State.NOT_NEEDED, f"no workspace preflight before sglang {SINCE}")
        return Finding(State.DRIFT, f"{rel} does not exist in {ctx.release}")

    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        functions = find_functions(module, [FUNCTION])
        if not functions:
            if _uses_multicast(module):
                return Finding(
                    State.DRIFT,
                    f"the module queries multicast but has no function {FUNCTION}: the "
                    "workspace preflight was renamed or moved",
                )
            return Finding(State.NOT_NEEDED, "no workspace preflight here (sglang adds it in 0.5.11)")
        if len(functions) > 1:
            return Finding(State.DRIFT, f"{len(functions)} functions named {FUNCTION}", FUNCTION)
        function = functions[0]
        calls = _query_calls(function)
        if not calls:
            return Finding(
                State.NOT_NEEDED,
                f"{FUNCTION} makes no multicast query (as sglang#32330 proposed)",
                FUNCTION,
            )
        if len(calls) > 1:
            return Finding(
                State.DRIFT, f"expected one {QUERY} call in {FUNCTION}, found {len(calls)}", FUNCTION
            )
        chain = ancestry(function, calls[0])
        guard = _negated_sm_guard(chain)
        if guard is not None:
            node, names_sm120 = guard
            if not names_sm120:
                return Finding(
                    State.NOT_NEEDED,
                    f"{FUNCTION} already skips the multicast query on SM12x: `if {code(node.test)}:`",
                    FUNCTION,
                    [node.test],
                )
            if needs_import(module, node.test):
                return Finding(
                    State.DRIFT,
                    f"{FUNCTION} calls {PROBE}() but the module never imports it (a hand edit?)",
                    FUNCTION,
                    [node.test],
                )
            return Finding(State.APPLIED, f"{FUNCTION}: `if {code(node.test)}:` guards the multicast query", FUNCTION, [node.test])
        return self._plan_guard(module, ctx, function, chain)

    def _plan_guard(
        self, module: cst.Module, ctx: PatchContext, function: cst.FunctionDef, chain: list[cst.CSTNode]
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
        multicast = [s for s in body if _uses_multicast(s)]
        from_multicast = set().union(*(names_bound(s) for s in multicast))
        only_multicast = from_multicast - _bound_outside(function, multicast)
        end = max(
            [query_at, *(i for i, stmt in enumerate(body) if names_read(stmt) & only_multicast)]
        )
        guarded = body[start : end + 1]
        where = FUNCTION
        for stmt in guarded:
            if not (_uses_multicast(stmt) or names_read(stmt) & from_multicast):
                return Finding(
                    State.DRIFT,
                    f"{FUNCTION}: `{code(stmt)}` sits among the multicast statements but is not "
                    "part of the query; expected the property, the query, its check and the rounding",
                    where,
                )
            jumps = [n for n in walk(stmt) if isinstance(n, (cst.Return, cst.Break, cst.Continue))]
            if jumps:
                return Finding(
                    State.DRIFT,
                    f"{FUNCTION}: a `{type(jumps[0]).__name__.lower()}` among the multicast "
                    "statements; skipping them would change more than the multicast rounding",
                    where,
                )
        # Skipping the run must leave every name read later bound, and the multicast-only
        # names must be read nowhere else.
        read_elsewhere = names_read(function.body, exclude=guarded)
        unbound = sorted((names_bound(cst.IndentedBlock(body=guarded)) - _bound_outside(function, guarded)) & read_elsewhere)
        if unbound or only_multicast & read_elsewhere:
            return Finding(
                State.DRIFT,
                f"{FUNCTION}: the multicast statements are not self-contained "
                f"({', '.join(unbound or sorted(only_multicast & read_elsewhere))} used outside them)",
                where,
            )
        term, site = self._sm12x_term(module)
        if site is not None and not ctx.defines(site.source, PROBE):
            return Finding(State.DRIFT, f"{site.source} does not define {PROBE} in {ctx.release}", where)
        if term is None:
            return Finding(
                State.DRIFT,
                f"no `from sglang.srt.utils import ...` at module level to add {PROBE} to",
                where,
            )
        first = guarded[0]
        new_guard = cst.If(
            test=cst.UnaryOperation(operator=cst.Not(), expression=term),
            body=cst.IndentedBlock(body=[first.with_changes(leading_lines=()), *guarded[1:]]),
            leading_lines=first.leading_lines,
        )
        new_block = block.with_changes(body=[*body[:start], new_guard, *body[end + 1 :]])

        def apply(tree: cst.Module) -> cst.Module:
            pairs: list[tuple[cst.CSTNode, cst.CSTNode]] = [(block, new_block)]
            if site is not None:
                pairs.append((site.node, insert_after(site, PROBE)))
            return replace_all(tree, pairs)

        return Finding(
            State.PENDING,
            f"will put the {len(guarded)} multicast statements of {FUNCTION} under "
            f"`if not {code(term)}:`" + (f" and import {PROBE} from {site.source}" if site else ""),
            where,
            [body[query_at]],
            apply,
        )

    @staticmethod
    def _sm12x_term(module: cst.Module) -> tuple[cst.BaseExpression | None, ImportSite | None]:
        """The SM12x probe in this file's spelling, and the import to extend (if any)."""
        probes: list[Probe] = [p for p in map(probe_of, walk(module)) if p is not None]
        platform = [p for p in probes if p.flavor is Flavor.PLATFORM]
        if platform:
            return sm120_term(platform[0]), None
        if binds_at_import(module, FLAG):
            return cst.Name(FLAG), None
        call = cst.Call(func=cst.Name(PROBE))
        if binds_at_import(module, PROBE):
            return call, None
        site = find_import_site(module, HELPER_MODULES, "is_sm100_supported") or find_import_site(
            module, HELPER_MODULES, None, PROBE
        )
        return (call, site) if site is not None else (None, None)


def needs_import(module: cst.Module, test: cst.BaseExpression) -> bool:
    calls = [p for p in map(probe_of, walk(test)) if p is not None and p.flavor is Flavor.CALL]
    return bool(calls) and not binds_at_import(module, PROBE)


def _bound_outside(function: cst.FunctionDef, statements: list[cst.CSTNode]) -> set[str]:
    """Names the function binds (parameters included) outside ``statements``."""
    inside = {id(n) for s in statements for n in walk(s)}
    bound = {p.name.value for p in walk(function.params) if isinstance(p, cst.Param)}
    for node in walk(function.body):
        if id(node) not in inside:
            bound |= binds(node)
    return bound
