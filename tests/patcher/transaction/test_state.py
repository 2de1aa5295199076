"""The state directory on its own (transaction/state_dir.py): the ``.gitignore`` it gets, the JSON
it writes, what a user reads when the manifest or journal is damaged, and where ``set_aside``,
``keep_aside`` and ``clear`` move or remove things, with the directory fsyncs that make it durable."""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sm120patch import __version__
from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.transaction import fsutil
from sm120patch.patcher.transaction import state_dir as state_module
from sm120patch.patcher.transaction.fsutil import Op
from sm120patch.patcher.transaction.state_dir import FileRecord, Manifest, StateDir

NOW = time.gmtime(1793527200)  # 2026-11-01 10:00:00 UTC
STAMP = "20261101T100000"  # NOW as a stale folder names it
COMM = "srt/layers/communicator.py"
GITIGNORE = b"# written by sm120patch: its backups and state stay out of git\n*\n"
DENIED = os.strerror(errno.EACCES)


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop the clock state.py reads at NOW: every call of the test falls in the same second."""
    real_strftime = time.strftime

    def strftime_at_now(fmt: str, when: Any = None) -> str:
        """time.strftime on a clock that stands still at NOW (UTC)."""
        return real_strftime(fmt, NOW if when is None else when)

    monkeypatch.setattr(state_module.time, "strftime", strftime_at_now)


@pytest.fixture
def ops(monkeypatch: pytest.MonkeyPatch) -> list[Op]:
    """The operations on disk fsutil does from here on, in order (its OP_HOOK)."""
    done: list[Op] = []
    monkeypatch.setattr(fsutil, "OP_HOOK", done.append)
    return done


def corrupted(path: Path, root: Path, what: str) -> str:
    return (
        f"{path} is corrupted (not a {what} this tool wrote); move {root} away "
        "and reinstall sglang to get pristine files, or restore it from a backup"
    )


def with_state(state: StateDir) -> None:
    """Give ``state`` a manifest, a backup, a staged copy and a lock, as after an apply."""
    state.make()
    state.save(Manifest("0.5.9", "/site/sglang"))
    state.put(state.backup_path(COMM), b"original\n")
    state.put(state.staged_path(COMM), b"patched\n")
    (state.root / "lock").write_text("4242")


# -- the directory and its .gitignore -------------------------------------------------------


@pytest.mark.parametrize(
    ("umask", "mode"), [(0o000, 0o644), (0o022, 0o644), (0o027, 0o640)], ids=["umask 000", "umask 022", "umask 027"]
)
def test_make_writes_a_gitignore_that_ignores_everything_readable_as_0644_less_the_umask(
    state: StateDir, umask: int, mode: int
) -> None:
    previous = os.umask(umask)
    try:
        state.make()
    finally:
        os.umask(previous)
    assert sorted(os.listdir(state.root)) == [".gitignore"]
    gitignore = state.root / ".gitignore"
    assert gitignore.read_bytes() == GITIGNORE
    assert gitignore.stat().st_mode & 0o7777 == mode


def test_make_leaves_an_existing_gitignore_as_it_is(state: StateDir) -> None:
    state.root.mkdir()
    (state.root / ".gitignore").write_bytes(b"manifest.json\n")
    state.make()
    assert (state.root / ".gitignore").read_bytes() == b"manifest.json\n"


# -- JSON: what is written and what is read back --------------------------------------------


def test_write_json_creates_the_parents_and_writes_sorted_keys_indented_by_two_with_a_newline(
    state: StateDir,
) -> None:
    path = state.root / "sub" / "deep" / "data.json"
    state.write_json(path, {"b": 2, "a": [1, {"d": None, "c": "x"}]})
    assert path.read_text(encoding="utf-8") == (
        '{\n  "a": [\n    1,\n    {\n      "c": "x",\n      "d": null\n    }\n  ],\n  "b": 2\n}\n'
    )
    assert (state.root / ".gitignore").read_bytes() == GITIGNORE


@pytest.mark.usefixtures("frozen_clock")
def test_save_stamps_updated_now_with_seconds_and_utc_offset_and_the_current_format(state: StateDir) -> None:
    manifest = Manifest("0.5.9", "/site/sglang", created="2025-01-01T00:00:00+0000", updated="old", format=1)
    state.save(manifest)
    assert manifest.updated == "2026-11-01T10:00:00+0000"
    saved = json.loads(state.manifest_path.read_text(encoding="utf-8"))
    assert (saved["created"], saved["updated"], saved["format"]) == (
        "2025-01-01T00:00:00+0000",
        "2026-11-01T10:00:00+0000",
        2,
    )


def test_a_saved_manifest_loads_back_equal(state: StateDir) -> None:
    manifest = Manifest("0.5.9", "/site/sglang")
    manifest.files[COMM] = FileRecord("b" * 64, "a" * 64, ["communicator-flag"], f"backups/{COMM}")
    manifest.checked[COMM] = {"sha256": "a" * 64, "reports": []}
    state.save(manifest)
    assert state.load() == manifest


def test_a_manifest_edited_by_hand_in_utf8_loads_as_written(state: StateDir) -> None:
    state.save(Manifest("0.5.9", "/opt/site-packages/sglang"))
    text = state.manifest_path.read_text(encoding="utf-8")
    state.manifest_path.write_bytes(text.replace("/opt/", "/opt/büro/").encode("utf-8"))
    loaded = state.load()
    assert loaded is not None
    assert loaded.sglang_location == "/opt/büro/site-packages/sglang"


def test_a_manifest_without_files_has_none() -> None:
    manifest = Manifest.from_json({"sglang_version": "0.5.9", "sglang_location": "/site/sglang"})
    assert (manifest.files, manifest.checked) == ({}, {})


def test_no_manifest_and_no_journal_load_as_none(state: StateDir) -> None:
    assert (state.load(), state.load_journal()) == (None, None)


def test_a_manifest_of_the_wrong_shape_names_the_problem_and_how_to_get_pristine_files(state: StateDir) -> None:
    state.write_json(state.manifest_path, {**Manifest("0.5.9", "/site/sglang").to_json(), "checked": {COMM: 1}})
    with pytest.raises(EnvironmentProblem) as caught:
        state.load()
    assert str(caught.value) == (
        f"{state.manifest_path} is corrupted ('checked' is not an object of objects); move {state.root} away "
        "and reinstall sglang (pip install --force-reinstall --no-deps sglang==<version>) to get pristine files"
    )
    assert caught.value.code == "state-damaged"


@pytest.mark.parametrize("what", ["manifest", "journal"])
@pytest.mark.parametrize(
    "data",
    [b"{", b"", b"[]", b'"format"', b"2", b"{}", b'{"formats": 2}', b'{"format": 2, "x": "\xff"}'],
    ids=["bad-json", "empty", "a-list", "a-string", "a-number", "no-format", "misspelt-format", "not-utf8"],
)
def test_a_damaged_manifest_or_journal_names_the_file_and_what_it_is(state: StateDir, what: str, data: bytes) -> None:
    path = state.manifest_path if what == "manifest" else state.journal_path
    state.make()
    path.write_bytes(data)
    with pytest.raises(EnvironmentProblem) as caught:
        state.load() if what == "manifest" else state.load_journal()
    assert str(caught.value) == corrupted(path, state.root, what)
    assert caught.value.code == "state-damaged"


@pytest.mark.parametrize("what", ["manifest", "journal"])
@pytest.mark.parametrize("fmt", [6, "2", None])
def test_a_manifest_or_journal_of_a_newer_or_unknown_format_asks_for_a_newer_tool(
    state: StateDir, what: str, fmt: object
) -> None:
    path = state.manifest_path if what == "manifest" else state.journal_path
    state.write_json(path, {"format": fmt})
    with pytest.raises(EnvironmentProblem) as caught:
        state.load() if what == "manifest" else state.load_journal()
    assert str(caught.value) == (
        f"{path} was written by a newer sm120patch (state format {fmt}, this is "
        f"{__version__} with format 5); upgrade sm120patch"
    )
    assert caught.value.code == "state-newer"


@pytest.mark.parametrize("what", ["manifest", "journal"])
def test_an_unreadable_manifest_or_journal_names_the_file_what_it_is_and_why(
    state: StateDir, what: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = state.manifest_path if what == "manifest" else state.journal_path
    state.write_json(path, {"format": 2})
    real_read_bytes = Path.read_bytes

    def read_bytes_denied(self: Path) -> bytes:
        """Path.read_bytes where ``path`` may not be read (root is never refused by its mode)."""
        if self == path:
            raise PermissionError(errno.EACCES, DENIED, str(self))
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes_denied)
    with pytest.raises(EnvironmentProblem) as caught:
        state.load() if what == "manifest" else state.load_journal()
    assert str(caught.value) == f"{path}: cannot read the {what} ({DENIED})"
    assert caught.value.code == "state-damaged"


# -- set_aside -----------------------------------------------------------------------------


@pytest.mark.usefixtures("frozen_clock")
def test_set_aside_moves_backups_then_manifest_into_a_stale_folder_and_fsyncs_both_directories(
    state: StateDir, ops: list[Op]
) -> None:
    with_state(state)
    manifest = state.manifest_path.read_bytes()
    ops.clear()
    target = state.set_aside("0.5.9")
    assert target == state.root / f"stale-0.5.9-{STAMP}"
    assert (target / "backups" / COMM).read_bytes() == b"original\n"
    assert (target / "manifest.json").read_bytes() == manifest
    assert sorted(p.name for p in target.iterdir()) == ["backups", "manifest.json"]
    assert sorted(p.name for p in state.root.iterdir()) == [".gitignore", "lock", "staged", f"stale-0.5.9-{STAMP}"]
    assert ops == [
        Op("rename", state.root / "backups", target / "backups"),
        Op("rename", state.manifest_path, target / "manifest.json"),
        Op("fsync_dir", target),
        Op("fsync_dir", state.root),
    ]


@pytest.mark.usefixtures("frozen_clock")
def test_set_aside_of_a_state_without_backups_moves_the_manifest_alone(state: StateDir) -> None:
    state.save(Manifest("0.5.9", "/site/sglang"))
    target = state.set_aside("0.5.9")
    assert sorted(p.name for p in target.iterdir()) == ["manifest.json"]
    assert not state.manifest_path.exists()


@pytest.mark.usefixtures("frozen_clock")
def test_three_set_asides_in_one_second_get_three_folders_and_keep_every_manifest(state: StateDir) -> None:
    targets = []
    for version, suffix in (("0.5.9", ""), ("0.5.10", "-2"), ("0.5.11", "-3")):
        state.save(Manifest(version, "/site/sglang"))
        targets.append(state.set_aside("old"))
        assert targets[-1] == state.root / f"stale-old-{STAMP}{suffix}"
    kept = [json.loads((t / "manifest.json").read_text(encoding="utf-8"))["sglang_version"] for t in targets]
    assert kept == ["0.5.9", "0.5.10", "0.5.11"]


@pytest.mark.usefixtures("frozen_clock")
def test_set_aside_before_any_state_leaves_an_empty_stale_folder(state: StateDir) -> None:
    target = state.set_aside("unknown")
    assert target == state.root / f"stale-unknown-{STAMP}"
    assert list(target.iterdir()) == []


# -- keep_aside ----------------------------------------------------------------------------


@pytest.mark.usefixtures("frozen_clock")
def test_keep_aside_moves_the_file_into_a_stale_folder_and_fsyncs_both_directories(
    state: StateDir, ops: list[Op]
) -> None:
    with_state(state)
    backup = state.backup_path(COMM)
    ops.clear()
    state.keep_aside("superseded-srt_layers_communicator.py", backup)
    folder = state.root / f"stale-superseded-srt_layers_communicator.py-{STAMP}"
    assert (folder / "communicator.py").read_bytes() == b"original\n"
    assert list(folder.iterdir()) == [folder / "communicator.py"]
    assert not backup.exists()
    assert ops == [
        Op("rename", backup, folder / "communicator.py"),
        Op("fsync_dir", folder),
        Op("fsync_dir", state.root),
        Op("fsync_dir", backup.parent),
    ]


def test_keep_aside_of_a_file_that_is_not_there_changes_nothing(state: StateDir, ops: list[Op]) -> None:
    with_state(state)
    before = sorted(p.relative_to(state.root).as_posix() for p in state.root.rglob("*"))
    ops.clear()
    state.keep_aside("superseded-srt_server_args.py", state.backup_path("srt/server_args.py"))
    assert sorted(p.relative_to(state.root).as_posix() for p in state.root.rglob("*")) == before
    assert ops == []


@pytest.mark.usefixtures("frozen_clock")
def test_two_keep_asides_of_one_backup_in_one_second_keep_both(state: StateDir) -> None:
    backup = state.backup_path(COMM)
    label = "superseded-srt_layers_communicator.py"
    for data in (b"first backup\n", b"second backup\n"):
        state.put(backup, data)
        state.keep_aside(label, backup)
    assert (state.root / f"stale-{label}-{STAMP}" / "communicator.py").read_bytes() == b"first backup\n"
    assert (state.root / f"stale-{label}-{STAMP}-2" / "communicator.py").read_bytes() == b"second backup\n"


# -- clear ---------------------------------------------------------------------------------


def test_clear_removes_manifest_backups_and_staged_and_keeps_lock_gitignore_and_stale_folders(
    state: StateDir, ops: list[Op]
) -> None:
    with_state(state)
    state.put(state.root / "stale-0.5.8-20250101T000000" / "manifest.json", b"{}\n")
    ops.clear()
    state.clear()
    assert sorted(p.relative_to(state.root).as_posix() for p in state.root.rglob("*")) == [
        ".gitignore",
        "lock",
        "stale-0.5.8-20250101T000000",
        "stale-0.5.8-20250101T000000/manifest.json",
    ]
    # The manifest is gone for good before any backup is.
    assert ops[:2] == [Op("unlink", state.manifest_path), Op("fsync_dir", state.root)]
    assert ops[-1] == Op("fsync_dir", state.root)


# -- remove and the lock -------------------------------------------------------------------


def test_remove_after_a_full_revert_leaves_nothing_of_the_state_directory(state: StateDir) -> None:
    with_state(state)
    state.clear()
    assert state.remove() == []
    assert not state.root.exists()


def test_remove_keeps_the_directory_for_what_must_be_kept_and_names_it(state: StateDir) -> None:
    with_state(state)
    state.put(state.root / "stale-overwritten" / COMM, b"a hand edit\n")
    state.clear()
    assert state.remove() == ["stale-overwritten"]
    assert sorted(p.name for p in state.root.iterdir()) == [".gitignore", "stale-overwritten"]


@pytest.mark.parametrize(("umask", "mode"), [(0o000, 0o644), (0o022, 0o644), (0o027, 0o640)], ids=["000", "022", "027"])
def test_the_lock_file_a_writer_makes_is_readable_as_0644_less_the_umask_never_executable(
    state: StateDir, umask: int, mode: int
) -> None:
    """Readers (verify, doctor, another user's) open it to wait for the writer: readable as
    the .gitignore beside it is; a lock is no program."""
    previous = os.umask(umask)
    try:
        with state.lock():
            pass
    finally:
        os.umask(previous)
    assert state.lock_path.stat().st_mode & 0o7777 == mode


def test_a_reader_that_may_not_open_the_lock_file_is_told_which_and_why(
    state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fake: ``os.open`` of the lock file fails with EACCES (another user's state, say)."""
    state.make()
    state.lock_path.write_text("")
    real = os.open

    def open_(path: object, flags: int, *args: int) -> int:
        if path == state.lock_path:
            raise PermissionError(13, "Permission denied")
        return real(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(state_module.os, "open", open_)
    with pytest.raises(EnvironmentProblem) as raised, state.lock(shared=True):
        pass
    assert str(raised.value) == f"cannot read {state.lock_path} (Permission denied)"
    assert raised.value.code == "unreadable"


def test_a_state_directory_that_cannot_be_made_is_named_as_the_system_named_it(state: StateDir) -> None:
    """A file where the state directory goes: the error names that path, not the lock file."""
    state.root.write_text("not a directory")
    with pytest.raises(EnvironmentProblem) as raised, state.lock():
        pass
    assert str(raised.value) == (
        f"cannot create the state directory {state.root} (File exists: {state.root})"
    )  # no advice to run as another user: no permission is at fault


def test_a_reader_without_a_lock_file_holds_nothing_and_creates_nothing(state: StateDir) -> None:
    with state.lock(shared=True) as held:
        assert held is False
    assert not state.root.exists()


def test_readers_share_the_lock_and_a_writer_waits_for_them(state: StateDir) -> None:
    with state.lock():
        pass
    with state.lock(shared=True) as first, state.lock(shared=True) as second:
        assert first and second
        with pytest.raises(EnvironmentProblem, match="has held"), state.lock(timeout=0.2):
            pass


def test_a_writer_that_waited_on_a_lock_file_a_revert_removed_locks_the_new_one(state: StateDir) -> None:
    """The revert removes the lock file while holding it; the waiter must not go on holding
    the removed file, which a third run could not see."""
    got: list[int] = []
    with state.lock():
        waiter = threading.Thread(target=lambda: _lock_and_note(state, got))
        waiter.start()
        time.sleep(0.3)
        assert state.remove() == []
    waiter.join(timeout=30)
    assert got and got[0] == os.stat(state.lock_path).st_ino


def _lock_and_note(state: StateDir, got: list[int]) -> None:
    with state.lock():
        got.append(os.stat(state.lock_path).st_ino)


def test_consistent_judges_again_under_the_lock_when_a_writer_began_meanwhile(state: StateDir) -> None:
    calls: list[bool] = []

    def judge() -> int:
        calls.append(state.lock_path.exists())
        if len(calls) == 1:  # an apply starts while this judge reads the tree
            state.make()
            state.lock_path.write_text("")
        return len(calls)

    assert state.consistent(judge) == 2
    assert calls == [False, True]


def test_a_writer_whose_directory_a_revert_removes_before_the_lock_opens_makes_it_again(
    state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A revert that finishes between the writer's ``make()`` and its open of the lock removes
    the whole directory; the writer makes it again rather than failing with "cannot create"."""
    real = StateDir.make
    removed: list[int] = []

    def make_then_lose_it(self: StateDir) -> None:
        """The revert's removal, landing right after the directory was made (twice)."""
        real(self)
        if len(removed) < state_module.LOCK_OPEN_TRIES - 1:
            removed.append(1)
            shutil.rmtree(self.root)

    monkeypatch.setattr(StateDir, "make", make_then_lose_it)
    with state.lock():
        assert state.lock_path.is_file() and (state.root / ".gitignore").is_file()
    assert len(removed) == state_module.LOCK_OPEN_TRIES - 1


def test_a_directory_that_keeps_vanishing_is_an_error_naming_it(
    state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = StateDir.make
    tries: list[int] = []

    def make_then_lose_it(self: StateDir) -> None:
        """Something removes the state directory every time it is made."""
        real(self)
        tries.append(1)
        shutil.rmtree(self.root)

    monkeypatch.setattr(StateDir, "make", make_then_lose_it)
    with pytest.raises(EnvironmentProblem) as raised, state.lock():
        pass
    assert len(tries) == state_module.LOCK_OPEN_TRIES
    assert str(raised.value) == (
        f"cannot create the state directory {state.root} (No such file or directory: {state.lock_path})"
    )
