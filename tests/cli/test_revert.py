"""``sm120patch revert`` (commands/revert.py) on the miniature release: every way a revert
ends, read as the whole ``Outcome`` a user sees, with the bytes it leaves on disk."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from sm120patch import __version__
from sm120patch.errors import EnvironmentProblem, ExitCode, NotAsAsked
from sm120patch.patcher.commands.revert import revert
from sm120patch.patcher.outcome import Command, FileStatus, Outcome, Recorded, StateSummary
from sm120patch.patcher.plan.registry import all_patches
from sm120patch.patcher.transaction import fsutil
from sm120patch.patcher.transaction.fsutil import sha256
from sm120patch.sglang.tree import from_directory
from tests.support.cli import apply_all, tree_hashes
from tests.support.mini_sglang import COMM, FILES, FUSION, SERVER_ARGS, write_mini_sglang

TARGETS = sorted((COMM, FUSION, SERVER_ARGS))  # the files apply patches, in the order revert reports them
ORIGINAL = {rel: FILES[rel].encode() for rel in TARGETS}
PIP = "pip install --force-reinstall --no-deps sglang=="


class Killed(BaseException):
    """Stands in for SIGKILL at a step of the write path: nothing after it runs."""


def applied(package: Path) -> dict[str, bytes]:
    """Apply every patch to the miniature release; the patched bytes of each target."""
    outcome = apply_all(package)
    assert outcome.exit_code == ExitCode.OK, outcome.headline
    return {rel: (package / rel).read_bytes() for rel in TARGETS}


def assert_restored(outcome: Outcome, count: int, aside: Path | None = None) -> None:
    """What "restored N files byte for byte; state removed" says, as facts: done, no code, ``count``
    files written back; one restored from a state kept aside names that folder.  The sentence
    itself is asserted once, in test_as_text's golden outputs."""
    assert (outcome.exit_code, outcome.code, len(outcome.written)) == (ExitCode.OK, None, count), outcome.headline
    assert outcome.headline.startswith(f"restored {'1 file' if count == 1 else f'{count} files'} byte for byte")
    if aside is not None:
        assert f"kept aside in {aside};" in outcome.headline


def contents(package: Path) -> dict[str, bytes]:
    return {rel: (package / rel).read_bytes() for rel in TARGETS}


def state_files(package: Path) -> dict[str, bytes]:
    """Every file of the saved state but the lock (its content is the last holder's pid)."""
    root = package / ".sm120patch"
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != "lock"}


def edit(package: Path, rel: str, line: str) -> bytes:
    """A hand edit of ``rel``: ``line`` appended; the edited bytes."""
    data = (package / rel).read_bytes() + line.encode()
    (package / rel).write_bytes(data)
    return data


def no_state(package: Path) -> StateSummary:
    """What the report says of the state once there is none (or never was)."""
    return StateSummary(str(package / ".sm120patch"), False, None, None, False, [], False)


def saved_state(package: Path, version: str | None = "0.5.11", stale: bool = False) -> StateSummary:
    """What the report says of the state ``applied`` saved (``stale``: for another release)."""
    return StateSummary(str(package / ".sm120patch"), True, version, __version__, stale, TARGETS, False)


def upgrade(package: Path, version: str) -> None:
    """``pip install sglang==VERSION`` over the miniature release: new pristine files and
    dist-info, the saved state of the old release left in place."""
    site = package.parent
    for dist in site.glob("sglang-*.dist-info"):
        shutil.rmtree(dist)
    write_mini_sglang(site, version=version)


# -- no saved state ---------------------------------------------------------------------------


def test_without_state_on_a_pristine_tree_there_is_nothing_to_revert_and_nothing_is_written(mini: Path) -> None:
    before = tree_hashes(mini.parent)
    outcome = revert(from_directory(mini))
    assert (outcome.command, outcome.exit_code) == (Command.REVERT, ExitCode.OK)
    assert (outcome.code, outcome.headline.startswith("nothing to revert")) == (None, True)
    assert (outcome.notes, outcome.written, outcome.changes) == ([], [], [])
    assert outcome.files == [FileStatus(rel, sha256(ORIGINAL[rel]), sha256(ORIGINAL[rel]), None) for rel in TARGETS]
    assert outcome.state == no_state(mini)
    # The plan says what each patch finds, as checked, without changing anything in memory.
    assert outcome.plan is not None
    assert [(f.rel, f.updated) for f in outcome.plan.files] == [(rel, None) for rel in TARGETS]
    assert sorted(r.id for r in outcome.plan.reports) == sorted(p.id for p in all_patches())
    assert all(r.state_after is r.state for r in outcome.plan.reports)
    assert tree_hashes(mini.parent) == before
    assert not (mini / ".sm120patch").exists()


def test_without_state_on_hand_edited_files_names_them_and_the_pip_command(mini: Path) -> None:
    edited = {rel: edit(mini, rel, "# edited by hand\n") for rel in (COMM, SERVER_ARGS)}
    before = tree_hashes(mini.parent)
    outcome = revert(from_directory(mini), force=True)
    assert outcome.exit_code == ExitCode.NOT_AS_ASKED
    assert outcome.code == "not-as-released"
    assert outcome.headline.endswith(
        f"{COMM}, {SERVER_ARGS} differ from the release (RECORD); "
        f"sm120patch did not write them. Restore with `{PIP}0.5.11`"
    )  # the files, and a command that copies whole
    assert (outcome.notes, outcome.written) == ([], [])
    assert [(f.rel, f.pristine) for f in outcome.files] == [(COMM, False), (FUSION, True), (SERVER_ARGS, False)]
    assert outcome.state == no_state(mini)
    assert tree_hashes(mini.parent) == before
    assert {rel: (mini / rel).read_bytes() for rel in edited} == edited


# -- a saved state of this release ------------------------------------------------------------


def test_revert_restores_every_patched_file_byte_for_byte_and_removes_the_state(mini: Path) -> None:
    patched = applied(mini)
    outcome = revert(from_directory(mini))
    assert outcome.exit_code == ExitCode.OK
    assert_restored(outcome, 3)
    assert (outcome.notes, outcome.written) == ([], TARGETS)
    assert outcome.changes == [(rel, patched[rel], ORIGINAL[rel]) for rel in TARGETS]
    assert contents(mini) == ORIGINAL
    assert outcome.files == [FileStatus(rel, sha256(ORIGINAL[rel]), sha256(ORIGINAL[rel]), None) for rel in TARGETS]
    assert outcome.state == no_state(mini)
    assert not (mini / ".sm120patch").exists()  # nothing of sm120patch is left in the tree


def test_a_lock_file_made_while_the_state_is_removed_stays_and_the_revert_is_done(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An apply that waited on the lock makes a new lock file once revert removed the one it
    held: the state folder is then not empty and stays, holding that file only; the revert
    is still done, and the waiting apply goes on in that folder."""
    from sm120patch.patcher.transaction import state_dir as state_module

    applied(mini)
    root = mini / ".sm120patch"
    removed = state_module.unlink

    def an_apply_waiting_on_the_lock(path: Path) -> None:
        """Removes ``path``; once it is the lock file, an apply waiting on it makes a new one."""
        removed(path)
        if path == root / "lock":
            path.write_bytes(b"")

    monkeypatch.setattr(state_module, "unlink", an_apply_waiting_on_the_lock)
    outcome = revert(from_directory(mini))
    assert_restored(outcome, 3)
    assert outcome.notes == []
    assert contents(mini) == ORIGINAL
    assert [p.name for p in root.iterdir()] == ["lock"]
    monkeypatch.undo()
    assert apply_all(mini).exit_code == ExitCode.OK


def test_a_file_changed_since_apply_is_refused_by_default_naming_every_changed_file(mini: Path) -> None:
    patched = applied(mini)
    edited = {rel: edit(mini, rel, "# tuned by hand\n") for rel in (COMM, SERVER_ARGS)}
    state_before = state_files(mini)
    outcome = revert(from_directory(mini))  # no --force: the default refuses
    assert outcome.exit_code == ExitCode.NOT_AS_ASKED
    assert outcome.code == "changed-since-apply"
    assert f": {COMM}, {SERVER_ARGS}. Nothing was written. --force restores" in outcome.headline
    assert (outcome.notes, outcome.written, outcome.changes) == ([], [], [])
    recorded = [(f.rel, f.recorded) for f in outcome.files]
    assert recorded == [(COMM, None), (FUSION, Recorded.PATCHED), (SERVER_ARGS, None)]
    assert outcome.state == saved_state(mini)
    assert contents(mini) == {**patched, **edited}
    assert state_files(mini) == state_before


def test_force_keeps_the_changed_file_aside_names_where_and_restores_every_original(mini: Path) -> None:
    applied(mini)
    edited = edit(mini, COMM, "# tuned by hand\n")
    outcome = revert(from_directory(mini), force=True)
    kept = mini / ".sm120patch" / "stale-overwritten" / COMM
    assert outcome.exit_code == ExitCode.OK
    assert_restored(outcome, 3)
    assert outcome.notes == [
        f"kept the changed {COMM} as {kept}",
        f"kept {mini / '.sm120patch'}: it holds stale-overwritten; nothing else of sm120patch is left",
    ]
    assert outcome.written == TARGETS
    assert contents(mini) == ORIGINAL
    assert outcome.state == no_state(mini)
    assert {k: v for k, v in state_files(mini).items() if k != ".gitignore"} == {f"stale-overwritten/{COMM}": edited}


def test_a_second_forced_revert_keeps_its_copy_beside_the_first_never_over_it(mini: Path) -> None:
    applied(mini)
    first = edit(mini, COMM, "# first hand edit\n")
    assert revert(from_directory(mini), force=True).exit_code == ExitCode.OK
    applied(mini)
    second = edit(mini, COMM, "# second hand edit\n")
    third = edit(mini, SERVER_ARGS, "# and another\n")
    outcome = revert(from_directory(mini), force=True)
    root = mini / ".sm120patch"
    assert outcome.exit_code == ExitCode.OK
    assert outcome.notes == [
        f"kept the changed {COMM} as {root / 'stale-overwritten-2' / COMM}",
        f"kept the changed {SERVER_ARGS} as {root / 'stale-overwritten-2' / SERVER_ARGS}",
        f"kept {root}: it holds stale-overwritten, stale-overwritten-2; nothing else of sm120patch is left",
    ]
    assert {k: v for k, v in state_files(mini).items() if k != ".gitignore"} == {
        f"stale-overwritten/{COMM}": first,
        f"stale-overwritten-2/{COMM}": second,
        f"stale-overwritten-2/{SERVER_ARGS}": third,
    }
    assert contents(mini) == ORIGINAL


def test_a_changed_file_that_cannot_be_kept_aside_stops_the_revert_before_any_file(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    patched = applied(mini)
    edited = edit(mini, COMM, "# tuned by hand\n")

    def full_disk(step: str) -> None:
        """Stands in for a full disk: the first write of the revert (the kept copy) fails."""
        if step == "write":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fsutil, "STEP_HOOK", full_disk)
    with pytest.raises(EnvironmentProblem) as raised:
        revert(from_directory(mini), force=True)
    assert str(raised.value) == f"cannot keep the changed {COMM} aside (No space left on device); nothing was written"
    assert raised.value.code == "not-writable"
    assert contents(mini) == {**patched, COMM: edited}
    assert (mini / ".sm120patch" / "manifest.json").is_file()


def test_files_deleted_since_apply_are_refused_with_or_without_force_naming_each_and_nothing_is_written(
    mini: Path,
) -> None:
    """--force cannot help here, so the refusal without it does not offer --force."""
    patched = applied(mini)
    for rel in (COMM, SERVER_ARGS):
        (mini / rel).unlink()
    state_before = state_files(mini)
    for force, dry_run in ((True, False), (True, True), (False, False)):
        with pytest.raises(NotAsAsked) as raised:
            revert(from_directory(mini), force=force, dry_run=dry_run)
        assert str(raised.value) == (
            f"cannot restore {COMM}, {SERVER_ARGS}: deleted since apply, and revert only replaces files in place; "
            f"nothing was written. Get the originals back with `{PIP}0.5.11`"
        )
        assert raised.value.code == "changed-since-apply"
    assert not (mini / COMM).exists() and not (mini / SERVER_ARGS).exists()
    assert (mini / FUSION).read_bytes() == patched[FUSION]
    assert state_files(mini) == state_before


@pytest.mark.parametrize("damage", ["missing", "damaged"])
def test_a_missing_or_damaged_backup_names_it_and_the_pip_command_and_nothing_is_written(
    mini: Path, damage: str
) -> None:
    patched = applied(mini)
    backup = mini / ".sm120patch" / "backups" / SERVER_ARGS
    if damage == "missing":
        backup.unlink()
    else:
        backup.write_bytes(backup.read_bytes() + b"#")
    with pytest.raises(EnvironmentProblem) as raised:
        revert(from_directory(mini))
    assert str(raised.value) == (
        f"backup {backup} is missing or damaged; nothing was written. Restore the originals with `{PIP}0.5.11`"
    )
    assert raised.value.code == "state-damaged"
    assert contents(mini) == patched


def test_dry_run_says_how_many_files_it_would_restore_and_writes_nothing(mini: Path) -> None:
    patched = applied(mini)
    edited = edit(mini, COMM, "# tuned by hand\n")
    before = tree_hashes(mini.parent)
    outcome = revert(from_directory(mini), force=True, dry_run=True)
    assert outcome.exit_code == ExitCode.OK
    assert (outcome.code, outcome.headline.startswith("dry run: would restore 3 files;")) == (None, True)
    assert (outcome.notes, outcome.written) == ([], [])  # the changed file is not kept aside either
    assert outcome.changes == [(COMM, edited, ORIGINAL[COMM])] + [
        (rel, patched[rel], ORIGINAL[rel]) for rel in (FUSION, SERVER_ARGS)
    ]
    assert outcome.state == saved_state(mini)
    assert {k: v for k, v in tree_hashes(mini.parent).items() if not k.endswith("/lock")} == {
        k: v for k, v in before.items() if not k.endswith("/lock")
    }


def test_a_file_already_back_to_its_original_is_skipped_and_not_counted(mini: Path) -> None:
    patched = applied(mini)
    (mini / COMM).write_bytes(ORIGINAL[COMM])  # the first file in order, so the rest must still be reached
    outcome = revert(from_directory(mini))
    assert outcome.exit_code == ExitCode.OK
    assert_restored(outcome, 2)
    assert (outcome.notes, outcome.written) == ([], [FUSION, SERVER_ARGS])
    assert outcome.changes == [(rel, patched[rel], ORIGINAL[rel]) for rel in (FUSION, SERVER_ARGS)]
    assert contents(mini) == ORIGINAL


def test_a_journal_left_by_an_interrupted_apply_is_finished_first_and_its_note_comes_first(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replaced: list[str] = []

    def kill_at_second_replace(step: str) -> None:
        """Stands in for SIGKILL as apply replaces its second file."""
        replaced.extend([step] if step == "replace" else [])
        if replaced.count("replace") == 2:
            raise Killed

    monkeypatch.setattr(fsutil, "STEP_HOOK", kill_at_second_replace)
    with pytest.raises(Killed):
        apply_all(mini)
    monkeypatch.setattr(fsutil, "STEP_HOOK", None)
    journal = json.loads((mini / ".sm120patch" / "journal.json").read_bytes())
    finished = [e["rel"] for e in journal["entries"][1:]]
    outcome = revert(from_directory(mini))
    assert outcome.exit_code == ExitCode.OK
    assert outcome.notes == [
        f"recovered an interrupted apply (pid {journal['pid']}, started {journal['started']}): "
        f"finished it ({', '.join(finished)})"
    ]
    assert_restored(outcome, 3)
    assert contents(mini) == ORIGINAL
    assert not (mini / ".sm120patch" / "journal.json").exists()


# -- a saved state of another release (sglang upgraded since apply) ---------------------------


@pytest.mark.parametrize("version", ["0.5.11", None])
def test_state_from_an_older_release_over_pristine_files_is_set_aside_whole(mini: Path, version: str | None) -> None:
    applied(mini)
    manifest_path = mini / ".sm120patch" / "manifest.json"
    if version is None:  # a state written for an sglang without a version (a checkout)
        manifest_path.write_text(json.dumps({**json.loads(manifest_path.read_text()), "sglang_version": None}))
    old_state = state_files(mini)
    upgrade(mini, "0.5.12")
    outcome = revert(from_directory(mini), force=True)
    root = mini / ".sm120patch"
    [kept] = [d for d in root.iterdir() if d.is_dir()]
    assert kept.name.startswith(f"stale-{version or 'unknown'}-")
    assert outcome.exit_code == ExitCode.OK
    assert (outcome.code, outcome.written) == (None, [])
    assert outcome.headline.startswith(
        f"nothing of sglang 0.5.12 to revert: the saved state is from sglang {version or '(unknown version)'}, "
    )
    assert outcome.notes == [
        f"the state of sglang {version or '(unknown version)'} is kept in {kept}",
        f"kept {root}: it holds {kept.name}; nothing else of sm120patch is left",
    ]
    assert outcome.written == []
    assert outcome.state == saved_state(mini, version, stale=True)
    assert contents(mini) == ORIGINAL
    assert state_files(mini) == {
        ".gitignore": old_state[".gitignore"],
        **{f"{kept.name}/{name}": data for name, data in old_state.items() if name != ".gitignore"},
    }


def test_state_naming_a_file_the_new_release_no_longer_has_is_set_aside(mini: Path) -> None:
    """pip removed what the old RECORD listed; the new release has no such file (0.5.15 ->
    0.5.23 moved the fusion gate): that is no reason to call its files not pristine."""
    applied(mini)
    site = mini.parent
    for dist in site.glob("sglang-*.dist-info"):
        shutil.rmtree(dist)
    (mini / FUSION).unlink()
    write_mini_sglang(site, version="0.5.12", files={rel: text for rel, text in FILES.items() if rel != FUSION})
    outcome = revert(from_directory(mini))
    assert outcome.exit_code == ExitCode.OK, outcome.headline
    assert outcome.headline.startswith("nothing of sglang 0.5.12 to revert: the saved state is from sglang 0.5.11")
    assert outcome.written == []
    [kept] = (mini / ".sm120patch").glob("stale-0.5.11-*")
    assert (kept / "manifest.json").is_file() and (kept / "backups" / FUSION).is_file()


def test_dry_run_leaves_the_state_of_an_older_release_in_place(mini: Path) -> None:
    applied(mini)
    old_state = state_files(mini)
    upgrade(mini, "0.5.12")
    outcome = revert(from_directory(mini), dry_run=True)
    assert outcome.exit_code == ExitCode.OK
    assert (outcome.code, outcome.notes, outcome.written) == (None, [], [])
    assert outcome.headline.startswith("nothing of sglang 0.5.12 to revert: the saved state is from sglang 0.5.11")
    assert state_files(mini) == old_state


def test_state_from_an_older_release_over_changed_files_is_refused_naming_both_releases(mini: Path) -> None:
    applied(mini)
    old_state = state_files(mini)
    upgrade(mini, "0.5.12")
    edited = edit(mini, SERVER_ARGS, "# edited after the upgrade\n")
    outcome = revert(from_directory(mini), force=True)
    assert outcome.exit_code == ExitCode.NOT_AS_ASKED
    assert outcome.code == "not-as-released"
    assert outcome.headline.endswith(f"its {SERVER_ARGS} differ from its RECORD; restore them with `{PIP}0.5.12`")
    assert (outcome.notes, outcome.written) == ([], [])
    assert outcome.state == saved_state(mini, stale=True)
    assert contents(mini) == {**ORIGINAL, SERVER_ARGS: edited}
    assert state_files(mini) == old_state


def test_state_from_an_older_release_over_two_changed_files_names_both(mini: Path) -> None:
    applied(mini)
    upgrade(mini, "0.5.12")
    edit(mini, COMM, "# edited\n")
    edit(mini, SERVER_ARGS, "# edited\n")
    outcome = revert(from_directory(mini))
    assert outcome.exit_code == ExitCode.NOT_AS_ASKED
    assert f"and its {COMM}, {SERVER_ARGS} differ from its RECORD;" in outcome.headline


def without_rows(package: Path, rels: list[str]) -> None:
    """The installed RECORD without the rows of ``rels`` (a RECORD cut short by hand)."""
    [record] = package.parent.glob("sglang-*.dist-info/RECORD")
    rows = [row for row in record.read_text().splitlines() if not any(row.startswith(f"sglang/{r},") for r in rels)]
    record.write_text("\n".join(rows) + "\n")


def test_files_the_new_record_does_not_list_are_named_as_unknown(mini: Path) -> None:
    applied(mini)
    upgrade(mini, "0.5.12")
    without_rows(mini, [COMM, SERVER_ARGS])
    outcome = revert(from_directory(mini))
    assert outcome.exit_code == ExitCode.OK, outcome.headline
    assert outcome.notes[0] == (
        f"cannot tell whether {COMM}, {SERVER_ARGS} are as released (not in sglang 0.5.12's RECORD)"
    )
    assert outcome.notes[1].startswith("the state of sglang 0.5.11 is kept in ")
    assert (outcome.code, outcome.written) == (None, [])
    assert outcome.headline.endswith("and no sm120patch patch is in the files it names")


def test_without_a_usable_record_the_unknown_files_say_why(mini: Path) -> None:
    applied(mini)
    upgrade(mini, "0.5.12")
    [record] = mini.parent.glob("sglang-*.dist-info/RECORD")
    record.write_text("other/file.py,,\n")
    outcome = revert(from_directory(mini), dry_run=True)
    assert outcome.exit_code == ExitCode.OK, outcome.headline
    assert outcome.notes == [
        f"cannot tell whether {', '.join(TARGETS)} are as released "
        f"({record} lists no file of {mini}: the pristine check is off)"
    ]


def test_a_state_of_another_release_that_cannot_be_removed_says_where(mini: Path, monkeypatch) -> None:
    from sm120patch.patcher.transaction.state_dir import StateDir

    applied(mini)
    upgrade(mini, "0.5.12")
    root = mini / ".sm120patch"

    def refused(self: StateDir) -> list[str]:
        """Stands in for a state folder the user may not delete (EACCES)."""
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(root / "lock"))

    monkeypatch.setattr(StateDir, "remove", refused)
    with pytest.raises(EnvironmentProblem) as raised:
        revert(from_directory(mini))
    assert str(raised.value) == (
        f"{root / 'lock'} could not be removed (Permission denied) once the revert was done "
        "(nothing of sglang 0.5.12 to revert: the saved state is from sglang 0.5.11, and no file it names "
        f"differs from 0.5.12's RECORD); remove {root} by hand"
    )
    assert raised.value.code == "not-writable"


# -- a saved state whose version moved, and states kept aside --------------------------------


def without_install_metadata(package: Path) -> None:
    """The miniature release as an unpacked checkout: no dist-info, so no version, no RECORD."""
    for dist in package.parent.glob("sglang-*.dist-info"):
        shutil.rmtree(dist)


@pytest.mark.offline
def test_a_state_saved_before_the_version_appeared_is_restored_byte_for_byte(mini: Path) -> None:
    """apply on a checkout of no known version, then the version appears (``pip install -e``
    writes ``_version.py``): the files still hold what apply wrote, so the state is this
    tree's and revert restores it, as it would without the version change."""
    without_install_metadata(mini)
    assert from_directory(mini).version is None
    applied(mini)
    (mini / "_version.py").write_text("__version__ = version = '0.5.11'\n")
    tree = from_directory(mini)
    assert tree.version == "0.5.11"
    outcome = revert(tree)
    assert_restored(outcome, 3)
    assert outcome.notes == []
    assert contents(mini) == ORIGINAL
    assert not (mini / ".sm120patch").exists()


@pytest.mark.offline
def test_a_kept_aside_state_whose_files_are_in_place_is_restored_and_named(mini: Path) -> None:
    """A state set aside (by an earlier sm120patch that took a version change for an upgrade)
    while the files it wrote stayed in place: revert restores from it and says from where."""
    from sm120patch.patcher.transaction.state_dir import StateDir

    without_install_metadata(mini)
    applied(mini)
    aside = StateDir(mini).set_aside("unknown")
    for force in (False, True):  # --force reads the same files the same way
        outcome = revert(from_directory(mini), force=force, dry_run=True)
        assert (outcome.exit_code, outcome.code, outcome.written) == (ExitCode.OK, None, [])
        assert f"would restore 3 files from the state kept aside in {aside};" in outcome.headline
    outcome = revert(from_directory(mini), force=True)
    assert outcome.exit_code == ExitCode.OK
    assert_restored(outcome, 3, aside=aside)
    assert contents(mini) == ORIGINAL
    assert not (mini / ".sm120patch").exists()
    # Nothing left to restore: the files are the originals again, and said so only as far as known.
    again = revert(from_directory(mini), force=True)
    assert again.exit_code == ExitCode.OK
    assert (again.code, again.written) == (None, [])
    assert again.headline.endswith("cannot be told (no install metadata (not installed from a wheel))")  # and why


@pytest.mark.offline
def test_a_version_that_appeared_beside_a_hand_edited_file_is_refused_then_forced_like_its_own_state(
    mini: Path,
) -> None:
    """Two of three files hold what apply wrote, one was edited by hand, and the version
    appeared since: the state is still this tree's.  revert refuses as for any changed file,
    with nothing moved; --force keeps the edited file aside and restores all three."""
    without_install_metadata(mini)
    applied(mini)
    edited = edit(mini, COMM, "# hand edit\n")
    (mini / "_version.py").write_text("__version__ = version = '0.5.11'\n")
    before = contents(mini), state_files(mini)
    for dry_run in (True, False):
        outcome = revert(from_directory(mini), dry_run=dry_run)
        assert (outcome.exit_code, outcome.code) == (ExitCode.NOT_AS_ASKED, "changed-since-apply")
        assert f"(hash differs from the patched one): {COMM}. Nothing was written." in outcome.headline
        assert outcome.notes == []
        assert (contents(mini), state_files(mini)) == before  # the state is where it was: nothing moved
    dry = revert(from_directory(mini), force=True, dry_run=True)
    assert (dry.code, dry.written, dry.headline.startswith("dry run: would restore 3 files")) == (None, [], True)
    outcome = revert(from_directory(mini), force=True)
    assert_restored(outcome, 3)
    [overwritten] = (mini / ".sm120patch").glob("stale-overwritten*")
    assert outcome.notes[0] == f"kept the changed {COMM} as {overwritten / COMM}"
    assert (overwritten / COMM).read_bytes() == edited
    assert contents(mini) == ORIGINAL
    assert [p.name for p in (mini / ".sm120patch").iterdir() if p.name != ".gitignore"] == [overwritten.name]


@pytest.mark.offline
def test_a_kept_aside_state_with_a_file_changed_since_is_refused_then_forced_naming_where_it_is_kept(
    mini: Path,
) -> None:
    """A state set aside while two of its files still hold what apply wrote and one was edited
    since: refused as for the saved state, naming the folder, nothing moved; --force restores
    from it, keeping the edited file aside, and drops it."""
    from sm120patch.patcher.transaction.state_dir import StateDir

    without_install_metadata(mini)
    applied(mini)
    aside = StateDir(mini).set_aside("unknown")
    edited = edit(mini, COMM, "# edited by hand\n")
    before = contents(mini), state_files(mini)
    outcome = revert(from_directory(mini))
    assert (outcome.exit_code, outcome.code) == (ExitCode.NOT_AS_ASKED, "changed-since-apply")
    assert f"(the state kept aside in {aside}): changed since apply (hash differs from the " in outcome.headline
    assert (contents(mini), state_files(mini)) == before
    outcome = revert(from_directory(mini), force=True)
    assert_restored(outcome, 3, aside=aside)
    [overwritten] = (mini / ".sm120patch").glob("stale-overwritten*")
    assert (overwritten / COMM).read_bytes() == edited
    assert contents(mini) == ORIGINAL
    assert not aside.exists()


@pytest.mark.offline
def test_a_kept_aside_state_none_of_whose_files_holds_its_writing_is_named_not_restored(mini: Path) -> None:
    """Every patched file edited since: no file says the kept state is this tree's, so nothing
    is restored from it, and the refusal says where its backups are rather than that none is
    left."""
    from sm120patch.patcher.transaction.state_dir import StateDir

    without_install_metadata(mini)
    applied(mini)
    aside = StateDir(mini).set_aside("unknown")
    for rel in TARGETS:
        edit(mini, rel, "# edited by hand\n")
    before = contents(mini), state_files(mini)
    outcome = revert(from_directory(mini), force=True)
    assert outcome.exit_code == ExitCode.NOT_AS_ASKED
    assert outcome.code == "no-backup"
    assert f"{', '.join(TARGETS)} hold sm120patch's patches and their backups in {aside} are not restored" in (
        outcome.headline
    )
    assert outcome.headline.endswith(
        f"{', '.join(TARGETS)} extracted again from the sglang source archive it came from into {mini}"
    )
    assert (contents(mini), state_files(mini)) == before


@pytest.mark.offline
def test_a_saved_state_of_another_version_over_edited_patched_files_is_refused_and_left_in_place(
    mini: Path,
) -> None:
    """The version appeared and every patched file was edited since: revert cannot take the
    state for this tree's, says where its backups are, and moves nothing (a run that says no
    file was changed changes no state either)."""
    without_install_metadata(mini)
    applied(mini)
    for rel in TARGETS:
        edit(mini, rel, "# edited by hand\n")
    (mini / "_version.py").write_text("__version__ = version = '0.5.11'\n")
    before = contents(mini), state_files(mini)
    for dry_run in (True, False):
        outcome = revert(from_directory(mini), force=True, dry_run=dry_run)
        assert outcome.exit_code == ExitCode.NOT_AS_ASKED
        assert outcome.code == "no-backup"
        assert outcome.headline.startswith("the saved state is from sglang (unknown version), not 0.5.11, but ")
        assert f"their backups in {mini / '.sm120patch'} are not restored from" in outcome.headline
        assert outcome.headline.endswith(f"extracted again from sglang 0.5.11's source archive into {mini}")
        assert (contents(mini), state_files(mini)) == before


@pytest.mark.offline
def test_only_a_kept_aside_state_in_place_is_restored_the_others_stay_kept(mini: Path) -> None:
    """Two states kept aside, the newer one of files no longer there (its after-hashes match
    nothing): the one whose written files are in place is restored, the other stays kept."""
    from sm120patch.patcher.transaction.state_dir import StateDir

    without_install_metadata(mini)
    applied(mini)
    in_place = StateDir(mini).set_aside("unknown")
    other = in_place.parent / "stale-0.5.10-20260101T000000"
    shutil.copytree(in_place, other)
    manifest = json.loads((other / "manifest.json").read_text())
    for record in manifest["files"].values():
        record["sha256_after"] = "0" * 64
    (other / "manifest.json").write_text(json.dumps(manifest))
    outcome = revert(from_directory(mini))
    assert_restored(outcome, 3, aside=in_place)
    assert contents(mini) == ORIGINAL
    assert other.is_dir() and not in_place.exists()
    assert outcome.notes == [f"kept {mini / '.sm120patch'}: it holds {other.name}; nothing else of sm120patch is left"]


def relabel(manifest_path: Path, version: str, foreign: str | None = None) -> None:
    """The manifest at ``manifest_path`` as if written for sglang ``version``; ``foreign``: that
    file's backup stands for another release's original (other bytes, hash to match)."""
    manifest = json.loads(manifest_path.read_text())
    manifest["sglang_version"] = version
    if foreign is not None:
        record = manifest["files"][foreign]
        backup = manifest_path.parent / record["backup"]
        backup.write_bytes(backup.read_bytes() + b"# as 0.5.10 had it\n")
        record["sha256_before"] = sha256(backup.read_bytes())
    manifest_path.write_text(json.dumps(manifest))


def test_a_kept_aside_state_of_another_release_whose_backups_record_disowns_is_refused_naming_it(
    mini: Path,
) -> None:
    """A state kept aside under 0.5.10 whose files are in place on a 0.5.11 wheel: a backup
    that is not the file RECORD lists is another release's original, so nothing is restored."""
    from sm120patch.patcher.transaction.state_dir import StateDir

    applied(mini)
    aside = StateDir(mini).set_aside("0.5.10")
    relabel(aside / "manifest.json", "0.5.10", foreign=COMM)
    before = contents(mini), state_files(mini)
    for force in (False, True):
        outcome = revert(from_directory(mini), force=force)
        assert (outcome.exit_code, outcome.code) == (ExitCode.NOT_AS_ASKED, "foreign-state")
        assert f"in {aside}: it is the state of sglang 0.5.10, and its backups of {COMM} are not" in outcome.headline
        assert outcome.headline.endswith(f"restore them with `{PIP}0.5.11`")
        assert (contents(mini), state_files(mini)) == before


def test_a_kept_aside_state_of_another_release_whose_backups_record_lists_is_restored(mini: Path) -> None:
    from sm120patch.patcher.transaction.state_dir import StateDir

    applied(mini)
    aside = StateDir(mini).set_aside("0.5.10")
    relabel(aside / "manifest.json", "0.5.10")
    outcome = revert(from_directory(mini))
    assert_restored(outcome, 3, aside=aside)
    assert f"from the state of sglang 0.5.10 kept aside in {aside};" in outcome.headline
    assert contents(mini) == ORIGINAL


@pytest.mark.offline
def test_without_record_a_kept_aside_state_of_another_known_release_is_refused(mini: Path) -> None:
    """No RECORD to check the backups against: a kept state is taken only where it knew no
    version or the tree's own."""
    from sm120patch.patcher.transaction.state_dir import StateDir

    without_install_metadata(mini)
    applied(mini)
    aside = StateDir(mini).set_aside("0.5.10")
    relabel(aside / "manifest.json", "0.5.10")
    (mini / "_version.py").write_text("__version__ = version = '0.5.11'\n")
    before = contents(mini), state_files(mini)
    outcome = revert(from_directory(mini), force=True)
    assert (outcome.exit_code, outcome.code) == (ExitCode.NOT_AS_ASKED, "foreign-state")
    assert "not 0.5.11, and there is no RECORD to check its backups against" in outcome.headline
    assert outcome.headline.endswith(f"extracted again from sglang 0.5.11's source archive into {mini}")
    assert (contents(mini), state_files(mini)) == before
    relabel(aside / "manifest.json", "0.5.11")
    assert revert(from_directory(mini)).exit_code == ExitCode.OK
    assert contents(mini) == ORIGINAL


def test_a_saved_state_of_another_release_in_place_is_restored_only_if_record_lists_its_backups(mini: Path) -> None:
    """The saved state in place, its version another, its files holding what apply wrote: its
    own by hashes only where RECORD says its backups are this release's files."""
    applied(mini)
    manifest_path = mini / ".sm120patch" / "manifest.json"
    relabel(manifest_path, "0.5.10", foreign=COMM)
    before = contents(mini), state_files(mini)
    outcome = revert(from_directory(mini), force=True)
    assert outcome.exit_code == ExitCode.NOT_AS_ASKED
    assert outcome.headline.startswith("the saved state is from sglang 0.5.10 but 0.5.11 is installed, and its ")
    assert outcome.state == saved_state(mini, "0.5.10", stale=True)
    assert (contents(mini), state_files(mini)) == before
    relabel(manifest_path, "0.5.10")
    manifest = json.loads(manifest_path.read_text())
    manifest["files"][COMM]["sha256_before"] = sha256(ORIGINAL[COMM])
    manifest_path.write_text(json.dumps(manifest))
    (mini / ".sm120patch" / manifest["files"][COMM]["backup"]).write_bytes(ORIGINAL[COMM])
    outcome = revert(from_directory(mini))
    assert_restored(outcome, 3)
    assert contents(mini) == ORIGINAL


@pytest.mark.offline
def test_an_interrupted_restore_from_a_kept_aside_state_is_finished_and_drops_that_state(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed as it replaces its second file, a restore from ``stale-*/`` leaves a journal that
    names that folder: the next revert finishes the files and removes the folder, as the
    restore would have, and nothing of sm120patch is left."""
    from sm120patch.patcher.transaction.state_dir import StateDir

    without_install_metadata(mini)
    applied(mini)
    aside = StateDir(mini).set_aside("unknown")
    replaced: list[str] = []

    def kill_at_second_replace(step: str) -> None:
        replaced.extend([step] if step == "replace" else [])
        if replaced.count("replace") == 2:
            raise Killed

    monkeypatch.setattr(fsutil, "STEP_HOOK", kill_at_second_replace)
    with pytest.raises(Killed):
        revert(from_directory(mini))
    monkeypatch.setattr(fsutil, "STEP_HOOK", None)
    assert aside.is_dir() and contents(mini) != ORIGINAL
    outcome = revert(from_directory(mini))
    assert outcome.exit_code == ExitCode.OK
    assert outcome.notes[0].startswith("recovered an interrupted revert (pid ")
    assert outcome.notes[1] == f"the state kept aside in {aside} is restored; removed it"
    assert contents(mini) == ORIGINAL
    assert not (mini / ".sm120patch").exists()


@pytest.mark.offline
def test_a_kept_aside_state_not_named_by_the_interrupted_restore_stays(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the folder the journal restored from is dropped: another kept state stays."""
    from sm120patch.patcher.transaction.state_dir import StateDir

    without_install_metadata(mini)
    applied(mini)
    aside = StateDir(mini).set_aside("unknown")
    other = aside.parent / "stale-0.5.10-20260101T000000"
    shutil.copytree(aside, other)
    os.utime(other / "manifest.json", (0, 0))  # the older of the two: not the one restored from

    def kill_once_replaced(step: str) -> None:
        """Stands in for SIGKILL once every file is replaced, before the state is cleared."""
        if step == "finalize":
            raise Killed

    monkeypatch.setattr(fsutil, "STEP_HOOK", kill_once_replaced)
    with pytest.raises(Killed):
        revert(from_directory(mini))
    monkeypatch.setattr(fsutil, "STEP_HOOK", None)
    outcome = revert(from_directory(mini))
    assert outcome.notes[1:] == [
        f"the state kept aside in {aside} is restored; removed it",
        f"kept {mini / '.sm120patch'}: it holds {other.name}; nothing else of sm120patch is left",
    ]
    assert other.is_dir() and not aside.exists()


# -- a checkout, whose state may have been set aside by an earlier sm120patch ----------------


def checkout(tmp_path: Path) -> Path:
    """The miniature release as a git checkout's ``python/sglang``: no install metadata (so no
    RECORD), version 0.5.11 from the ``_version.py`` setuptools-scm writes."""
    package = write_mini_sglang(tmp_path / "repo" / "python")
    without_install_metadata(package)
    (package / "_version.py").write_text("__version__ = version = '0.5.11'\n")
    (tmp_path / "repo" / ".git").mkdir()
    return package


def test_a_missing_backup_in_a_checkout_names_the_git_command_for_every_file_the_state_holds(tmp_path: Path) -> None:
    """Not pip (it would install a release elsewhere): git puts the checkout's own files back,
    all that apply changed, in one command."""
    package = checkout(tmp_path)
    patched = applied(package)
    (package / ".sm120patch" / "backups" / SERVER_ARGS).unlink()
    with pytest.raises(EnvironmentProblem) as raised:
        revert(from_directory(package))
    assert str(raised.value).endswith(
        f"nothing was written. Restore the originals with `git -C {package} checkout -- {' '.join(TARGETS)}`"
    )
    assert contents(package) == patched


@pytest.mark.parametrize("git", [True, False], ids=["git-checkout", "source-tree"])
def test_files_deleted_since_apply_in_a_checkout_or_a_source_tree_are_named_with_what_puts_them_back(
    tmp_path: Path, git: bool
) -> None:
    """pip would install a release elsewhere: a checkout gets git's command for the deleted
    files, a tree extracted from a source archive that archive, each naming those files."""
    package = checkout(tmp_path)
    if not git:
        (tmp_path / "repo" / ".git").rmdir()
    patched = applied(package)
    for rel in (COMM, SERVER_ARGS):
        (package / rel).unlink()
    state_before = state_files(package)
    with pytest.raises(NotAsAsked) as raised:
        revert(from_directory(package), force=True)
    back = (
        f"`git -C {package} checkout -- {COMM} {SERVER_ARGS}`"
        if git
        else f"{COMM}, {SERVER_ARGS} extracted again from sglang 0.5.11's source archive into {package}"
    )
    assert str(raised.value) == (
        f"cannot restore {COMM}, {SERVER_ARGS}: deleted since apply, and revert only replaces files in place; "
        f"nothing was written. Get the originals back with {back}"
    )
    assert (package / FUSION).read_bytes() == patched[FUSION]
    assert state_files(package) == state_before


def another_release_in_place(package: Path, aside: Path, version: str | None) -> None:
    """A saved state of sglang ``version`` in place beside ``aside``: the kept state's files,
    labelled ``version``, none of them holding what that apply wrote (they hold this one's)."""
    root = package / ".sm120patch"
    shutil.copytree(aside / "backups", root / "backups")
    manifest = json.loads((aside / "manifest.json").read_text())
    manifest["sglang_version"] = version
    for record in manifest["files"].values():
        record["sha256_after"] = "0" * 64
    (root / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("version", ["0.5.10", None], ids=["versioned", "no-version"])
def test_a_kept_state_in_place_is_restored_past_the_saved_state_of_another_release_which_is_set_aside(
    tmp_path: Path, version: str | None
) -> None:
    """The files hold what the kept state's apply wrote, and the saved state is another
    release's: revert restores from the kept one, setting the other aside on the way (named,
    and what is left of sm120patch); a dry run moves nothing."""
    from sm120patch.patcher.transaction.state_dir import StateDir

    package = checkout(tmp_path)
    applied(package)
    aside = StateDir(package).set_aside("0.5.11")
    another_release_in_place(package, aside, version)
    root = package / ".sm120patch"
    unknown = (
        f"cannot tell whether {', '.join(TARGETS)} are as released (no install metadata (not installed from a wheel))"
    )
    before = contents(package), state_files(package)
    dry = revert(from_directory(package), dry_run=True)
    assert (dry.exit_code, dry.code, dry.written) == (ExitCode.OK, None, [])
    assert f"would restore 3 files from the state kept aside in {aside};" in dry.headline
    assert dry.notes == [unknown]
    assert (contents(package), state_files(package)) == before
    outcome = revert(from_directory(package))
    assert_restored(outcome, 3, aside=aside)
    [moved] = (d for d in root.iterdir() if d.is_dir())
    assert moved.name.startswith(f"stale-{version or 'unknown'}-")
    assert outcome.notes == [
        unknown,
        f"the state of sglang {version or '(unknown version)'} is kept in {moved}",
        f"kept {root}: it holds {moved.name}; nothing else of sm120patch is left",
    ]
    assert json.loads((moved / "manifest.json").read_text())["sglang_version"] == version
    assert contents(package) == ORIGINAL and not aside.exists()


def test_past_another_releases_state_a_kept_state_with_an_edited_file_needs_force(tmp_path: Path) -> None:
    """As for the saved state: refused naming the kept state (the report shows that state),
    nothing moved; --force keeps the edited file aside and restores from the kept state."""
    from sm120patch.patcher.transaction.state_dir import StateDir

    package = checkout(tmp_path)
    applied(package)
    aside = StateDir(package).set_aside("0.5.11")
    another_release_in_place(package, aside, "0.5.10")
    edited = edit(package, COMM, "# hand edit\n")
    before = contents(package), state_files(package)
    outcome = revert(from_directory(package))
    assert (outcome.exit_code, outcome.code) == (ExitCode.NOT_AS_ASKED, "changed-since-apply")
    assert f"refusing to revert (the state kept aside in {aside}): changed since apply" in outcome.headline
    assert outcome.state == saved_state(package)
    assert (contents(package), state_files(package)) == before
    forced = revert(from_directory(package), force=True)
    assert_restored(forced, 3, aside=aside)
    [overwritten] = (package / ".sm120patch").glob("stale-overwritten*")
    assert (overwritten / COMM).read_bytes() == edited
    assert contents(package) == ORIGINAL


def test_patched_files_no_kept_state_backed_up_have_no_backup_left_and_git_puts_them_back(tmp_path: Path) -> None:
    """The kept state holds a backup of another file only (one back to its original): the two
    files still patched have no backup anywhere, and in a git checkout git restores them."""
    from sm120patch.patcher.transaction.state_dir import StateDir

    package = checkout(tmp_path)
    applied(package)
    aside = StateDir(package).set_aside("0.5.11")
    manifest = json.loads((aside / "manifest.json").read_text())
    manifest["files"] = {FUSION: manifest["files"][FUSION]}
    (aside / "manifest.json").write_text(json.dumps(manifest))
    (package / FUSION).write_bytes(ORIGINAL[FUSION])
    before = contents(package)
    outcome = revert(from_directory(package), force=True)
    assert (outcome.exit_code, outcome.code) == (ExitCode.NOT_AS_ASKED, "no-backup")
    assert f"{COMM}, {SERVER_ARGS} hold sm120patch's patches and no backup of them is left" in outcome.headline
    assert outcome.headline.endswith(f"Restore them with `git -C {package} checkout -- {COMM} {SERVER_ARGS}`")
    assert contents(package) == before


@pytest.mark.parametrize("filename", [True, False], ids=["names-the-file", "names-nothing"])
def test_a_kept_state_restored_from_that_cannot_be_removed_says_the_files_are_back_and_what_to_remove(
    mini: Path, monkeypatch: pytest.MonkeyPatch, filename: bool
) -> None:
    from sm120patch.patcher.transaction.state_dir import StateDir

    applied(mini)
    aside = StateDir(mini).set_aside("0.5.11")
    busy = aside / "backups"

    def refused(directory: Path) -> None:
        """Stands in for a kept folder the user may not delete (EACCES), naming a file or not."""
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), *([str(busy)] if filename else []))

    monkeypatch.setattr("sm120patch.patcher.commands.revert.remove_tree", refused)
    with pytest.raises(EnvironmentProblem) as raised:
        revert(from_directory(mini))
    assert str(raised.value) == (
        f"the files are restored, but {busy if filename else aside} could not be removed (Permission denied); "
        f"remove {aside} by hand"
    )
    assert raised.value.code == "not-writable"
    assert contents(mini) == ORIGINAL
