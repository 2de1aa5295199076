"""What a refused write under the sglang install advises: the owner of a read-only tree is
told to make it writable (it was told to run as the owner, which it is); anyone else is told
whose it is; a read-only mount is named as such; no permission advice where none is at fault."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from sm120patch.patcher.transaction.fsutil import write_advice


def refused(code: int, path: Path) -> OSError:
    return OSError(code, os.strerror(code), str(path))


def test_the_owner_is_told_to_make_the_tree_writable(tmp_path: Path) -> None:
    assert write_advice(refused(errno.EACCES, tmp_path)) == (
        f"you own {tmp_path} but may not write there: make it writable (`chmod -R u+w {tmp_path}`)"
    )


def test_a_file_not_made_is_its_folders_refusal(tmp_path: Path) -> None:
    assert f"you own {tmp_path} but" in write_advice(refused(errno.EACCES, tmp_path / ".sm120patch"))


def test_an_immutable_file_of_the_owner_names_chattr(tmp_path: Path) -> None:
    assert write_advice(refused(errno.EPERM, tmp_path)).endswith("(or `chattr -i` it, where it is immutable)")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_another_users_tree_names_its_owner(tmp_path: Path) -> None:
    theirs = tmp_path / "sglang"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    import pwd

    try:
        name = pwd.getpwuid(65534).pw_name
    except KeyError:
        name = "uid 65534"
    assert write_advice(refused(errno.EACCES, theirs)) == (
        f"{theirs} belongs to {name}: run as {name}, or have it made writable for you"
    )


def test_a_read_only_mount_and_errors_no_permission_causes(tmp_path: Path) -> None:
    assert "mounted read-only" in write_advice(refused(errno.EROFS, tmp_path))
    assert write_advice(refused(errno.EEXIST, tmp_path)) == ""
    assert write_advice(OSError(errno.EACCES, "Permission denied")) == ""  # no file named: nothing to say of it


def test_a_refusal_where_neither_the_path_nor_its_folder_is_there_names_no_owner(tmp_path: Path) -> None:
    assert write_advice(refused(errno.EACCES, tmp_path / "gone" / "file")) == (
        "run as the user who owns the sglang install, or make it writable"
    )


def test_an_owner_with_no_user_name_is_named_by_uid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tree is another user's (this process's uid faked), one the password database does not list."""
    import pwd

    def unlisted(uid: int) -> pwd.struct_passwd:
        """Fake ``pwd.getpwuid``: no entry for any uid (a container's build user)."""
        raise KeyError(uid)

    owner = tmp_path.stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    monkeypatch.setattr(pwd, "getpwuid", unlisted)
    assert write_advice(refused(errno.EACCES, tmp_path)) == (
        f"{tmp_path} belongs to uid {owner}: run as uid {owner}, or have it made writable for you"
    )
