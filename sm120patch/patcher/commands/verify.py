"""``sm120patch verify``: every patch's state, each file against RECORD, and with
``--runtime`` the patched modules imported in the serving interpreter."""

from __future__ import annotations

import sys

from sm120patch.errors import ExitCode
from sm120patch.output.words import counted
from sm120patch.patcher.commands import shared_files
from sm120patch.patcher.commands.kernel_blockers import (
    HOST_HINT,
    fused_path_warnings,
)
from sm120patch.patcher.commands.revert import FORCE
from sm120patch.patcher.commands.state_report import (
    file_statuses,
    state_summary,
    version_text,
)
from sm120patch.patcher.kit.model import State
from sm120patch.patcher.outcome import Command, FileStatus, Outcome
from sm120patch.patcher.plan.current import read_state
from sm120patch.patcher.plan.gate_sweep import prefetch, sweep_tree
from sm120patch.patcher.plan.left_out import left_out, shut_warning
from sm120patch.patcher.plan.token_limit import limit_note
from sm120patch.patcher.plan.types import Plan
from sm120patch.patcher.transaction.state_dir import Manifest, StateDir
from sm120patch.sglang.tree import SglangTree

#: Starts the warning that ``revert`` will refuse a file changed since apply: matched by scripts.
REVERT_REFUSES = "revert-refuses"


def verify(tree: SglangTree, runtime_timeout: float | None = None, strict: bool = False) -> Outcome:
    """Check every patch; with ``runtime_timeout``, also import the patched modules in the
    serving interpreter (``verify --runtime``).  ``strict``: a warning about the fused path (an
    SM check no patch owns, FlashInfer without the kernel) is exit 1 too."""
    state = StateDir(tree.package_dir)
    reading = prefetch(tree)  # the sweep's reading, beside the parsing
    judged = read_state(tree)
    plan, manifest = judged.plan, judged.manifest
    outcome = Outcome(
        Command.VERIFY, tree, ExitCode.OK, "", plan, state=state_summary(state, manifest, tree, judged.own)
    )
    read = {f.rel: f.original for f in plan.files if f.original is not None}
    outcome.files = file_statuses(tree, list(read), manifest, by_hash=judged.by_hash, read=read)
    swept = sweep_tree(tree, plan, manifest, judged.by_hash, reading)
    outcome.left_out = left_out(plan)
    outcome.warnings = fused_path_warnings(tree) + swept.warnings + shut_warning(outcome.left_out)
    outcome.sm_checks = swept.as_json()
    found = shared_files.targets(tree, list(read))
    pending = any(r.state is State.PENDING for r in plan.reports)
    outcome.notes += shared_files.notes(found, written=False, brief=not pending)
    if outcome.state and outcome.state.interrupted:
        outcome.notes.append(
            f"an apply/revert was interrupted ({state.journal_path}); "
            "the next `sm120patch apply` or `revert` finishes it"
        )
    refusal = shared_files.write_refusal(tree, list(read))
    outcome.exit_code, outcome.headline = _verdict(plan, outcome.files, tree, manifest, judged.own, refusal)
    if outcome.exit_code != ExitCode.OK and plan.refusal is None and not plan.drift:
        outcome.refused_as = "pending"
    in_store = shared_files.patched_store(tree, found, outcome.files)
    if in_store and outcome.exit_code == ExitCode.OK:  # never green on bytes this environment did not write
        outcome.exit_code, outcome.headline, outcome.refused_as = ExitCode.NOT_AS_ASKED, in_store, "shared-store"
    elif in_store:
        outcome.notes.append(in_store)
    if manifest is not None and not judged.own:
        # Said once, and never "replaced" beside "applied": the patches may be in place anyway.
        what = (
            "the files are no longer what apply wrote"
            if outcome.exit_code == ExitCode.OK
            else "an upgrade or reinstall replaced the patched files"
        )
        outcome.notes.append(
            f"the saved state is from sglang {version_text(manifest.sglang_version)}, but {version_text(tree.version)} "
            f"is installed: {what} (apply sets the old state aside)"
        )
    elif manifest is not None and not tree.same_release(manifest.sglang_version):
        outcome.notes.append(
            f"the saved state was written when this sglang read as {version_text(manifest.sglang_version)}; its "
            "files still hold what apply wrote, so it is this tree's state (revert restores from it)"
        )
    limit = limit_note(plan.reports, manifest, tree)
    if limit:
        outcome.notes.append(limit)
    if outcome.exit_code == ExitCode.OK and strict and outcome.warnings:
        outcome.exit_code, outcome.refused_as = ExitCode.NOT_AS_ASKED, "strict"
        outcome.headline = (
            f"{outcome.headline}, but --strict refuses the {counted(len(outcome.warnings), 'warning')} "
            "about the fused path"
        )
    if manifest is not None and judged.own:  # after --strict: not about the fused path
        outcome.warnings += _revert_refuses(outcome.files, manifest)
    if outcome.exit_code == ExitCode.OK and not shut_warning(outcome.left_out):  # a gate left shut: not "open"
        outcome.notes.append(HOST_HINT)
    if runtime_timeout is not None and not plan.refusal:
        _runtime(outcome, runtime_timeout)
    return outcome


def _verdict(
    plan: Plan,
    files: list[FileStatus],
    tree: SglangTree,
    manifest: Manifest | None,
    own: bool,
    refusal: str | None = None,
) -> tuple[ExitCode, str]:
    """One sentence for each way a tree can be: refused, drift, patched and intact (but what
    apply was asked to skip), not patched (never, or reverted), reinstalled or upgraded after an
    apply, edited by hand.  ``refusal``: why apply would write nothing here, said instead of
    "run apply"."""
    if plan.refusal:
        return ExitCode.NOT_AS_ASKED, plan.refusal
    if any(r.state is State.DRIFT for r in plan.reports):
        return ExitCode.NOT_AS_ASKED, "drift: the code is not what the patches know; see the details"
    pending = {r.file for r in plan.reports if r.state is State.PENDING}
    if not pending:
        skipped = [r.id for r in plan.reports if r.state is State.SKIPPED]
        if skipped:
            left_out = ", ".join(skipped)
            return ExitCode.OK, f"all patches applied, except {left_out}: skipped, as the last apply was asked"
        return ExitCode.OK, "all patches applied"
    release = f"sglang {tree.version}" if tree.version else "this sglang"
    run = "Run `sm120patch apply`." if refusal is None else f"apply would refuse: {refusal}"
    mine = [f for f in files if f.rel in pending]
    changed = ", ".join(f"sglang/{f.rel}" for f in mine if f.pristine is False and f.recorded is None)
    if manifest is not None and not own:
        return ExitCode.NOT_AS_ASKED, (
            f"not patched: sglang was upgraded from {version_text(manifest.sglang_version)} to "
            f"{version_text(tree.version)} after `apply`, which replaced the patched files. {run}"
        )
    if manifest is not None:
        if not changed:
            return ExitCode.NOT_AS_ASKED, (
                f"not patched: {release} was reinstalled after `apply`; its files are the release's again. {run}"
            )
        return ExitCode.NOT_AS_ASKED, (
            f"not patched: {changed} changed after `apply` (a hand edit or another tool: the hash matches neither "
            f"the release nor what apply wrote). {run}"
        )
    if changed:
        return ExitCode.NOT_AS_ASKED, (
            f"not patched, and {changed} differ from the release (RECORD): edited by hand or by another tool. {run}"
        )
    # A full revert leaves no trace, so "never patched" and "reverted" read the same.
    if mine and all(f.pristine for f in mine):
        return ExitCode.NOT_AS_ASKED, (
            f"not patched: the files are {release}'s release files (RECORD hashes match). {run}"
        )
    return ExitCode.NOT_AS_ASKED, f"not patched. {run}"


def _revert_refuses(files: list[FileStatus], manifest: Manifest) -> list[str]:
    """A file apply wrote whose bytes are neither what it wrote nor the original (a hand edit):
    ``revert`` refuses it (``revert._refused``), said now rather than when it is wanted."""
    ours = [f for f in files if f.rel in manifest.files and f.sha256 is not None]  # deleted: revert says why
    changed = [f"sglang/{f.rel}" for f in ours if f.recorded is None]
    if not changed:
        return []
    return [
        f"[{REVERT_REFUSES}] changed since apply (hash differs from the patched one): {', '.join(changed)}; "
        f"`sm120patch revert` will refuse to restore {'it' if len(changed) == 1 else 'them'}, "
        f"`sm120patch revert --force` {FORCE}"
    ]


def _runtime(outcome: Outcome, timeout: float) -> None:
    from sm120patch.patcher import runtime

    tree, plan = outcome.tree, outcome.plan
    assert plan is not None
    python = tree.python or sys.executable
    outcome.runtime = runtime.check(tree, [f.rel for f in plan.files if f.original is not None], python, timeout)
    code, line = runtime.runtime_verdict(outcome.runtime, python)
    if code is ExitCode.OK:
        outcome.notes.append(line)
    else:
        outcome.exit_code, outcome.headline, outcome.refused_as = code, line, "runtime-check"
