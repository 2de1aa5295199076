"""Plan: parse each target file once, run its patches in memory, compile-check the result.

Nothing here writes.  A plan says, per patch, the state before and after and the evidence
lines; per file, the bytes before and (if anything changes) after.  Every changed patch is
checked again on the result and must read as applied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial

import libcst as cst

from sm120patch.errors import EnvironmentProblem, InternalError
from sm120patch.patcher.kit.model import (
    FOUND_BY_ROLE,
    ROLE_FINDS,
    Anchor,
    Finding,
    Patch,
    PatchContext,
    State,
    known_rows,
)
from sm120patch.patcher.plan.evidence import emit
from sm120patch.patcher.plan.registry import by_id, provided_for
from sm120patch.patcher.plan.role_find import Located, Package, calls_for_role, locate
from sm120patch.patcher.plan.types import Evidence, FilePlan, PatchReport, Plan
from sm120patch.sglang import releases, static_names
from sm120patch.sglang.layout import module_name
from sm120patch.sglang.tree import SglangTree


def _parse(rel: str, data: bytes) -> cst.Module | str:
    try:
        return cst.parse_module(data)
    except cst.ParserSyntaxError as exc:
        return f"{rel}:{exc.raw_line}: does not parse ({exc.message}); a broken hand edit?"
    except (UnicodeDecodeError, ValueError) as exc:
        return f"{rel} cannot be read as Python source ({exc})"


def _report(
    patch: Patch,
    rel: str,
    state: State,
    detail: str,
    where: str = "",
    evidence: list[Evidence] | None = None,
    state_after: State | None = None,
) -> PatchReport:
    return PatchReport(patch.id, patch.summary, patch.requires, rel, state, detail, where, evidence or [], state_after)


def _bound_elsewhere(patch: Patch, rel: str, files: Mapping[str, str]) -> dict[str, str]:
    """Names the patches ``patch`` requires bind in another module than ``rel``, by that
    module's dotted name (a role find put the flags apart from the gate)."""
    registry = by_id()
    names: dict[str, str] = {}
    queue = list(patch.requires)
    while queue:
        dep = registry[queue.pop()]
        other = files.get(dep.id)
        if other is not None and other != rel:
            names.update(dict.fromkeys(dep.provides, module_name(other)))
        queue.extend(dep.requires)
    return names


def plan_file(
    tree: SglangTree,
    rel: str,
    patches: list[Patch],
    change: bool,
    token_limit: int | None = None,
    rows: Mapping[str, tuple[Anchor, ...]] | None = None,
    files: Mapping[str, str] | None = None,
    data: bytes | None = None,
    any_tp: bool | None = None,
    package: Package | None = None,
) -> FilePlan:
    """``data``: the bytes to check instead of the file's (the file as another plan leaves it)."""
    path = tree.path(rel)
    base = PatchContext(
        tree.parsed_version,
        partial(static_names.defines, tree.package_dir),
        token_limit=token_limit,
        auto_enable_any_tp=any_tp,
        rows=rows or {},
    )
    # A name a required patch binds counts only where that patch writes it: this file.
    here = {p.id for p in patches}
    contexts = [
        replace(base, provided=provided_for(p, here), bound_elsewhere=_bound_elsewhere(p, rel, files or {}))
        for p in patches
    ]
    try:
        original = data if data is not None else path.read_bytes() if path.is_file() else None
    except OSError as exc:
        raise EnvironmentProblem(f"{path}: cannot read ({exc.strerror})", code="unreadable") from exc
    plan = FilePlan(rel, path, original)
    if original is None:
        for patch, ctx in zip(patches, contexts, strict=False):
            f = patch.absent(ctx, rel)
            plan.reports.append(_report(patch, rel, f.state, f.detail, f.where, state_after=f.state))
        return plan
    parsed = (package.parsed(rel, original) if package else None) or _parse(rel, original)
    if isinstance(parsed, str):
        for patch in patches:
            plan.reports.append(_report(patch, rel, State.DRIFT, parsed, state_after=State.DRIFT))
        return plan
    module = parsed
    before: list[Finding] = []
    for patch, ctx in zip(patches, contexts, strict=True):
        finding = patch.check(module, ctx)
        before.append(finding)
        if change and finding.state is State.PENDING and finding.apply is not None:
            module = finding.apply(module)
    changed = module is not parsed
    finals = [patch.check(module, ctx) for patch, ctx in zip(patches, contexts, strict=True)] if changed else before
    for patch, first, final in zip(patches, before, finals, strict=True):
        if first.state is State.PENDING and changed and final.state is not State.APPLIED:
            raise InternalError(
                f"{rel}: {patch.id} did not re-check as applied ({final.state.value}: "
                f"{final.detail}); nothing was written"
            )
    scopes = [scope for final in finals for scope in final.scopes]
    data, evidence = emit(original, parsed, module, [final.evidence for final in finals], scopes)
    if changed:
        plan.updated = data
        try:
            compile(plan.updated, str(path), "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            raise InternalError(f"{rel}: the patched code does not compile ({exc}); nothing was written") from exc
    for patch, first, final, lines in zip(patches, before, finals, evidence, strict=True):
        plan.reports.append(
            _report(patch, rel, first.state, final.detail, first.where or final.where, lines, state_after=final.state)
        )
    return plan


def _plan_files(
    tree: SglangTree,
    patches: list[Patch],
    change: bool,
    token_limit: int | None,
    found: Mapping[str, Located],
    any_tp: bool | None,
    package: Package | None = None,
) -> Plan:
    by_file: dict[str, list[Patch]] = {}
    files: dict[str, str] = {}
    for patch in patches:
        rel = found[patch.id].file if patch.id in found else patch.target(tree.exists)
        by_file.setdefault(rel, []).append(patch)
        files[patch.id] = rel
    rows = {pid: located.rows for pid, located in found.items()}
    return Plan(
        tree,
        [
            plan_file(tree, rel, group, change, token_limit, rows, files, any_tp=any_tp, package=package)
            for rel, group in by_file.items()
        ],
    )


def _leaders(plan: Plan) -> dict[str, Anchor]:
    """The known row each patch's target was found through (what a role may follow)."""
    registry = by_id()
    leaders: dict[str, Anchor] = {}
    for report in plan.reports:
        patch = registry.get(report.id)
        rows = [a for a in known_rows(patch.anchors) if a.file == report.file] if patch else []
        named = next((a for a in rows if report.where in (a.name, f"{a.cls}.{a.name}")), None)
        # A target its rows found leads (even where it drifts for another reason: the flags
        # it reads may be elsewhere); a drift that found nothing leads nowhere.
        row = named or (rows[0] if rows and report.state is not State.DRIFT else None)
        if row is not None:
            leaders[report.id] = row
    return leaders


def _by_file(tree: SglangTree, patches: Sequence[Patch]) -> dict[str, list[Patch]]:
    by_file: dict[str, list[Patch]] = {}
    for patch in patches:
        by_file.setdefault(patch.target(tree.exists), []).append(patch)
    return by_file


def make_plan(
    tree: SglangTree,
    patches: list[Patch],
    change: bool,
    token_limit: int | None = None,
    left_out: Sequence[Patch] = (),
    roles: bool | None = None,
    any_tp: bool | None = None,
) -> Plan:
    """Check (and with ``change``, transform in memory) every selected patch; ``token_limit``:
    the fusion token limit asked for (``apply --fuse-up-to``), None to leave it as it is.
    ``left_out``: the patches apply was asked to leave out, checked (never changed) on the files
    as the plan leaves them, so that their clauses are theirs and not unknown to the sweep.
    ``roles``: a target no known layout matches may be found by what it does (else such a
    find is only named, and the patch stays in drift).  ``any_tp``: the auto-enable's TP asked
    for (``apply --auto-enable-tp``, ``PatchContext``)."""
    refused = releases.refusal(tree)
    if refused:
        return Plan(tree, [], refused)
    roles = ROLE_FINDS.get() if roles is None else roles
    # Under SM120PATCH_KNOWN_UP_TO a patch none of whose rows was known yet did not exist then.
    patches = [p for p in patches if known_rows(p.anchors)]
    plan = _plan_files(tree, patches, change, token_limit, {}, any_tp)
    asks = {r.id: r.state for r in plan.reports}
    if any(calls_for_role(p, asks[p.id], tree.parsed_version) for p in patches):
        # Only where a known layout did not match: every other plan reads no more files.
        package = Package(tree)
        found, why = locate(package, by_id().values(), asks, _leaders(plan), tree.parsed_version)
        found = {pid: located for pid, located in found.items() if pid in asks}
        usable = {pid: located for pid, located in found.items() if roles or located.known}
        if usable:
            plan = _plan_files(tree, patches, change, token_limit, usable, any_tp, package)
        _say_roles(plan, found, why, roles)
    _unfounded(plan)
    if change and plan.drift:
        # Drift anywhere means nothing is written: report every file as it is now, not as
        # the change that will not happen would leave it.
        return make_plan(
            tree, patches, change=False, token_limit=token_limit, left_out=left_out, roles=roles, any_tp=any_tp
        )
    leaves = {f.rel: f.updated for f in plan.changes}
    for rel, group in _by_file(tree, [p for p in left_out if known_rows(p.anchors)]).items():
        for report in plan_file(tree, rel, group, change=False, data=leaves.get(rel), any_tp=any_tp).reports:
            report.leave_out("left out as asked (--only / --skip)")
            plan.left_out.append(report)
    return plan


def _unfounded(plan: Plan) -> None:
    """A patch that follows another's target and found nothing of its own is not "not
    needed" while that target was not found: what it says of the gate is unfounded there."""
    registry = by_id()
    states = {r.id: r for r in plan.reports}
    changed = True
    while changed:  # a follower of a follower (the import follows the flags)
        changed = False
        for report in plan.reports:
            patch = registry.get(report.id)
            role = patch.role if patch else None
            leader = states.get(role.follows) if role and role.follows else None
            if leader is None or report.state is not State.NOT_NEEDED or report.where:
                continue
            if State.DRIFT in (leader.state, leader.state_after):
                report.state = report.state_after = State.DRIFT
                report.detail = f"{report.detail}, but {leader.id} did not find the target this one follows"
                changed = True


def _say_roles(plan: Plan, found: Mapping[str, Located], why: Mapping[str, str], allowed: bool) -> None:
    """Each report says how its target was found, or why a role could not find it."""
    for report in plan.reports:
        located = found.get(report.id)
        if located is not None and located.known:
            continue  # followed into the file the layout table names: a known layout
        if located is not None and allowed:
            report.found_by, report.found_at = FOUND_BY_ROLE, located.where
        elif located is not None and report.state is State.DRIFT:
            report.detail += (
                f"; found by role in {located.where}, not a known layout, which --known-layouts-only refuses"
            )
        elif report.id in why and report.state is State.DRIFT:
            report.detail += f"; looked for by role: {why[report.id]}"
