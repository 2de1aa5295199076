"""``sm120patch apply``: plan, refuse what must not be written, then back up and replace
atomically under the lock (the journal protocol in ``transaction/journal.py``)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from sm120patch.errors import EnvironmentProblem, ExitCode
from sm120patch.output.words import counted
from sm120patch.patcher.commands import shared_files
from sm120patch.patcher.commands.kernel_blockers import (
    HOST_HINT,
    fused_path_warnings,
    gpu_note,
    missing_kernel_refusal,
)
from sm120patch.patcher.commands.planning import (
    plan_changes,
    plan_tree,
    why_not_written,
)
from sm120patch.patcher.commands.state_report import (
    file_statuses,
    set_aside,
    state_summary,
    version_text,
)
from sm120patch.patcher.kit.model import Patch
from sm120patch.patcher.outcome import Command, Outcome
from sm120patch.patcher.plan import auto_enable
from sm120patch.patcher.plan.gate_sweep import Prefetch, Sweep, prefetch, remember, sweep_tree
from sm120patch.patcher.plan.left_out import left_out, shut_warning, still_applied
from sm120patch.patcher.plan.registry import all_patches
from sm120patch.patcher.plan.token_limit import PATCH_ID, LimitAsk, recorded, rewritten
from sm120patch.patcher.plan.trust import record, trusted_plan
from sm120patch.patcher.plan.types import Plan
from sm120patch.patcher.transaction import links
from sm120patch.patcher.transaction.fsutil import remove_stale_temps
from sm120patch.patcher.transaction.identity import same_tree
from sm120patch.patcher.transaction.journal import (
    Change,
    Op,
    check_writable,
    commit,
    recover,
    remove_temps,
    stage,
    unchanged,
)
from sm120patch.patcher.transaction.state_dir import Manifest, StateDir
from sm120patch.runner import DEFAULT_TIMEOUT_S
from sm120patch.sglang.tree import SglangTree


def apply(
    tree: SglangTree,
    patches: list[Patch] | None = None,
    dry_run: bool = False,
    notes: list[str] | None = None,
    strict: bool = False,
    allow_missing_kernel: bool = False,
    timeout: float = DEFAULT_TIMEOUT_S,
    token_limit: LimitAsk | None = None,
    auto_enable_tp: str | None = None,
) -> Outcome:
    """Patch the tree with ``patches`` (default: all).  A FlashInfer beside sglang without
    the SM12x kernel refuses the change unless ``allow_missing_kernel``.  ``strict``: any
    warning about the fused path refuses it too, for image builds.  ``timeout``: how long
    nvidia-smi may take to say whether this host has an SM12x GPU.  ``token_limit``: the fusion
    token limit asked for (``--fuse-up-to``); without it, the one the last apply of this
    release recorded stays, and a tree never asked keeps sglang's.  ``auto_enable_tp``: the TP the
    widened auto-enable admits SM12x at (``--auto-enable-tp 2|any``); without it, the one the
    last apply of this release recorded stays, else TP 2."""
    if token_limit is not None and patches is not None and PATCH_ID not in {p.id for p in patches}:
        raise EnvironmentProblem(
            f"--fuse-up-to needs the {PATCH_ID} patch, which --only / --skip left out", code="usage"
        )
    if auto_enable_tp is not None and patches is not None and auto_enable.PATCH_ID not in {p.id for p in patches}:
        raise EnvironmentProblem(
            f"--auto-enable-tp needs the {auto_enable.PATCH_ID} patch, which --only / --skip left out", code="usage"
        )
    state = StateDir(tree.package_dir)
    saved = state.load()
    asked = token_limit or recorded(saved, tree)
    limit = asked.limit if asked else None
    tp_asked = auto_enable_tp or auto_enable.recorded(saved, tree)
    asks = _Asks(limit, auto_enable.any_tp(tp_asked))
    read = [prefetch(tree)]  # the sweep's reading, beside the planning; used once
    outcome = Outcome(Command.APPLY, tree, ExitCode.OK, "", notes=list(notes or []))
    in_store = shared_files.store_problem(tree)
    if in_store:  # not even the state folder may be made there; a dry run says so alike
        raise EnvironmentProblem(in_store, code="shared-store")
    linked = shared_files.linked_package(tree)
    if linked:
        outcome.notes.append(linked)
    outcome.warnings = fused_path_warnings(tree)
    refusal = None if allow_missing_kernel else missing_kernel_refusal(tree)
    note = gpu_note(timeout)
    if note:
        outcome.notes.append(note)
    selected = patches if patches is not None else list(all_patches())
    notes_so_far, warnings_so_far = list(outcome.notes), list(outcome.warnings)
    swept: list[Sweep] = []  # the sweep of SM checks of the tree as judged

    def plan_under_lock() -> Plan | None:
        outcome.notes = list(notes_so_far)  # judged again when a writer began meanwhile
        outcome.warnings = list(warnings_so_far)
        explicit = token_limit is not None or auto_enable_tp is not None
        return _judge(outcome, state, patches, selected, dry_run, strict, refusal, swept, read, asks, explicit)

    # Judged while no apply or revert is writing (the lock, shared): what it finds is true.
    plan = state.consistent(plan_under_lock)
    if plan is None:
        if outcome.plan is not None and outcome.exit_code == ExitCode.OK and not dry_run:
            adopted = _refresh_record(
                state,
                outcome.plan,
                partial=len(selected) < len(all_patches()),
                asked=token_limit,
                tp_asked=auto_enable_tp,
            )
            if adopted:
                outcome.notes.append(adopted)
                outcome.state = state_summary(state, state.load(), tree)
            _remember_sweep(state, outcome.plan.tree, swept)
        _say_auto_enable(outcome, tp_asked)
        return outcome
    _changes(plan)  # a target whose folder links out of the package: refused before the state folder is made
    with state.lock():
        recovered = recover(state)
        if recovered:
            outcome.notes.append(recovered)
        remove_temps(state, [f.path for f in plan.files])
        if recovered or not _still_current(plan):
            # Another run changed the tree while we waited for the lock: plan again.
            plan = plan_tree(tree, selected, change=True, token_limit=limit, any_tp=asks.any_tp)
            _sweep(outcome, plan, swept, warnings_so_far)
        if plan.changes and not why_not_written(plan):
            _write(outcome, plan, state, asked, tp_asked)
            manifest = state.load()
            if swept and manifest is not None:  # under the lock already, as the tree now stands
                with contextlib.suppress(OSError):
                    remember(tree, state, manifest, swept[0])
            if token_limit is None and asked is not None:  # a plain apply: say the recorded limit came back
                outcome.notes += rewritten(plan.reports, asked)
        _report_plan(outcome, plan, state, dry_run)
        if recovered and not outcome.written and outcome.exit_code == ExitCode.OK:
            # The stopped run did the writing; "already applied" would hide that this one finished it.
            outcome.headline = "finished the interrupted run (see its note); nothing else to change"
        _say_auto_enable(outcome, tp_asked)
        return outcome


@dataclass(frozen=True)
class _Asks:
    """What the patches are asked to write besides their SM terms (asked now or recorded)."""

    limit: int | None  # the fusion token limit (--fuse-up-to)
    any_tp: bool | None  # the auto-enable's TP (--auto-enable-tp; ``PatchContext.auto_enable_any_tp``)


def _say_auto_enable(outcome: Outcome, tp_asked: str | None) -> None:
    """Which form of the auto-enable is in force once this apply is done, and why: before the
    closing pointer to doctor, which stays last."""
    if outcome.plan is not None and outcome.exit_code == ExitCode.OK:
        note = auto_enable.auto_enable_note(outcome.plan.reports, tp_asked)
        if note:
            at = outcome.notes.index(HOST_HINT) if HOST_HINT in outcome.notes else len(outcome.notes)
            outcome.notes.insert(at, note)


def _judge(
    outcome: Outcome,
    state: StateDir,
    patches: list[Patch] | None,
    selected: list[Patch],
    dry_run: bool,
    strict: bool,
    refusal: str | None,
    swept: list[Sweep],
    read: list[Prefetch | None],
    asks: _Asks,
    explicit: bool,
) -> Plan | None:
    """The plan to write, or None: then ``outcome`` is the answer (refused, a dry run, or
    nothing to write).  ``swept`` gets the sweep of SM checks, its warnings go to ``outcome``."""
    tree = outcome.tree
    manifest = state.load()
    warnings = list(outcome.warnings)
    trusted = trusted_plan(tree, state, manifest) if patches is None and not dry_run and not explicit else None
    if trusted is not None:
        swept[:] = [sweep_tree(tree, trusted, manifest, True, read.pop() if read else None)]
        outcome.warnings, outcome.sm_checks = warnings + swept[0].warnings, swept[0].as_json()
        if not (strict and outcome.warnings):
            _report_plan(outcome, trusted, state, dry_run, by_hash=True)
            return None
    plan = plan_tree(tree, selected, change=True, token_limit=asks.limit, any_tp=asks.any_tp)
    _sweep(outcome, plan, swept, warnings, read)
    if dry_run and plan.changes and not why_not_written(plan):
        _changes(plan)  # a target whose folder links out of the package: refused as the real apply is
    if why_not_written(plan) or dry_run:
        if dry_run and refusal and plan.changes:
            outcome.notes.append(refusal.replace("refusing to patch, nothing was written", "apply would refuse"))
        _report_plan(outcome, plan, state, dry_run)
        return None
    if refusal and plan.changes:
        outcome.refused_as = "missing-kernel"
        _refuse(outcome, selected, state, refusal, swept, warnings, asks)
        return None
    if strict and outcome.warnings:
        say = "says" if len(outcome.warnings) == 1 else "say"
        headline = (
            f"nothing was written: --strict refuses the {counted(len(outcome.warnings), 'warning')} that {say} "
            "the fused path would still not run on SM12x"
        )
        outcome.refused_as = "strict"
        _refuse(outcome, selected, state, headline, swept, warnings, asks)
        return None
    if not plan.changes and not state.journal_path.exists():
        _report_plan(outcome, plan, state, dry_run)
        return None
    return plan


def _sweep(
    outcome: Outcome, plan: Plan, swept: list[Sweep], warnings: list[str], read: list[Prefetch | None] | None = None
) -> None:
    """The SM checks no patch owns in the tree as ``plan`` leaves it, and a left-out patch that
    keeps the fused path shut, as warnings.  ``read``: the package as read before the planning
    (taken: a second judgement reads it again)."""
    prefetched = read.pop() if read else None
    swept[:] = [sweep_tree(outcome.tree, plan, None, False, prefetched)]
    outcome.left_out = left_out(plan)
    outcome.warnings = warnings + swept[0].warnings + shut_warning(outcome.left_out)
    outcome.sm_checks = swept[0].as_json()
    outcome.notes[:0] = still_applied(plan)


def _remember_sweep(state: StateDir, tree: SglangTree, swept: list[Sweep]) -> None:
    """Nothing to write, but the sweep was not read from a record that holds: record it
    beside a manifest that verify trusts, so that verify need not read the package again
    (``gate_sweep.remember``).  Best effort: without a record, verify sweeps the package."""
    if not swept or swept[0].recalled or state.load() is None:
        return  # a tree without saved state keeps none (patched by hand, say)
    with contextlib.suppress(OSError), state.lock():
        remove_stale_temps([state.root])  # of a run killed while it wrote the record
        manifest = state.load()
        if manifest is None or trusted_plan(tree, state, manifest) is None:
            return
        remember(tree, state, manifest, swept[0])


def _refresh_record(
    state: StateDir, plan: Plan, partial: bool, asked: LimitAsk | None = None, tp_asked: str | None = None
) -> str | None:
    """Nothing to write, but what verify may trust is stale (a newer sm120patch, or a version
    that appeared or moved since), or there is no record while apply was asked to leave
    patches out (``partial``): record it, so the next verify needs no parsing and judges
    against what was asked.  Only the manifest is written, under the lock, and only for this
    tree.  ``asked``: a fusion token limit already in force, now asked with another source
    (``--fuse-up-to measured`` after ``512``); ``tp_asked``: the auto-enable's TP, asked where the
    code already has that form (``--auto-enable-tp any`` over a hand edit).  Returns the note that
    says the state now names this tree's version, if it does."""
    manifest = state.load()
    tree = plan.tree
    if manifest is None and not partial and tp_asked is None:
        return None
    same_ask = (asked is None or (manifest is not None and manifest.token_limit == asked.to_json())) and (
        tp_asked is None or (manifest is not None and manifest.auto_enable_tp == tp_asked)
    )
    if manifest is not None and (not same_tree(tree, manifest) or (trusted_plan(tree, state, manifest) and same_ask)):
        return None
    with state.lock():
        now = state.load()
        if (now is None) != (manifest is None) or not _still_current(plan):
            return None  # another run wrote meanwhile: its record stands
        manifest = now or Manifest(tree.version, str(tree.package_dir))
        adopted = _adopt(manifest, tree)
        if asked is not None:
            manifest.token_limit = asked.to_json()
        if tp_asked is not None:
            manifest.auto_enable_tp = tp_asked
        record(plan, manifest, [p.id for p in all_patches()])
        try:
            state.save(manifest)
        except OSError as exc:
            raise EnvironmentProblem(
                f"the patches are in place, but recording them in {state.manifest_path} failed "
                f"({exc.strerror}: {exc.filename or state.manifest_path}); no sglang file was changed",
                code="not-writable",
            ) from exc
    return adopted


def _adopt(manifest: Manifest, tree: SglangTree) -> str | None:
    """A state of this tree (``same_tree``) saved under another version: it now names this one."""
    if tree.same_release(manifest.sglang_version):
        return None
    old = version_text(manifest.sglang_version)
    manifest.sglang_version, manifest.sglang_location = tree.version, str(tree.package_dir)
    return (
        f"the saved state was written when this sglang read as {old}; its files still hold what apply "
        f"wrote, so it is this tree's state, now recorded as sglang {version_text(tree.version)}"
    )


def _write(
    outcome: Outcome, plan: Plan, state: StateDir, asked: LimitAsk | None = None, tp_asked: str | None = None
) -> None:
    tree = outcome.tree
    found = shared_files.targets(tree, [f.rel for f in plan.changes])
    changes = _changes(plan)
    check_writable([c.path for c in changes])
    manifest = state.load()
    if manifest is not None and same_tree(tree, manifest):
        adopted = _adopt(manifest, tree)
        if adopted:
            outcome.notes.append(adopted)
    elif manifest is not None:
        aside = set_aside(state, manifest.sglang_version or "unknown")
        outcome.notes.append(
            f"the saved state was for sglang {version_text(manifest.sglang_version)}; {version_text(tree.version)} "
            "is installed now. "
            f"Old state and backups kept in {aside}"
        )
        manifest = None
    manifest = manifest or Manifest(tree.version, str(tree.package_dir))
    entries = stage(state, changes, manifest)
    manifest.token_limit = asked.to_json() if asked else None
    manifest.auto_enable_tp = tp_asked
    record(plan, manifest, [p.id for p in all_patches()])
    commit(state, entries, manifest, Op.APPLY)
    outcome.written = [e.rel for e in entries]
    outcome.notes += shared_files.notes(found, written=True)
    outcome.changes = plan_changes(plan)


def _still_current(plan: Plan) -> bool:
    """Whether every planned file still has the bytes the plan was made from."""
    return unchanged((f.path, f.original) for f in plan.files)


def _changes(plan: Plan) -> list[Change]:
    """The plan's changed files as the transaction takes them: each names the file to
    replace, never one in a store it links to (``links.target``)."""
    changes = []
    for f in plan.changes:
        # The planner changes existing files only.
        assert f.original is not None
        assert f.updated is not None
        target = links.target(plan.tree.package_dir, f.path)
        changes.append(Change(f.rel, target.path, f.original, f.updated, f.applies, link=target.link))
    return changes


def _report_plan(outcome: Outcome, plan: Plan, state: StateDir, dry_run: bool, by_hash: bool = False) -> Outcome:
    tree = outcome.tree
    outcome.plan = plan
    manifest = state.load()
    outcome.state = state_summary(state, manifest, tree)
    outcome.files = file_statuses(tree, [f.rel for f in plan.files if f.original is not None], manifest, by_hash)
    if not outcome.written:
        found = shared_files.targets(tree, [s.rel for s in outcome.files])
        in_store = shared_files.patched_store(tree, found, outcome.files)
        outcome.notes += shared_files.notes(found, written=False) + ([in_store] if in_store else [])
    refused = why_not_written(plan)
    if refused:
        outcome.exit_code, outcome.headline = ExitCode.NOT_AS_ASKED, refused
    elif dry_run:
        outcome.changes = plan_changes(plan)
        outcome.headline = (
            f"dry run: would change {counted(len(plan.changes), 'file')}; nothing written"
            if plan.changes
            else "dry run: nothing to change"
        )
    else:
        written = len(outcome.written)
        outcome.headline = (
            f"patched {counted(written, 'file')}; backups in {state.root}"
            if written
            else "already applied: nothing to change"
        )
        if not shut_warning(outcome.left_out):  # a gate left shut as asked: not "open"
            outcome.notes.append(HOST_HINT)
    return outcome


def _refuse(
    outcome: Outcome,
    patches: list[Patch],
    state: StateDir,
    headline: str,
    swept: list[Sweep],
    warnings: list[str],
    asks: _Asks,
) -> None:
    """Nothing is written: each patch, its evidence lines and the SM checks no patch owns, as
    the files are now, not as the change that will not happen would leave them.  ``warnings``:
    those of the fused path before the sweep."""
    plan = plan_tree(outcome.tree, patches, change=False, token_limit=asks.limit, any_tp=asks.any_tp)
    if swept:
        _sweep(outcome, plan, swept, warnings)
    _report_plan(outcome, plan, state, dry_run=False)
    outcome.notes = [note for note in outcome.notes if note != HOST_HINT]
    outcome.exit_code, outcome.headline = ExitCode.NOT_AS_ASKED, headline
