"""``sm120patch revert``: restore every backed-up file byte for byte, then remove the state."""

from __future__ import annotations

from pathlib import Path

from sm120patch.commands.common import file_statuses, plan_tree, set_aside, state_summary, version_text
from sm120patch.errors import EnvironmentProblem, ExitCode, NotAsAsked
from sm120patch.locate.tree import SglangTree
from sm120patch.plan.registry import all_patches
from sm120patch.report.outcome import Command, Outcome
from sm120patch.transaction import links
from sm120patch.transaction.fsutil import sha256
from sm120patch.transaction.journal import Entry, Op, check_writable, commit, recover, remove_temps
from sm120patch.transaction.state import Manifest, StateDir


def revert(tree: SglangTree, force: bool = False, dry_run: bool = False) -> Outcome:
    state = StateDir(tree.package_dir)
    while True:
        outcome = Outcome(Command.REVERT, tree, ExitCode.OK, "")
        if state.root.is_dir():
            # Judged and done under the lock: an apply beside it runs wholly before or after.
            with state.lock():
                return _revert_locked(outcome, state, force, dry_run)
        _revert_without_state(outcome, state)
        if not state.root.is_dir():  # no apply began while we looked (it makes the folder first)
            return outcome


def _revert_locked(outcome: Outcome, state: StateDir, force: bool, dry_run: bool) -> Outcome:
    tree = outcome.tree
    recovered = recover(state)
    if recovered:
        outcome.notes.append(recovered)
    manifest = state.load()
    if manifest is None:
        _revert_without_state(outcome, state)
        if not dry_run:  # a folder of sm120patch's without a manifest is of no use to anyone
            _remove_state(outcome, state)
        return outcome
    remove_temps(state, [tree.path(rel) for rel in manifest.files])
    outcome.state = state_summary(state, manifest, tree)
    outcome.files = file_statuses(tree, sorted(manifest.files), manifest)
    if not tree.same_release(manifest.sglang_version):
        return _revert_other_release(outcome, state, manifest, dry_run)
    deleted = [s.rel for s in outcome.files if s.sha256 is None]
    if deleted:  # --force could not help: the journal replaces files in place
        raise NotAsAsked(
            f"cannot restore {', '.join(deleted)}: deleted since apply, and revert only replaces files "
            f"in place; nothing was written. Reinstall sglang to get the originals back: "
            f"pip install --force-reinstall --no-deps sglang=={tree.version}"
        )
    changed = [s.rel for s in outcome.files if s.recorded is None]
    if changed and not force:
        outcome.exit_code = ExitCode.NOT_AS_ASKED
        outcome.headline = (
            f"refusing to revert: changed since apply (hash differs from the patched one): {', '.join(changed)}. "
            "Nothing was written. --force restores the originals anyway (the changed files are kept aside)."
        )
        return outcome
    return _restore(outcome, state, manifest, dry_run)


def _remove_state(outcome: Outcome, state: StateDir) -> None:
    """Nothing of sm120patch is left in the sglang tree after a full revert, but what must be
    kept; where that is, is said."""
    try:
        kept = state.remove()
    except OSError as exc:
        raise EnvironmentProblem(
            f"{exc.filename or state.root} could not be removed ({exc.strerror}) once the revert was done "
            f"({outcome.headline or 'nothing to revert'}); remove {state.root} by hand"
        ) from exc
    if kept:
        outcome.notes.append(f"kept {state.root}: it holds {', '.join(kept)}; nothing else of sm120patch is left")


def _revert_without_state(outcome: Outcome, state: StateDir) -> None:
    tree = outcome.tree
    plan = plan_tree(tree, list(all_patches()), change=False)
    outcome.plan = plan
    outcome.files = file_statuses(tree, [f.rel for f in plan.files if f.original is not None], None)
    outcome.state = state_summary(state, None, tree)
    modified = [f.rel for f in outcome.files if f.pristine is False]
    if modified:
        outcome.exit_code = ExitCode.NOT_AS_ASKED
        outcome.headline = (
            f"no saved state in {state.root}, but {', '.join(modified)} differ from the release (RECORD); "
            f"sm120patch did not write them. Restore with `pip install --force-reinstall --no-deps "
            f"sglang=={tree.version}`"
        )
    else:
        outcome.headline = "nothing to revert: no saved state, files as released"


def _revert_other_release(outcome: Outcome, state: StateDir, manifest: Manifest, dry_run: bool) -> Outcome:
    """The saved state belongs to the release sglang was upgraded (or downgraded) from: none of
    its backups is of this release.  Its files may be gone from this one; only a file RECORD
    has another hash for is not pristine."""
    tree, old = outcome.tree, version_text(manifest.sglang_version)
    differ = [s.rel for s in outcome.files if s.pristine is False]
    if differ:
        outcome.exit_code = ExitCode.NOT_AS_ASKED
        outcome.headline = (
            f"the saved state is from sglang {old} but {version_text(tree.version)} is installed, and its "
            f"{', '.join(differ)} differ from its RECORD; restore them with "
            f"`pip install --force-reinstall --no-deps sglang=={tree.version}`"
        )
        return outcome
    unknown = [s.rel for s in outcome.files if s.pristine is None and s.sha256 is not None]
    if unknown:
        why = tree.record.problem or f"not in sglang {tree.version}'s RECORD"
        outcome.notes.append(f"cannot tell whether {', '.join(unknown)} are as released ({why})")
    if not dry_run:
        aside = set_aside(state, manifest.sglang_version or "unknown")
        outcome.notes.append(f"the state of sglang {old} is kept in {aside}")
        _remove_state(outcome, state)
    outcome.headline = (
        f"nothing of sglang {version_text(tree.version)} to revert: the saved state is from sglang {old}, and no "
        f"file it names differs from {version_text(tree.version)}'s RECORD"
    )
    return outcome


def _restore(outcome: Outcome, state: StateDir, manifest: Manifest, dry_run: bool) -> Outcome:
    """Put every backed-up file back (``--force``: keeping changed files aside first)."""
    tree = outcome.tree
    entries: list[Entry] = []
    diffs = []
    folder: Path | None = None  # where this revert keeps the changed files (--force)
    for status in outcome.files:
        record = manifest.files[status.rel]
        if status.sha256 == record.sha256_before:
            continue
        backup = state.root / record.backup
        data = backup.read_bytes() if backup.is_file() else b""
        path = links.target(tree.package_dir, tree.path(status.rel)).path
        relink = record.link is not None and links.leads_to(path, record.link, record.sha256_before)
        if sha256(data) != record.sha256_before and not relink:
            raise EnvironmentProblem(
                f"backup {backup} is missing or damaged; nothing was written. Reinstall sglang to restore: "
                f"pip install --force-reinstall --no-deps sglang=={tree.version}"
            )
        if record.link is not None and not relink:
            outcome.notes.append(
                f"sglang/{status.rel} was a link to {record.link}, which no longer holds the release's file "
                "(the installer's cache was cleaned?): restored the original as a file of its own"
            )
        current = path.read_bytes()
        diffs.append((status.rel, current, data))
        if status.recorded is None and not dry_run:
            folder, kept = _keep_changed(state, folder, status.rel, current)
            outcome.notes.append(f"kept the changed {status.rel} as {kept}")
        if relink:
            assert record.link is not None
            after = links.LINK_PREFIX + record.link
            entries.append(Entry(status.rel, str(path), sha256(current), after, record.backup, link=record.link))
        else:
            entries.append(Entry(status.rel, str(path), sha256(current), record.sha256_before, record.backup))
    outcome.changes = diffs
    if dry_run:
        outcome.headline = f"dry run: would restore {len(entries)} file(s); nothing written"
        return outcome
    check_writable([Path(e.path) for e in entries])
    commit(state, entries, None, Op.REVERT)
    outcome.written = [e.rel for e in entries]
    outcome.files = file_statuses(tree, sorted(manifest.files), None)
    outcome.state = state_summary(state, None, tree)
    outcome.headline = f"restored {len(entries)} file(s) byte for byte; state removed"
    if any(e.link is not None for e in entries):
        outcome.notes.append("the files that were links into an installer's cache are links again, as installed")
    if tree.linked_from is not None:
        outcome.notes.append(f"sglang is a link to {tree.package_dir}: restored the checkout")
    _remove_state(outcome, state)
    return outcome


def _keep_changed(state: StateDir, folder: Path | None, rel: str, data: bytes) -> tuple[Path, Path]:
    """Keep the changed ``rel`` as ``<folder>/<rel>`` and return (folder, that path).  The first
    file a revert keeps takes a new ``stale-overwritten[-N]/`` folder: an earlier
    ``revert --force``'s copies of someone's edits are never overwritten."""
    try:
        folder = folder or state.new_folder("stale-overwritten")
        aside = folder / rel
        state.put(aside, data)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot keep the changed {rel} aside ({exc.strerror}); nothing was written") from exc
    return folder, aside
