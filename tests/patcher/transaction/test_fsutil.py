"""``transaction.fsutil``: every change apply and revert make on disk goes through it, so
each promise in its docstrings is checked here on real files: the whole file or none, the
mode and owner kept, the link kept a link, the order of operations the crash-consistency
tests rely on, and the cleanup helpers removing exactly what they name."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sm120patch.patcher.transaction import fsutil
from sm120patch.patcher.transaction.fsutil import (
    TEMP_SUFFIX,
    Op,
    atomic_write,
    drop_pycache,
    remove_stale_temps,
    remove_tree,
    sha256,
    sha256_file,
    unlink,
)


@pytest.fixture
def ops(monkeypatch: pytest.MonkeyPatch) -> list[Op]:
    """Every operation fsutil reports through OP_HOOK, in order."""
    seen: list[Op] = []
    monkeypatch.setattr(fsutil, "OP_HOOK", seen.append)
    return seen


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every step name fsutil passes to STEP_HOOK, in order."""
    seen: list[str] = []
    monkeypatch.setattr(fsutil, "STEP_HOOK", seen.append)
    return seen


def temps_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(TEMP_SUFFIX))


# --- atomic_write ----------------------------------------------------------------------------


def test_atomic_write_goes_through_a_synced_temp_file_beside_the_target(
    tmp_path: Path, ops: list[Op], steps: list[str]
) -> None:
    target = tmp_path / "communicator.py"
    target.write_bytes(b"old\n")
    atomic_write(target, b"new\n")
    assert target.read_bytes() == b"new\n"
    assert steps == ["write", "fsync", "rename"]
    assert [op.kind for op in ops] == ["create", "fsync", "rename", "fsync_dir"]
    temp = ops[0].path
    assert temp.parent == tmp_path
    assert temp.name.startswith(".communicator.py.") and temp.name.endswith(TEMP_SUFFIX)
    assert ops[0].data == b"new\n"
    assert ops[1] == Op("fsync", temp)
    assert ops[2] == Op("rename", temp, target)
    assert ops[3] == Op("fsync_dir", tmp_path)
    assert temps_in(tmp_path) == []


def test_atomic_write_keeps_the_mode_of_the_file_it_replaces(tmp_path: Path) -> None:
    target = tmp_path / "server_args.py"
    target.write_bytes(b"old\n")
    target.chmod(0o754)
    atomic_write(target, b"new\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o754


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file another owner")
def test_atomic_write_keeps_the_owner_of_the_file_it_replaces(tmp_path: Path) -> None:
    target = tmp_path / "server_args.py"
    target.write_bytes(b"old\n")
    os.chown(target, 12345, 23456)
    atomic_write(target, b"new\n")
    assert (target.stat().st_uid, target.stat().st_gid) == (12345, 23456)


def test_atomic_write_over_a_symlink_replaces_the_link_and_never_writes_what_it_leads_to(tmp_path: Path) -> None:
    store = tmp_path / "cache" / "communicator.py"
    store.parent.mkdir()
    store.write_bytes(b"old\n")
    store.chmod(0o640)
    link = tmp_path / "site-packages" / "communicator.py"
    link.parent.mkdir()
    link.symlink_to(store)
    atomic_write(link, b"new\n")
    assert not link.is_symlink() and link.read_bytes() == b"new\n"
    assert store.read_bytes() == b"old\n"
    assert stat.S_IMODE(link.stat().st_mode) == 0o640  # the mode of the file it stood for
    assert temps_in(store.parent) == [] and temps_in(link.parent) == []


def test_atomic_write_over_a_hard_link_leaves_the_other_links_their_bytes(tmp_path: Path) -> None:
    cache = tmp_path / "cache.py"
    cache.write_bytes(b"old\n")
    installed = tmp_path / "communicator.py"
    os.link(cache, installed)
    atomic_write(installed, b"new\n")
    assert installed.read_bytes() == b"new\n" and installed.stat().st_nlink == 1
    assert cache.read_bytes() == b"old\n" and cache.stat().st_nlink == 1


def test_atomic_symlink_replaces_a_file_with_the_same_link_text(tmp_path: Path, ops: list[Op]) -> None:
    target = tmp_path / "communicator.py"
    target.write_bytes(b"patched\n")
    fsutil.atomic_symlink(target, "../cache/communicator.py")
    assert target.is_symlink() and os.readlink(target) == "../cache/communicator.py"
    assert temps_in(tmp_path) == []
    kinds = [op.kind for op in ops]
    assert kinds == ["symlink", "rename", "fsync_dir"]
    assert ops[0].data == b"../cache/communicator.py" and ops[1].target == target


def test_atomic_symlink_stopped_before_the_rename_leaves_the_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "communicator.py"
    target.write_bytes(b"patched\n")

    def fail(name: str) -> None:
        if name == "rename":
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(fsutil, "STEP_HOOK", fail)
    with pytest.raises(OSError, match="Input/output error"):
        fsutil.atomic_symlink(target, "elsewhere.py")
    assert not target.is_symlink() and target.read_bytes() == b"patched\n"
    assert temps_in(tmp_path) == []


def test_atomic_symlink_interrupted_just_after_the_rename_passes_the_interrupt_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C lands once the link is in place (the temp name is gone): the caller sees the
    KeyboardInterrupt itself, and the link stays."""
    target = tmp_path / "communicator.py"
    target.write_bytes(b"patched\n")

    def interrupt_after_rename(op: Op) -> None:
        """Fake Ctrl-C, delivered as fsutil reports the rename done."""
        if op.kind == "rename":
            raise KeyboardInterrupt

    monkeypatch.setattr(fsutil, "OP_HOOK", interrupt_after_rename)
    with pytest.raises(KeyboardInterrupt):
        fsutil.atomic_symlink(target, "elsewhere.py")
    assert target.is_symlink() and os.readlink(target) == "elsewhere.py"
    assert temps_in(tmp_path) == []


@pytest.mark.parametrize("at", ["write", "fsync", "rename"])
@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_failure_at_any_step_leaves_the_original_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: str, error: BaseException
) -> None:
    target = tmp_path / "communicator.py"
    target.write_bytes(b"old\n")

    def fail(name: str) -> None:
        if name == at:
            raise error

    monkeypatch.setattr(fsutil, "STEP_HOOK", fail)
    with pytest.raises(type(error)):
        atomic_write(target, b"new\n")
    assert target.read_bytes() == b"old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["communicator.py"]


def test_a_new_file_is_written_whole(tmp_path: Path, ops: list[Op]) -> None:
    target = tmp_path / "manifest.json"
    atomic_write(target, b"{}\n")
    assert target.read_bytes() == b"{}\n"
    assert [op.kind for op in ops] == ["create", "fsync", "rename", "fsync_dir"]


# --- the small helpers -----------------------------------------------------------------------


def test_hashes_of_bytes_and_of_a_file_agree_and_a_missing_file_has_none(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    assert sha256(b"abc") == sha256_file(path) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert sha256_file(tmp_path / "missing") is None


def test_unlink_reports_only_what_it_removed(tmp_path: Path, ops: list[Op]) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    unlink(path)
    unlink(tmp_path / "missing")
    assert not path.exists()
    assert ops == [Op("unlink", path)]


def test_remove_tree_removes_files_then_folders_and_never_follows_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.py").write_bytes(b"keep")
    tree = tmp_path / "staged"
    (tree / "srt" / "layers").mkdir(parents=True)
    (tree / "srt" / "layers" / "communicator.py").write_bytes(b"x")
    (tree / "srt" / "server_args.py").write_bytes(b"y")
    (tree / "srt" / "linked").symlink_to(outside, target_is_directory=True)
    remove_tree(tree)
    assert not tree.exists()
    assert (outside / "keep.py").read_bytes() == b"keep"


def test_remove_tree_of_nothing_is_nothing(tmp_path: Path, ops: list[Op]) -> None:
    remove_tree(tmp_path / "missing")
    plain = tmp_path / "a-file"
    plain.write_bytes(b"x")
    remove_tree(plain)  # not a folder: left alone
    assert plain.read_bytes() == b"x" and ops == []


def test_remove_tree_leaves_a_folder_someone_else_filled_meanwhile_without_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "backups"
    (tree / "srt").mkdir(parents=True)
    (tree / "srt" / "communicator.py").write_bytes(b"x")

    def another_writer(op: Op) -> None:
        """Stands in for another process writing into the folder while it is removed."""
        if op.kind == "unlink":
            (tree / "srt" / "late.py").write_bytes(b"late")

    monkeypatch.setattr(fsutil, "OP_HOOK", another_writer)
    remove_tree(tree)
    assert sorted(p.name for p in (tree / "srt").iterdir()) == ["late.py"]


def test_remove_stale_temps_removes_only_this_tools_temp_files(tmp_path: Path) -> None:
    stale = tmp_path / f".communicator.py.abc123{TEMP_SUFFIX}"
    stale.write_bytes(b"half")
    others = [tmp_path / ".hidden", tmp_path / "communicator.py", tmp_path / f"visible{TEMP_SUFFIX}"]
    for path in others:
        path.write_bytes(b"keep")
    remove_stale_temps([tmp_path, tmp_path])
    assert not stale.exists()
    assert all(path.read_bytes() == b"keep" for path in others)


def test_drop_pycache_removes_the_bytecode_of_that_module_only(tmp_path: Path) -> None:
    package = tmp_path / "layers"
    cache = package / "__pycache__"
    cache.mkdir(parents=True)
    source = package / "communicator.py"
    source.write_bytes(b"x = 1\n")
    dropped = [cache / "communicator.cpython-311.pyc", cache / "communicator.cpython-312.opt-1.pyc"]
    kept = [cache / "communicator_utils.cpython-311.pyc", cache / "other.cpython-311.pyc"]
    for path in dropped + kept:
        path.write_bytes(b"pyc")
    drop_pycache(source)
    assert [path.exists() for path in dropped] == [False, False]
    assert [path.exists() for path in kept] == [True, True]


def test_drop_pycache_of_a_link_drops_the_bytecode_beside_the_link_not_in_its_store(tmp_path: Path) -> None:
    """Python caches a module's bytecode beside the name it imported (this environment's),
    never in the store the name links to."""
    store = tmp_path / "store" / "communicator.py"
    (store.parent / "__pycache__").mkdir(parents=True)
    store.write_bytes(b"x = 1\n")
    in_store = store.parent / "__pycache__" / "communicator.cpython-311.pyc"
    in_store.write_bytes(b"pyc")
    link = tmp_path / "site" / "communicator.py"
    (link.parent / "__pycache__").mkdir(parents=True)
    link.symlink_to(store)
    here = link.parent / "__pycache__" / "communicator.cpython-311.pyc"
    here.write_bytes(b"pyc")
    drop_pycache(link)
    assert not here.exists() and in_store.read_bytes() == b"pyc"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give the target another owner to keep")
def test_an_owner_that_cannot_be_kept_leaves_the_file_written_as_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "server_args.py"
    target.write_bytes(b"old\n")
    os.chown(target, 12345, 23456)

    def chown_refused(path: object, uid: int, gid: int) -> None:
        """Stands in for chown as a user who may not give files away."""
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(fsutil.os, "chown", chown_refused)
    atomic_write(target, b"new\n")
    assert target.read_bytes() == b"new\n"
    assert target.stat().st_uid == os.getuid()


def test_a_failure_after_the_rename_raises_itself_not_a_cleanup_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temp file is already renamed away: its cleanup finds nothing, and says nothing."""
    target = tmp_path / "communicator.py"
    target.write_bytes(b"old\n")

    class AfterRename(Exception):
        pass

    def hook(op: Op) -> None:
        if op.kind == "rename":
            raise AfterRename

    monkeypatch.setattr(fsutil, "OP_HOOK", hook)
    with pytest.raises(AfterRename):
        atomic_write(target, b"new\n")
    assert target.read_bytes() == b"new\n" and temps_in(tmp_path) == []
