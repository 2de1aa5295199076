"""``sm120patch revert``: restore every backed-up file byte for byte, then remove the state."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sm120patch.errors import EnvironmentProblem, ExitCode, NotAsAsked
from sm120patch.output.words import counted
from sm120patch.patcher.commands.planning import plan_tree
from sm120patch.patcher.commands.state_report import file_statuses, set_aside, state_summary, version_text
from sm120patch.patcher.kit.model import State
from sm120patch.patcher.outcome import Command, Outcome
from sm120patch.patcher.plan.registry import all_patches
from sm120patch.patcher.transaction import links
from sm120patch.patcher.transaction.fsutil import remove_tree, sha256, sha256_file
from sm120patch.patcher.transaction.identity import holds_its_writing, not_this_release, same_tree
from sm120patch.patcher.transaction.journal import Entry, Op, check_writable, commit, interrupted, recover, remove_temps
from sm120patch.patcher.transaction.state_dir import BENCH_RESULT, Manifest, StateDir
from sm120patch.sglang.tree import InstallKind, SglangTree

if TYPE_CHECKING:
    from sm120patch.patcher.plan.types import Plan


#: What ``revert --force`` does where a file changed since apply (verify says it too).
FORCE = "restores the originals anyway (the changed files are kept aside)"


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
    _recover(outcome, state)
    manifest = state.load()
    if manifest is not None:
        remove_temps(state, [tree.path(rel) for rel in manifest.files])
        outcome.state = state_summary(state, manifest, tree)
        outcome.files = file_statuses(tree, sorted(manifest.files), manifest)
        if same_tree(tree, manifest):
            return _revert_own(outcome, state, manifest, force, dry_run)
        return _revert_other_release(outcome, state, manifest, force, dry_run)
    kept = _kept_in_place(state, tree)
    if kept is not None:
        return _revert_kept(outcome, state, kept, force, dry_run)
    _revert_without_state(outcome, state)
    if not dry_run:  # a folder of sm120patch's without a manifest is of no use to anyone
        _remove_state(outcome, state)
    return outcome


def _recover(outcome: Outcome, state: StateDir) -> None:
    """Finish an interrupted apply or revert first.  A restore from a kept-aside state that was
    interrupted leaves that folder behind: its journal names it (the backups it restores from),
    and once every file of it holds its backup again it is dropped, as the restore would have."""
    journal = interrupted(state)
    recovered = recover(state)
    if recovered:
        outcome.notes.append(recovered)
    if journal is None or journal.op is not Op.REVERT:
        return
    folders = {e.source.partition("/")[0] for e in journal.entries if e.source.startswith("stale-")}
    for name, kept in state.kept_states():
        restored = all(sha256_file(outcome.tree.path(rel)) == rec.sha256_before for rel, rec in kept.files.items())
        if name in folders and restored:
            _drop_kept(state, name)
            outcome.notes.append(f"the state kept aside in {state.root / name} is restored; removed it")


def _kept_in_place(state: StateDir, tree: SglangTree) -> tuple[str, Manifest] | None:
    """The newest state kept aside (``stale-*/``) of which a file still holds what apply wrote,
    with its folder's name: its backups are where no other command reaches them."""
    return next(((name, m) for name, m in state.kept_states() if holds_its_writing(tree, m)), None)


def _revert_kept(
    outcome: Outcome,
    state: StateDir,
    kept: tuple[str, Manifest],
    force: bool,
    dry_run: bool,
    other: Manifest | None = None,
) -> Outcome:
    """Restore from a state kept aside, as from the saved one (``--force`` keeps the files
    changed since aside), if its backups are this release's.  ``other``: the saved state of
    another release, set aside first, and only once the restore is to happen."""
    tree = outcome.tree
    name, aside = kept
    folder = state.root / name
    outcome.state = state_summary(state, aside, tree)
    outcome.files = file_statuses(tree, sorted(aside.files), aside)
    foreign = not_this_release(tree, aside, kept=True)
    if foreign:
        outcome.exit_code, outcome.refused_as = ExitCode.NOT_AS_ASKED, "foreign-state"
        outcome.headline = (
            f"refusing to restore from the state kept aside in {folder}: {foreign}. No sglang file was changed; "
            f"restore them with {_reinstall(tree, sorted(aside.files))}"
        )
        return outcome
    if _refused(outcome, force, f" (the state kept aside in {folder})"):
        return outcome
    if other is not None and not dry_run:
        moved = set_aside(state, other.sglang_version or "unknown")
        outcome.notes.append(f"the state of sglang {version_text(other.sglang_version)} is kept in {moved}")
    return _restore(outcome, state, aside, dry_run, folder=name)


def _refused(outcome: Outcome, force: bool, source: str = "") -> bool:
    """Whether the files of the state ``outcome`` names refuse a restore (said in ``outcome``):
    one deleted since apply always does, one changed since without ``--force``."""
    tree = outcome.tree
    deleted = [s.rel for s in outcome.files if s.sha256 is None]
    if deleted:  # --force could not help: the journal replaces files in place
        raise NotAsAsked(
            f"cannot restore {', '.join(deleted)}{source}: deleted since apply, and revert only replaces files "
            f"in place; nothing was written. Get the originals back with {_reinstall(tree, deleted)}",
            code="changed-since-apply",
        )
    changed = [s.rel for s in outcome.files if s.recorded is None]
    if changed and not force:
        outcome.exit_code, outcome.refused_as = ExitCode.NOT_AS_ASKED, "changed-since-apply"
        outcome.headline = (
            f"refusing to revert{source}: changed since apply (hash differs from the patched one): "
            f"{', '.join(changed)}. Nothing was written. --force {FORCE}."
        )
        return True
    return False


def _revert_own(outcome: Outcome, state: StateDir, manifest: Manifest, force: bool, dry_run: bool) -> Outcome:
    """The saved state is this tree's: restore its backups (refused where a file changed since)."""
    if _refused(outcome, force):
        return outcome
    return _restore(outcome, state, manifest, dry_run)


def _remove_state(outcome: Outcome, state: StateDir) -> None:
    """Nothing of sm120patch is left in the sglang tree after a full revert, but what must be
    kept; where that is, is said.  Called once ``outcome.headline`` says what the revert did."""
    measured = (state.root / BENCH_RESULT).is_file()
    try:
        kept = state.remove()
    except OSError as exc:
        raise EnvironmentProblem(
            f"{exc.filename or state.root} could not be removed ({exc.strerror}) once the revert was done "
            f"({outcome.headline}); remove {state.root} by hand",
            code="not-writable",
        ) from exc
    if measured:  # said, even where nothing else was reverted
        outcome.notes.append(
            f"removed the saved bench result ({BENCH_RESULT}): run `sm120patch bench kernel` to measure again"
        )
    if kept:
        outcome.notes.append(f"kept {state.root}: it holds {', '.join(kept)}; nothing else of sm120patch is left")


def _revert_without_state(outcome: Outcome, state: StateDir) -> None:
    """No saved state: "as released" is said only on evidence (RECORD's hashes); patches
    found in files RECORD cannot vouch for are named, with what puts the release back."""
    tree = outcome.tree
    plan = plan_tree(tree, list(all_patches()), change=False)
    outcome.plan = plan
    outcome.files = file_statuses(tree, [f.rel for f in plan.files if f.original is not None], None)
    outcome.state = state_summary(state, None, tree)
    modified = [f.rel for f in outcome.files if f.pristine is False]
    unknown = [f.rel for f in outcome.files if f.pristine is None]
    patched = _patched(plan, unknown)
    if modified:
        outcome.exit_code, outcome.refused_as = ExitCode.NOT_AS_ASKED, "not-as-released"
        outcome.headline = (
            f"no saved state in {state.root}, but {', '.join(modified)} differ from the release (RECORD); "
            f"sm120patch did not write them. Restore with {_reinstall(tree, modified)}"
        )
    elif patched:
        outcome.exit_code, outcome.refused_as = ExitCode.NOT_AS_ASKED, "no-backup"
        outcome.headline = _no_backup(f"no saved state in {state.root}", patched, tree, state)
    elif unknown:
        outcome.headline = (
            "nothing to revert: no saved state, and no sm120patch patch is in the files; whether they are "
            f"as released cannot be told ({tree.record.problem or 'no RECORD entry'})"
        )
    else:
        outcome.headline = "nothing to revert: no saved state, files as released"


def _patched(plan: Plan, rels: list[str]) -> list[str]:
    """Those of ``rels`` in which a patch is found applied (a release's own files have none)."""
    return sorted({r.file for r in plan.reports if r.state is State.APPLIED and r.file in rels})


def _no_backup(why: str, patched: list[str], tree: SglangTree, state: StateDir, saved: Manifest | None = None) -> str:
    """Patched files with no backup revert restores from.  A state that still holds backups of
    them (``saved``, the one in place, else one kept aside) is named: none of its files holds
    what its apply wrote, so revert cannot take them for this tree's."""
    states: list[tuple[Path, Manifest]] = [(state.root, saved)] if saved else []
    states += [(state.root / name, m) for name, m in state.kept_states()]
    holders = [folder for folder, m in states if set(patched) & set(m.files)]
    left = (
        f"their backups in {holders[0]} are not restored from, as none of the files holds what that apply wrote"
        if holders
        else "no backup of them is left"
    )
    return (
        f"{why}, but {', '.join(patched)} hold sm120patch's patches and {left}; no sglang file was changed. "
        f"Restore them with {_reinstall(tree, patched)}"
    )


def _reinstall(tree: SglangTree, rels: list[str]) -> str:
    """What puts the release's own ``rels`` back: pip for a wheel, git in a checkout, else the
    source archive the tree was extracted from (pip would install a release elsewhere, never
    into this directory)."""
    if tree.install_kind is InstallKind.WHEEL:
        return f"`pip install --force-reinstall --no-deps sglang=={tree.version}`"
    if any((d / ".git").exists() for d in tree.package_dir.parents):
        return f"`git -C {tree.package_dir} checkout -- {' '.join(rels)}`"
    archive = f"sglang {tree.version}'s source archive" if tree.version else "the sglang source archive it came from"
    return f"{', '.join(rels)} extracted again from {archive} into {tree.package_dir}"


def _revert_other_release(outcome: Outcome, state: StateDir, manifest: Manifest, force: bool, dry_run: bool) -> Outcome:
    """The saved state belongs to the release sglang was upgraded (or downgraded) from: none of
    its backups is of this release (its files no longer hold what apply wrote).  Its files may
    be gone from this one; only a file RECORD has another hash for is not pristine, and one
    RECORD cannot vouch for is judged by what is in it.  Nothing is moved where the revert
    refuses: the state is set aside only on the way to "done"."""
    tree, old, new = outcome.tree, version_text(manifest.sglang_version), version_text(outcome.tree.version)
    differ = [s.rel for s in outcome.files if s.pristine is False]
    if differ:
        outcome.exit_code, outcome.refused_as = ExitCode.NOT_AS_ASKED, "not-as-released"
        outcome.headline = (
            f"the saved state is from sglang {old} but {new} is installed, and its "
            f"{', '.join(differ)} differ from its RECORD; restore them with {_reinstall(tree, differ)}"
        )
        return outcome
    unknown = [s.rel for s in outcome.files if s.pristine is None and s.sha256 is not None]
    if unknown:
        why = tree.record.problem or f"not in sglang {tree.version}'s RECORD"
        outcome.notes.append(f"cannot tell whether {', '.join(unknown)} are as released ({why})")
    kept = _kept_in_place(state, tree)
    if kept is not None:
        return _revert_kept(outcome, state, kept, force, dry_run, other=manifest)
    patched = _patched(plan_tree(tree, list(all_patches()), change=False), unknown) if unknown else []
    if patched:
        outcome.exit_code, outcome.refused_as = ExitCode.NOT_AS_ASKED, "no-backup"
        outcome.headline = _no_backup(
            f"the saved state is from sglang {old}, not {new}", patched, tree, state, manifest
        )
        return outcome
    if not dry_run:
        aside = set_aside(state, manifest.sglang_version or "unknown")
        outcome.notes.append(f"the state of sglang {old} is kept in {aside}")
    if unknown:
        outcome.headline = (
            f"nothing of sglang {new} to revert: the saved state is from sglang {old}, and no sm120patch patch "
            "is in the files it names"
        )
    else:
        outcome.headline = (
            f"nothing of sglang {new} to revert: the saved state is from sglang {old}, and no file it names "
            f"differs from {new}'s RECORD"
        )
    if not dry_run:
        _remove_state(outcome, state)
    return outcome


def _restore(outcome: Outcome, state: StateDir, manifest: Manifest, dry_run: bool, folder: str = "") -> Outcome:
    """Put every backed-up file back (``--force``: keeping changed files aside first).
    ``folder``: the ``stale-*`` folder of a kept-aside state whose written files are in place."""
    tree = outcome.tree
    entries: list[Entry] = []
    diffs = []
    overwritten: Path | None = None  # where this revert keeps the changed files (--force)
    for status in outcome.files:
        record = manifest.files[status.rel]
        if status.sha256 == record.sha256_before:
            continue
        source = f"{folder}/{record.backup}" if folder else record.backup
        backup = state.root / source
        data = backup.read_bytes() if backup.is_file() else b""
        path = links.target(tree.package_dir, tree.path(status.rel)).path
        relink = record.link is not None and links.leads_to(path, record.link, record.sha256_before)
        if relink and not backup.is_file():  # what the link put back leads to, as a dry run's diff shows it
            assert record.link is not None
            data = (path.parent / record.link).read_bytes()
        if sha256(data) != record.sha256_before and not relink:
            raise EnvironmentProblem(
                f"backup {backup} is missing or damaged; nothing was written. Restore the originals with "
                f"{_reinstall(tree, sorted(manifest.files))}",
                code="state-damaged",
            )
        if record.link is not None and not relink:
            outcome.notes.append(
                f"sglang/{status.rel} was a link to {record.link}, which no longer holds the release's file "
                "(the installer's cache was cleaned?): restored the original as a file of its own"
            )
        current = path.read_bytes()
        diffs.append((status.rel, current, data))
        if status.recorded is None and not dry_run:
            overwritten, kept = _keep_changed(state, overwritten, status.rel, current)
            outcome.notes.append(f"kept the changed {status.rel} as {kept}")
        was = links.identity(path) or sha256(current)  # a link by its text, as the journal compares it
        if relink:
            assert record.link is not None
            after = links.LINK_PREFIX + record.link
            entries.append(Entry(status.rel, str(path), was, after, source, link=record.link))
        else:
            entries.append(Entry(status.rel, str(path), was, record.sha256_before, source))
    outcome.changes = diffs
    if dry_run:
        source = f" from the state kept aside in {state.root / folder}" if folder else ""
        outcome.headline = f"dry run: would restore {counted(len(entries), 'file')}{source}; nothing written"
        return outcome
    check_writable([Path(e.path) for e in entries])
    commit(state, entries, None, Op.REVERT)
    outcome.written = [e.rel for e in entries]
    outcome.files = file_statuses(tree, sorted(manifest.files), None)
    outcome.state = state_summary(state, None, tree)
    outcome.headline = f"restored {counted(len(entries), 'file')} byte for byte; state removed"
    if folder:
        _drop_kept(state, folder)
        outcome.headline = (
            f"restored {counted(len(entries), 'file')} byte for byte from the state of sglang "
            f"{version_text(manifest.sglang_version)} kept aside in {state.root / folder}; state removed"
        )
    if any(e.link is not None for e in entries):
        outcome.notes.append("the files that were links into an installer's cache are links again, as installed")
    if tree.linked_from is not None:
        outcome.notes.append(f"sglang is a link to {tree.package_dir}: restored the checkout")
    _remove_state(outcome, state)
    return outcome


def _drop_kept(state: StateDir, folder: str) -> None:
    """A kept-aside state once its backups are back in place: nothing in it is needed."""
    try:
        remove_tree(state.root / folder)
    except OSError as exc:
        raise EnvironmentProblem(
            f"the files are restored, but {exc.filename or state.root / folder} could not be removed "
            f"({exc.strerror}); remove {state.root / folder} by hand",
            code="not-writable",
        ) from exc


def _keep_changed(state: StateDir, folder: Path | None, rel: str, data: bytes) -> tuple[Path, Path]:
    """Keep the changed ``rel`` as ``<folder>/<rel>`` and return (folder, that path).  The first
    file a revert keeps takes a new ``stale-overwritten[-N]/`` folder: an earlier
    ``revert --force``'s copies of someone's edits are never overwritten."""
    try:
        folder = folder or state.new_folder("stale-overwritten")
        aside = folder / rel
        state.put(aside, data)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot keep the changed {rel} aside ({exc.strerror}); nothing was written", code="not-writable"
        ) from exc
    return folder, aside
