"""What the gate patches share: finding their anchors, and the state of their SM clauses.

``decide`` says pending / applied / not-needed for the SM clauses a gate patch found
(communicator-fusion-gate, fusion-backend-resolver, server-args-auto-enable):

* a clause that does not admit SM12x is widened (pending), importing the helper the new
  term calls where the file lacks it;
* every clause admits SM12x and one names SM120 itself: applied, provided every name the
  SM120 terms need is bound (here, or by a patch this one requires: ``unbound_sm120``);
* every clause admits SM12x through ``blackwell``: upstream already lets it through.

The other patches decide their own states (an import, a flag, workspace-preflight's guard)
and share ``helper_import`` and ``unbound_sm120`` from here.  Every patch finds its target
through its anchor rows (``find_anchored``, ``find_assigned``, ``anchored_names``), so a
renamed target is one more row, not a change to ``check``.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
from packaging.version import Version

from sm120patch.patcher.kit.cst_helpers import binds_at_import, code, find_functions, module_assignments, replace_all
from sm120patch.patcher.kit.imports import ImportSite, find_import_site, insert_after
from sm120patch.patcher.kit.model import Anchor, Finding, Kind, PatchContext, Releases, State
from sm120patch.patcher.kit.sm_terms import (
    HELPER,
    Clause,
    Shape,
    SmTerm,
    admits_sm12x,
    describe,
    names_sm120,
    sm120_term,
    sm120_terms,
    template_term,
    widen,
)
from sm120patch.sglang.layout import HELPER_MODULES, SM120_HELPER


def find_anchored(module: cst.Module, anchors: Sequence[Anchor]) -> list[tuple[Anchor, cst.FunctionDef]]:
    """The functions of ``module`` that an anchor names, each once (with its first anchor
    in table order: rows in other files may share the name)."""
    found: dict[int, tuple[Anchor, cst.FunctionDef]] = {}
    for anchor in anchors:
        if anchor.kind is Kind.FUNCTION:
            for function in find_functions(module, [anchor.name], anchor.cls):
                found.setdefault(id(function), (anchor, function))
    return list(found.values())


def find_assigned(module: cst.Module, anchors: Sequence[Anchor]) -> list[tuple[Anchor, cst.SimpleStatementLine]]:
    """The module-level lines that assign a name an assignment anchor names, each once
    (with its first anchor in table order)."""
    found: dict[int, tuple[Anchor, cst.SimpleStatementLine]] = {}
    for anchor in anchors:
        if anchor.kind is Kind.ASSIGNMENT:
            for line in module_assignments(module, anchor.name):
                found.setdefault(id(line), (anchor, line))
    return list(found.values())


def anchored_names(anchors: Sequence[Anchor], kind: Kind) -> list[str]:
    """The distinct names the ``kind`` anchors look for, in table order."""
    return list(dict.fromkeys(a.name for a in anchors if a.kind is kind))


def sought(anchors: Sequence[Anchor]) -> str:
    """Each distinct target of ``anchors`` with the releases its rows span together, as a
    drift message names what was looked for: rows that differ only in what a release
    expects read as one (``function f (seen in 0.5.11 - now)``)."""
    seen: dict[str, list[Releases]] = {}
    for anchor in anchors:
        seen.setdefault(anchor.describe(), []).append(anchor.seen)
    return " or ".join(f"{what} (seen in {_span(rows)})" for what, rows in seen.items())


def _span(rows: Sequence[Releases]) -> Releases:
    first = min((r.first for r in rows), key=Version)
    lasts = [r.last for r in rows if r.last is not None]
    return Releases(first, max(lasts, key=Version) if len(lasts) == len(rows) else None)


def searched(anchors: Sequence[Anchor]) -> str:
    """The anchors, as a drift message lists what was looked for."""
    return "; ".join(f"{a.describe()} (seen in {a.seen})" for a in anchors)


def label(anchor: Anchor) -> str:
    return f"{anchor.cls}.{anchor.name}" if anchor.cls else anchor.name


def unbound(module: cst.Module, ctx: PatchContext, terms: Sequence[SmTerm]) -> list[str]:
    """Names the SM120 ``terms`` need that nothing binds (the module, or a required patch)."""
    names = {t.spelling.binds for t in terms if t.spelling.binds}
    return sorted(n for n in names if n not in ctx.provided and not binds_at_import(module, n))


def unbound_sm120(
    module: cst.Module, ctx: PatchContext, terms: Sequence[SmTerm], where: str, evidence: Sequence[cst.CSTNode]
) -> Finding | None:
    """Drift when an SM120 term among ``terms`` uses a name nothing binds (a hand edit that
    added the term but not its import or flag); None when every such name is bound."""
    missing = unbound(module, ctx, sm120_terms(terms))
    if not missing:
        return None
    return Finding(
        State.DRIFT, f"{where} uses {', '.join(missing)} but the module never binds it (a hand edit?)", where, evidence
    )


def helper_import(module: cst.Module, ctx: PatchContext, anchor_name: str | None) -> ImportSite | str:
    """Where ``is_sm120_supported`` can be imported, or why it cannot."""
    site = find_import_site(module, HELPER_MODULES, anchor_name, SM120_HELPER)
    if site is None:
        after = f"..., {anchor_name}" if anchor_name else "..."
        return f"no module-level `from sglang.srt.utils import {after}` to add {SM120_HELPER} to"
    if not ctx.defines(site.source, SM120_HELPER):
        return f"{site.source} does not define {SM120_HELPER} in {ctx.release} (it arrives in 0.5.4)"
    return site


def _twin_import(module: cst.Module, term: SmTerm, source: str) -> ImportSite | None:
    """Where the SM100 term ``term`` (a flag) is imported from ``source`` by name, for its SM120
    twin to go beside it; None where the module does not import it so."""
    if not isinstance(term.node, cst.Name):
        return None
    return find_import_site(module, (source,), term.node.value, term.spelling.binds or "")


def decide(
    module: cst.Module,
    ctx: PatchContext,
    clauses: Sequence[Clause],
    where: str,
    evidence: Sequence[cst.CSTNode],
    scopes: Sequence[cst.CSTNode] = (),
    shape: Shape = None,
) -> Finding:
    """The state of ``clauses`` (the SM tests a gate patch found in the functions
    ``scopes``), and the change if pending (``shape``: what the new SM120 term becomes)."""
    to_widen = [c for c in clauses if not admits_sm12x(c.terms)]
    if to_widen:
        return _widening(module, ctx, to_widen, where, evidence, scopes, shape)
    if any(names_sm120(c.terms) for c in clauses):
        drift = unbound_sm120(module, ctx, [t for c in clauses for t in c.terms], where, evidence)
        if drift is not None:
            return drift
        shown = "; ".join(code(c.node) for c in clauses if names_sm120(c.terms))
        return Finding(State.APPLIED, f"{where}: {shown}", where, evidence, scopes=scopes)
    return Finding(
        State.NOT_NEEDED,
        f"{where} already admits SM12x: {'; '.join(describe(c.terms) for c in clauses)}",
        where,
        evidence,
        scopes=scopes,
    )


def _widening(
    module: cst.Module,
    ctx: PatchContext,
    clauses: Sequence[Clause],
    where: str,
    evidence: Sequence[cst.CSTNode],
    scopes: Sequence[cst.CSTNode],
    shape: Shape,
) -> Finding:
    new_terms = [template_term(c.terms) for c in clauses]
    site: ImportSite | None = None
    helpers = [t for t in new_terms if t.spelling is HELPER]
    others = [t for t in new_terms if t.spelling is not HELPER]
    if helpers and unbound(module, ctx, helpers):
        found = helper_import(module, ctx, "is_sm100_supported")
        if isinstance(found, str):
            return Finding(State.DRIFT, f"{where} tests is_sm100_supported(), but {found}", where)
        site = found
    missing = unbound(module, ctx, others)
    twins: list[tuple[ImportSite, str]] = []
    for term in others:
        name = term.spelling.binds
        if name in missing and name in ctx.bound_elsewhere:
            twin = _twin_import(module, term, ctx.bound_elsewhere[name])
            if twin is not None:
                twins.append((twin, name))
                missing.remove(name)
    if missing:
        return Finding(
            State.DRIFT, f"{where}: the SM120 term would need {', '.join(missing)}, which nothing binds", where
        )

    def apply(tree: cst.Module) -> cst.Module:
        pairs: list[tuple[cst.CSTNode, cst.CSTNode]] = [(c.node, widen(c, shape)) for c in clauses]
        if site is not None:
            pairs.append((site.node, insert_after(site, SM120_HELPER)))
        pairs.extend((twin.node, insert_after(twin, name)) for twin, name in twins)
        return replace_all(tree, pairs, scopes)

    added = ", ".join(
        dict.fromkeys(
            code(shape(c, sm120_term(t)) if shape else sm120_term(t)) for c, t in zip(clauses, new_terms, strict=True)
        )
    )
    return Finding(
        State.PENDING,
        f"{where}: will widen {'; '.join(code(c.node) for c in clauses)} with {added}"
        + (f" and import {SM120_HELPER} from {site.source}" if site else "")
        + "".join(f" and import {name} from {twin.source}" for twin, name in twins),
        where,
        evidence,
        apply,
        scopes,
    )
