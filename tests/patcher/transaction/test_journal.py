"""The journal layer (transaction/journal.py) on its own: what a user reads when an apply or
revert cannot write, is stopped part way, or is finished by the next run; the step names the
fault suite hooks; and the files it leaves behind or cleans up (kept-aside backups, the
writability probe, stale temp files, staged copies)."""

from __future__ import annotations

import builtins
import errno
import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sm120patch.errors import EnvironmentProblem, NotAsAsked
from sm120patch.patcher.plan.token_limit import LimitAsk
from sm120patch.patcher.transaction import fsutil, journal
from sm120patch.patcher.transaction import state_dir as state_module
from sm120patch.patcher.transaction.fsutil import TEMP_SUFFIX, sha256
from sm120patch.patcher.transaction.journal import (
    Change,
    Entry,
    Journal,
    Op,
    check_writable,
    commit,
    recover,
    remove_temps,
    stage,
    unchanged,
)
from sm120patch.patcher.transaction.state_dir import FileRecord, Manifest, StateDir

A, B = "srt/layers/communicator.py", "srt/server_args.py"
ORIGINAL = {A: b"communicator = 1\n", B: b"server_args = 1\n"}
PATCHED = {A: b"communicator = 2\n", B: b"server_args = 2\n"}
WRITE = ["write", "fsync", "rename"]  # the steps of one fsutil.atomic_write
ROOT = os.geteuid() == 0  # file modes do not stop root: there, the refusal is injected
DENIED = os.strerror(errno.EACCES)


class Killed(BaseException):
    """Stands in for SIGKILL at a step: nothing after it runs, and no ``except OSError`` sees it."""


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """An installed sglang package dir holding the two target files, as they ship."""
    package = tmp_path / "site" / "sglang"
    for rel, data in ORIGINAL.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_bytes(data)
    return package


def stage_apply(package: Path) -> tuple[StateDir, list[Entry], Manifest]:
    """Stage the apply that turns both targets from ORIGINAL into PATCHED."""
    state = StateDir(package)
    manifest = Manifest("0.5.9", str(package))
    changes = [Change(rel, package / rel, ORIGINAL[rel], PATCHED[rel], ("p",)) for rel in (A, B)]
    return state, stage(state, changes, manifest), manifest


def fail_at(monkeypatch: pytest.MonkeyPatch, name: str, error: BaseException, nth: int = 1) -> None:
    """Raise ``error`` the ``nth`` time the write path reaches step ``name``."""
    seen: list[str] = []

    def hook(step: str) -> None:
        seen.append(step)
        if seen.count(name) == nth and step == name:
            raise error

    monkeypatch.setattr(fsutil, "STEP_HOOK", hook)


def contents(package: Path) -> dict[str, bytes]:
    return {rel: (package / rel).read_bytes() for rel in (A, B)}


def interrupted_apply(package: Path, monkeypatch: pytest.MonkeyPatch, at: str) -> StateDir:
    """An apply killed at the first step ``at`` of its commit: its journal is left behind."""
    state, entries, manifest = stage_apply(package)
    fail_at(monkeypatch, at, Killed())
    with pytest.raises(Killed):
        commit(state, entries, manifest, Op.APPLY)
    monkeypatch.setattr(fsutil, "STEP_HOOK", None)
    assert state.journal_path.is_file()
    return state


# -- commit ----------------------------------------------------------------------------------


def test_commit_passes_the_steps_the_fault_suite_names_in_order(package: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state, entries, manifest = stage_apply(package)
    steps: list[str] = []
    monkeypatch.setattr(fsutil, "STEP_HOOK", steps.append)
    commit(state, entries, manifest, Op.APPLY)
    # journal written; each target replaced; the manifest written once every target is.
    assert steps == ["journal", *WRITE, "replace", *WRITE, "replace", *WRITE, "finalize", *WRITE]
    assert contents(package) == PATCHED
    assert not state.journal_path.exists()
    assert not (state.root / "staged").exists()
    assert state.backup_path(A).read_bytes() == ORIGINAL[A]


def test_a_journal_that_cannot_be_written_stops_the_apply_before_any_file(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, entries, manifest = stage_apply(package)
    fail_at(monkeypatch, "journal", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    with pytest.raises(EnvironmentProblem) as raised:
        commit(state, entries, manifest, Op.APPLY)
    assert str(raised.value) == (
        f"apply stopped before changing any sglang file: cannot write {state.journal_path} (No space left on device)"
    )
    assert raised.value.code == "not-writable"
    assert contents(package) == ORIGINAL


@pytest.mark.parametrize("filename", [None, "/site/sglang/srt/server_args.py"])
def test_an_io_error_while_replacing_names_the_file_and_the_journal_that_finishes_the_job(
    package: Path, monkeypatch: pytest.MonkeyPatch, filename: str | None
) -> None:
    state, entries, manifest = stage_apply(package)
    fail_at(monkeypatch, "replace", OSError(errno.EIO, os.strerror(errno.EIO), filename), nth=2)
    with pytest.raises(EnvironmentProblem) as raised:
        commit(state, entries, manifest, Op.APPLY)
    assert str(raised.value) == (
        f"apply was stopped by an I/O error (Input/output error: {filename or '?'}). Each file is "
        f"either as before or fully changed; {state.journal_path} lets the next `sm120patch apply` "
        "or `revert` finish the job once the problem is fixed"
    )
    assert contents(package) == {A: PATCHED[A], B: ORIGINAL[B]}
    assert state.journal_path.is_file()


def test_a_target_changed_after_it_was_read_is_refused_before_the_journal(package: Path) -> None:
    state, entries, manifest = stage_apply(package)
    (package / B).write_bytes(b"edited meanwhile\n")  # between planning and commit
    with pytest.raises(NotAsAsked) as raised:
        commit(state, entries, manifest, Op.APPLY)
    assert str(raised.value) == f"apply: {B} changed while sm120patch read it; nothing was written. Run it again"
    assert raised.value.code == "changed-while-read"
    assert contents(package) == {A: ORIGINAL[A], B: b"edited meanwhile\n"}
    assert not state.journal_path.exists()


def interrupted_apply_asked(package: Path, monkeypatch: pytest.MonkeyPatch, limit: LimitAsk | None) -> StateDir:
    """An apply killed before its first replace whose manifest records ``limit`` (--fuse-up-to)."""
    state = StateDir(package)
    manifest = Manifest("0.5.9", str(package), token_limit=limit.to_json() if limit else None)
    changes = [Change(rel, package / rel, ORIGINAL[rel], PATCHED[rel], ("p",)) for rel in (A, B)]
    entries = stage(state, changes, manifest)
    fail_at(monkeypatch, "replace", Killed())
    with pytest.raises(Killed):
        commit(state, entries, manifest, Op.APPLY)
    monkeypatch.setattr(fsutil, "STEP_HOOK", None)
    return state


@pytest.mark.parametrize(
    ("limit", "written"), [(None, 1), (LimitAsk(512), 3)], ids=["without-a-token-limit", "with-a-token-limit"]
)
def test_a_journal_has_format_1_unless_its_manifest_records_a_token_limit(
    package: Path, monkeypatch: pytest.MonkeyPatch, limit: LimitAsk | None, written: int
) -> None:
    """Format 1 is what every sm120patch reads; a token limit needs format 3 (state.py)."""
    state = interrupted_apply_asked(package, monkeypatch, limit)
    assert json.loads(state.journal_path.read_text())["format"] == written


def test_an_older_sm120patch_refuses_to_finish_an_apply_whose_journal_records_a_token_limit(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool from before --fuse-up-to would finish the apply and drop the limit from the
    manifest it leaves: it must say "upgrade" and leave the half-done apply as it is."""
    state = interrupted_apply_asked(package, monkeypatch, LimitAsk(512))
    monkeypatch.setattr(state_module, "FORMAT", 2)  # sm120patch as it was before --fuse-up-to
    with pytest.raises(EnvironmentProblem, match=r"was written by a newer sm120patch \(state format 3, "):
        recover(state)
    assert contents(package) == ORIGINAL
    assert state.journal_path.is_file()


# -- recover ---------------------------------------------------------------------------------


def test_the_next_run_finishes_an_interrupted_apply_and_names_each_file_it_replaced(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = interrupted_apply(package, monkeypatch, at="replace")
    written = json.loads(state.journal_path.read_text())
    assert recover(state) == (
        f"recovered an interrupted apply (pid {os.getpid()}, started {written['started']}): finished it ({A}, {B})"
    )
    assert contents(package) == PATCHED
    assert not state.journal_path.exists() and not (state.root / "staged").exists()
    assert state.load() is not None


def test_recovering_an_apply_killed_after_every_replace_says_no_file_needed_it(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = interrupted_apply(package, monkeypatch, at="finalize")
    written = json.loads(state.journal_path.read_text())
    assert recover(state) == (
        f"recovered an interrupted apply (pid {os.getpid()}, started {written['started']}): "
        "finished it (no file needed it)"
    )
    assert contents(package) == PATCHED
    assert not state.journal_path.exists()


def test_a_journal_without_pid_or_start_time_is_reported_as_pid_0_started_unknown(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = interrupted_apply(package, monkeypatch, at="finalize")
    written = json.loads(state.journal_path.read_text())
    del written["pid"], written["started"]
    state.journal_path.write_text(json.dumps(written))
    assert recover(state) == "recovered an interrupted apply (pid 0, started ?): finished it (no file needed it)"


def test_a_loaded_journal_keeps_every_field_it_was_written_with() -> None:
    data: dict[str, Any] = {
        "entries": [{"after": "a" * 64, "before": "b" * 64, "path": "/site/sglang/x.py", "rel": "x.py", "source": "x"}],
        "format": 0,  # not this tool's JOURNAL_FORMAT: read back as it was written, not replaced
        "manifest": None,
        "op": "apply",
        "pid": 7,
        "started": "2026-11-01T10:00:00+0000",
    }
    assert Journal.from_json(dict(data)).to_json() == data


def test_a_target_changed_by_someone_else_during_an_interrupted_apply_is_left_as_is(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = interrupted_apply(package, monkeypatch, at="replace")
    (package / B).write_bytes(b"edited by hand\n")
    with pytest.raises(NotAsAsked) as raised:
        recover(state)
    assert str(raised.value) == (
        f"interrupted apply: {B} is neither the version before ({sha256(ORIGINAL[B])[:12]}) nor after "
        f"({sha256(PATCHED[B])[:12]}) the operation; it was changed by something else. Left as is. "
        f"Compare it with {state.root}/staged/{B}, then remove {state.journal_path}"
    )
    assert raised.value.code == "changed-since-apply"
    assert (package / B).read_bytes() == b"edited by hand\n"
    assert state.journal_path.is_file()


def test_an_interrupted_revert_whose_backup_was_damaged_leaves_the_file_as_is(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, entries, manifest = stage_apply(package)
    commit(state, entries, manifest, Op.APPLY)
    back = [
        Entry(rel, str(package / rel), sha256(PATCHED[rel]), sha256(ORIGINAL[rel]), f"backups/{rel}") for rel in (A, B)
    ]
    fail_at(monkeypatch, "replace", Killed())
    with pytest.raises(Killed):
        commit(state, back, None, Op.REVERT)
    monkeypatch.setattr(fsutil, "STEP_HOOK", None)
    state.backup_path(A).write_bytes(b"communi")  # cut short
    with pytest.raises(NotAsAsked) as raised:
        recover(state)
    assert str(raised.value) == f"interrupted revert: {state.root}/backups/{A} is damaged; {A} left as is"
    assert raised.value.code == "state-damaged"
    assert contents(package) == PATCHED


def test_recovery_without_a_journal_removes_what_a_killed_run_staged(package: Path) -> None:
    state, _, _ = stage_apply(package)  # killed before its journal was written
    assert state.staged_path(A).is_file()
    assert recover(state) is None
    assert not (state.root / "staged").exists()
    assert contents(package) == ORIGINAL


# -- check_writable --------------------------------------------------------------------------


def refuse_writes_to(file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``file`` unwritable while its directory stays writable: by its mode or, for root
    (whom no mode stops), by an ``open`` that refuses it."""
    if not ROOT:
        file.chmod(0o444)
        return

    def open_refusing(name: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        """Stands in for ``open`` on a file the kernel will not let us write (mode, immutable)."""
        if Path(name) == file and any(c in mode for c in "wax+"):
            raise PermissionError(errno.EACCES, DENIED, str(name))
        return builtins.open(name, mode, *args, **kwargs)

    monkeypatch.setattr(journal, "open", open_refusing, raising=False)


def refuse_new_files_in(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``directory`` refuse new files while the files in it stay writable: by its mode
    or, for root, by a ``tempfile.NamedTemporaryFile`` that refuses it."""
    if not ROOT:
        directory.chmod(0o555)
        return
    real = tempfile.NamedTemporaryFile

    def refusing(*args: Any, dir: Any = None, **kwargs: Any) -> Any:
        """Stands in for ``tempfile.NamedTemporaryFile`` in a directory we may not write."""
        if dir is not None and Path(dir) == directory:
            raise PermissionError(errno.EACCES, DENIED, str(directory))
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refusing)


def cannot_replace(path: Path, refused: Path) -> str:
    """The refusal of ``path``, whose write ``refused`` (the file, or its folder) refused to
    the user who owns it: the advice is to make it writable, not to run as its owner."""
    refused = Path(os.path.realpath(refused))
    return (
        f"{os.path.realpath(path)}: cannot be replaced ({DENIED}); no sglang file was changed: you own "
        f"{refused} but may not write there: make it writable (`chmod -R u+w {refused}`)"
    )


def test_a_target_that_cannot_be_written_is_refused_before_any_change(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refuse_writes_to(package / B, monkeypatch)
    try:
        with pytest.raises(EnvironmentProblem) as raised:
            check_writable([package / A, package / B])
        assert str(raised.value) == cannot_replace(package / B, package / B)
        assert raised.value.code == "not-writable"
        assert contents(package) == ORIGINAL
    finally:
        (package / B).chmod(0o644)


def test_a_refusal_no_permission_is_at_fault_for_gives_no_advice(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk: the folder takes no temp file, and no change of owner or mode would help."""
    real = tempfile.NamedTemporaryFile

    def full(*args: Any, dir: Any = None, **kwargs: Any) -> Any:
        """Stands in for ``tempfile.NamedTemporaryFile`` on a full disk."""
        if dir is not None and Path(dir) == (package / B).parent:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", full)
    with pytest.raises(EnvironmentProblem) as raised:
        check_writable([package / B])
    assert (
        str(raised.value) == f"{package / B}: cannot be replaced (No space left on device); no sglang file was changed"
    )
    assert raised.value.code == "not-writable"


def test_a_directory_that_takes_no_new_file_is_refused_though_the_file_is_writable(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layers = (package / A).parent
    refuse_new_files_in(layers, monkeypatch)
    try:
        with open(package / A, "ab"):  # the file itself can be written
            pass
        with pytest.raises(EnvironmentProblem) as raised:
            check_writable([package / B, package / A])
        assert str(raised.value) == cannot_replace(package / A, layers)
    finally:
        layers.chmod(0o755)


def test_the_probe_is_a_hidden_sm120patch_file_beside_the_target_and_is_removed(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layers = (package / A).parent
    before = set(os.listdir(layers))
    appeared: list[set[str]] = []
    real = tempfile.NamedTemporaryFile

    def watched(*args: Any, **kwargs: Any) -> Any:
        """The real ``NamedTemporaryFile``, with a look at the target's directory while it exists."""
        probe = real(*args, **kwargs)
        appeared.append(set(os.listdir(layers)) - before)
        return probe

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", watched)
    check_writable([package / A])
    (name,) = appeared[0]
    assert re.fullmatch(r"\.sm120patch-probe-\w+", name), name
    assert set(os.listdir(layers)) == before
    assert contents(package) == ORIGINAL


# -- remove_temps, unchanged -----------------------------------------------------------------


def test_stale_temps_beside_the_targets_and_anywhere_in_the_state_are_removed(package: Path) -> None:
    state, _, _ = stage_apply(package)
    temps = [
        (package / A).parent / f".communicator.py.x1{TEMP_SUFFIX}",
        state.backup_path(A).parent / f".communicator.py.x2{TEMP_SUFFIX}",
        state.root / f".journal.json.x3{TEMP_SUFFIX}",
    ]
    for temp in temps:
        temp.write_bytes(b"half")
    remove_temps(state, [package / A, package / B])
    assert [t for t in temps if t.exists()] == []
    assert contents(package) == ORIGINAL
    assert state.backup_path(A).read_bytes() == ORIGINAL[A]


def test_a_target_whose_folder_links_out_of_the_package_keeps_the_temps_there(tmp_path: Path) -> None:
    """The folder a link leads to is another environment's (a shared store): its files are not
    sm120patch's to remove, and apply refuses the target later, in one sentence of its own."""
    package = tmp_path / "site" / "sglang"
    store = tmp_path / "store" / "layers"
    store.mkdir(parents=True)
    (store / "communicator.py").write_bytes(ORIGINAL[A])
    (package / A).parent.parent.mkdir(parents=True)
    (package / A).parent.symlink_to(store)
    (package / B).write_bytes(ORIGINAL[B])
    state = StateDir(package)
    state.make()
    in_store = store / f".communicator.py.x1{TEMP_SUFFIX}"
    ours = [(package / B).parent / f".server_args.py.x2{TEMP_SUFFIX}", state.root / f".journal.json.x3{TEMP_SUFFIX}"]
    for temp in [in_store, *ours]:
        temp.write_bytes(b"half")
    remove_temps(state, [package / A, package / B])
    assert in_store.read_bytes() == b"half"
    assert [t for t in ours if t.exists()] == []


@pytest.mark.parametrize("filename", ["/srv/site/sglang/srt/.communicator.py.x1.sm120patch-tmp", None])
def test_a_temp_file_that_cannot_be_removed_is_one_sentence_and_nothing_changed(
    package: Path, monkeypatch: pytest.MonkeyPatch, filename: str | None
) -> None:
    state, _, _ = stage_apply(package)
    (package / A).parent.joinpath(f".communicator.py.x1{TEMP_SUFFIX}").write_bytes(b"half")

    def refused(path: Path) -> None:
        """Fake: the filesystem refuses the unlink (a read-only mount, another owner)."""
        raise OSError(errno.EACCES, DENIED, filename)

    monkeypatch.setattr(fsutil, "unlink", refused)
    with pytest.raises(EnvironmentProblem) as error:
        remove_temps(state, [package / A])
    shown = filename or "a temp file"
    assert str(error.value) == (
        f"cannot remove {shown}, left by a run that was killed ({DENIED}); no sglang file was changed"
    )
    assert error.value.code == "not-writable"
    assert contents(package) == ORIGINAL


def test_a_file_that_cannot_be_read_counts_as_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a.py"
    path.write_bytes(b"x = 1\n")
    if ROOT:
        read_bytes: Callable[[Path], bytes] = Path.read_bytes

        def unreadable(self: Path) -> bytes:
            """Stands in for reading a file the kernel will not let us read (root reads any mode)."""
            if self == path:
                raise PermissionError(errno.EACCES, DENIED, str(self))
            return read_bytes(self)

        monkeypatch.setattr(Path, "read_bytes", unreadable)
    else:
        path.chmod(0)
    try:
        assert not unchanged([(path, b"x = 1\n")])
    finally:
        path.chmod(0o644)


# -- stage -----------------------------------------------------------------------------------


def test_a_file_edited_by_hand_since_apply_gets_a_new_backup_and_the_old_is_kept_aside(package: Path) -> None:
    state, entries, manifest = stage_apply(package)
    commit(state, entries, manifest, Op.APPLY)
    (package / A).write_bytes(b"edited by hand\n")
    again = Change(A, package / A, b"edited by hand\n", b"edited, patched\n", ("q",))
    (entry,) = stage(state, [again], manifest)
    assert entry == Entry(A, str(package / A), sha256(b"edited by hand\n"), sha256(b"edited, patched\n"), f"staged/{A}")
    assert state.backup_path(A).read_bytes() == b"edited by hand\n"
    assert manifest.files[A] == FileRecord(
        sha256(b"edited by hand\n"), sha256(b"edited, patched\n"), ["q"], f"backups/{A}"
    )
    (aside,) = [p for p in state.root.iterdir() if p.name.startswith("stale-")]
    assert re.fullmatch(r"stale-superseded-srt_layers_communicator\.py-\d{8}T\d{6}", aside.name), aside.name
    assert [p.name for p in aside.iterdir()] == ["communicator.py"]
    assert (aside / "communicator.py").read_bytes() == ORIGINAL[A]


def test_a_full_disk_while_staging_removes_what_was_staged_and_says_no_sglang_file_changed(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Writes: A's backup, A's staged copy, B's backup, B's staged copy: the disk fills at the last.
    fail_at(monkeypatch, "write", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), nth=4)
    state = StateDir(package)
    with pytest.raises(EnvironmentProblem) as raised:
        stage_apply(package)
    assert str(raised.value) == (
        f"cannot write backups into {state.root}: {state.staged_path(B)} ({os.strerror(errno.ENOSPC)}); "
        "no sglang file was changed"
    )
    assert raised.value.code == "not-writable"
    assert not (state.root / "staged").exists()
    assert contents(package) == ORIGINAL


def test_a_read_only_hard_linked_file_is_replaceable_and_never_opened_for_writing(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hard link shares its inode with a store: os.replace swaps the name, never that inode,
    so the inode is not opened to write, and its being read-only is no reason to refuse."""
    os.link(package / A, package.parent / "store.py")
    refuse_writes_to(package / A, monkeypatch)
    try:
        check_writable([package / A])
        assert contents(package) == ORIGINAL
    finally:
        (package / A).chmod(0o644)
