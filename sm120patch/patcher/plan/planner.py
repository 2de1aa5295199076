"""Plan: parse each target file once, run its patches in memory, compile-check the result.

Nothing here writes.  A plan says, per patch, the state before and after and the evidence
lines; per file, the bytes before and (if anything changes) after.  Every changed patch is
checked again on the result and must read as applied.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import libcst as cst

from sm120patch.errors import EnvironmentProblem, InternalError
from sm120patch.patcher.kit.model import Finding, Patch, PatchContext, State
from sm120patch.patcher.plan.evidence import emit
from sm120patch.patcher.plan.registry import provided_for
from sm120patch.patcher.plan.types import Evidence, FilePlan, PatchReport, Plan
from sm120patch.sglang import releases, static_names
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


def plan_file(
    tree: SglangTree,
    rel: str,
    patches: list[Patch],
    change: bool,
    token_limit: int | None = None,
    any_tp: bool | None = None,
) -> FilePlan:
    path = tree.path(rel)
    defines = partial(static_names.defines, tree.package_dir)
    base = PatchContext(tree.parsed_version, defines, token_limit=token_limit, auto_enable_any_tp=any_tp)
    contexts = [replace(base, provided=provided_for(p)) for p in patches]
    try:
        original = path.read_bytes() if path.is_file() else None
    except OSError as exc:
        raise EnvironmentProblem(f"{path}: cannot read ({exc.strerror})") from exc
    plan = FilePlan(rel, path, original)
    if original is None:
        for patch, ctx in zip(patches, contexts, strict=False):
            f = patch.absent(ctx, rel)
            plan.reports.append(_report(patch, rel, f.state, f.detail, f.where, state_after=f.state))
        return plan
    parsed = _parse(rel, original)
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


def make_plan(
    tree: SglangTree, patches: list[Patch], change: bool, token_limit: int | None = None, any_tp: bool | None = None
) -> Plan:
    """Check (and with ``change``, transform in memory) every selected patch; ``token_limit``:
    the fusion token limit asked for (``apply --fuse-up-to``), None to leave it as it is;
    ``any_tp``: the auto-enable's TP asked for (``apply --auto-enable-tp``, ``PatchContext``)."""
    refused = releases.refusal(tree)
    if refused:
        return Plan(tree, [], refused)
    by_file: dict[str, list[Patch]] = {}
    for patch in patches:
        by_file.setdefault(patch.target(tree.exists), []).append(patch)
    plan = Plan(tree, [plan_file(tree, rel, group, change, token_limit, any_tp) for rel, group in by_file.items()])
    if change and plan.drift:
        # Drift anywhere means nothing is written: report every file as it is now, not as
        # the change that will not happen would leave it.
        return make_plan(tree, patches, change=False, token_limit=token_limit, any_tp=any_tp)
    return plan
