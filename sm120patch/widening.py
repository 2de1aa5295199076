"""The shared step of every gate patch: widen SM clauses, importing the probe if needed."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from sm120patch.cst_helpers import binds_at_import, code, replace_all
from sm120patch.imports import find_import_site, insert_after
from sm120patch.registry import Finding, PatchContext, State
from sm120patch.sm_terms import Clause, Flavor, admits_sm12x, has_sm120_term, widen

#: Where sglang's SM helpers are imported from (``utils`` re-exports ``utils.common``).
HELPER_MODULES = ("sglang.srt.utils", "sglang.srt.utils.common")
PROBE = "is_sm120_supported"


def needs_probe_import(module: cst.Module, clauses: Sequence[Clause]) -> bool:
    return any(p.flavor is Flavor.CALL for c in clauses for p in c.probes) and not binds_at_import(
        module, PROBE
    )


def widen_clauses(
    module: cst.Module,
    ctx: PatchContext,
    clauses: Sequence[Clause],
    where: str,
    evidence: Sequence[cst.CSTNode],
) -> Finding:
    """PENDING finding that widens ``clauses`` (and imports the probe), or DRIFT if it can't."""
    to_widen = [c for c in clauses if not admits_sm12x(c.probes)]
    site = None
    if needs_probe_import(module, to_widen):
        site = find_import_site(module, HELPER_MODULES, "is_sm100_supported")
        if site is None:
            return Finding(
                State.DRIFT,
                f"{where} tests is_sm100_supported() but no module-level "
                f"`from sglang.srt.utils import ..., is_sm100_supported` was found to add "
                f"{PROBE} to",
                where,
            )
        if not ctx.defines(site.source, PROBE):
            return Finding(
                State.DRIFT,
                f"{site.source} does not define {PROBE} in {ctx.release}",
                where,
            )

    def apply(tree: cst.Module) -> cst.Module:
        pairs: list[tuple[cst.CSTNode, cst.CSTNode]] = [(c.node, widen(c)) for c in to_widen]
        if site is not None:
            pairs.append((site.node, insert_after(site, PROBE)))
        return replace_all(tree, pairs)

    shown = "; ".join(code(c.node) for c in to_widen)
    return Finding(
        State.PENDING,
        f"{where}: will widen {shown} with the SM120 term"
        + (f" and import {PROBE} from {site.source}" if site else ""),
        where,
        evidence,
        apply,
    )


def applied_or_missing_import(
    module: cst.Module, clauses: Sequence[Clause], where: str, evidence: Sequence[cst.CSTNode]
) -> Finding:
    """APPLIED when every clause has the SM120 term and the name it calls is bound."""
    if needs_probe_import(module, clauses):
        return Finding(
            State.DRIFT,
            f"{where} calls {PROBE}() but the module never imports it (a hand edit?)",
            where,
            evidence,
        )
    shown = "; ".join(code(c.node) for c in clauses if has_sm120_term(c.probes))
    return Finding(State.APPLIED, f"{where}: {shown}", where, evidence)
