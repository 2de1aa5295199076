"""``transaction.links``: which name a write replaces, and how the journal names what a name
holds, on real links in a temp folder."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest

from sm120patch.errors import EnvironmentProblem, NotAsAsked
from sm120patch.patcher.transaction import links
from sm120patch.patcher.transaction.fsutil import sha256
from sm120patch.patcher.transaction.journal import Entry, Journal, Op, _finish
from sm120patch.patcher.transaction.state_dir import StateDir


@pytest.fixture
def package(tmp_path: Path) -> Path:
    root = tmp_path / "site" / "sglang"
    (root / "srt").mkdir(parents=True)
    return root


def test_a_file_of_its_own_is_replaced_by_name(package: Path) -> None:
    (package / "srt" / "a.py").write_bytes(b"a\n")
    assert links.target(package, package / "srt" / "a.py") == links.Target(package / "srt" / "a.py")


def test_a_hard_link_is_replaced_by_name_and_counts_its_other_links(package: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache.py"
    cache.write_bytes(b"a\n")
    os.link(cache, package / "srt" / "a.py")
    os.link(cache, tmp_path / "other-env.py")
    assert links.target(package, package / "srt" / "a.py") == links.Target(package / "srt" / "a.py", shared=2)


def test_a_link_out_of_the_package_keeps_its_text_and_names_the_file_it_leads_to(package: Path, tmp_path: Path) -> None:
    store = tmp_path / "store" / "a.py"
    store.parent.mkdir()
    store.write_bytes(b"a\n")
    os.symlink("../../../store/a.py", package / "srt" / "a.py")
    found = links.target(package, package / "srt" / "a.py")
    assert found == links.Target(package / "srt" / "a.py", link="../../../store/a.py", store_file=store)
    assert links.identity(package / "srt" / "a.py") == "link:../../../store/a.py"


def test_a_chain_of_links_inside_the_package_ends_at_the_package_file(package: Path) -> None:
    (package / "real.py").write_bytes(b"a\n")
    (package / "srt" / "hop.py").symlink_to(package / "real.py")
    (package / "srt" / "a.py").symlink_to("hop.py")
    assert links.target(package, package / "srt" / "a.py") == links.Target(package / "real.py")


def test_a_folder_linked_out_of_the_package_is_refused(package: Path, tmp_path: Path) -> None:
    (tmp_path / "store" / "layers").mkdir(parents=True)
    (package / "srt" / "layers").symlink_to(tmp_path / "store" / "layers")
    with pytest.raises(EnvironmentProblem) as refused:
        links.target(package, package / "srt" / "layers" / "a.py")
    assert str(refused.value) == (
        f"{package}/srt/layers/a.py: its folder is a link to {tmp_path}/store/layers, outside the sglang package "
        f"{package}; sm120patch writes only this environment's own files, never into a folder it links to. "
        "Nothing was written. Install sglang with copied files (uv: --link-mode=copy) to patch it"
    )


def test_a_link_to_itself_is_the_name_to_replace_not_followed_for_ever(package: Path) -> None:
    (package / "srt" / "a.py").symlink_to("a.py")  # a loop: its real path is itself
    assert links.target(package, package / "srt" / "a.py") == links.Target(package / "srt" / "a.py")


def test_a_missing_file_shares_nothing(package: Path) -> None:
    assert links.target(package, package / "srt" / "gone.py") == links.Target(package / "srt" / "gone.py", shared=0)


def test_identity_is_a_files_hash_or_none(package: Path) -> None:
    (package / "a.py").write_bytes(b"a\n")
    assert links.identity(package / "a.py") == sha256(b"a\n")
    assert links.identity(package / "missing.py") is None
    assert links.identity(package / "srt") is None


def test_recovery_names_a_link_it_did_not_expect_by_its_whole_text(package: Path) -> None:
    """A journal's link entry, and the name now a link somewhere else: left as is, and the
    message shows both links whole."""
    (package / "a.py").symlink_to("/elsewhere/a.py")
    state = StateDir(package)
    entry = Entry(
        "a.py", str(package / "a.py"), sha256(b"patched\n"), "link:/store/a.py", "backups/a.py", "/store/a.py"
    )
    with pytest.raises(NotAsAsked, match=r"neither the version before \([0-9a-f]{12}\) nor after \(link:/store/a.py\)"):
        _finish(state, Journal(Op.REVERT, [entry], None))
    assert os.readlink(package / "a.py") == "/elsewhere/a.py"


def test_a_journal_keeps_a_link_entry_and_leaves_a_file_entry_as_older_journals_had_it() -> None:
    relink = Entry("a.py", "/site/sglang/a.py", "b" * 64, "link:/store/a.py", "backups/a.py", "/store/a.py")
    replace = Entry("b.py", "/site/sglang/b.py", "b" * 64, "a" * 64, "staged/b.py")
    written = Journal(Op.REVERT, [relink, replace], None).to_json()
    assert written["entries"][0]["link"] == "/store/a.py" and "link" not in written["entries"][1]
    assert Journal.from_json(written).entries == [relink, replace]


def test_a_link_text_that_now_names_a_folder_leads_to_no_release_file(package: Path, tmp_path: Path) -> None:
    """The installer's cache rebuilt with a folder where the file was: revert cannot put the
    link back (it would lead to no file), so it restores the backup as a file of its own."""
    (tmp_path / "store" / "a.py").mkdir(parents=True)  # a folder where the cached file was
    assert links.leads_to(package / "srt" / "a.py", "../../../store/a.py", sha256(b"a\n")) is False


def test_a_link_text_that_leads_to_the_release_file_is_put_back(package: Path, tmp_path: Path) -> None:
    store = tmp_path / "store" / "a.py"
    store.parent.mkdir()
    store.write_bytes(b"a\n")
    assert links.leads_to(package / "srt" / "a.py", "../../../store/a.py", sha256(b"a\n")) is True
    assert links.leads_to(package / "srt" / "a.py", "../../../store/a.py", sha256(b"b\n")) is False


def test_a_file_that_cannot_be_read_is_an_error_not_nothing(package: Path) -> None:
    """Only a folder really there holds nothing: an EISDIR from reading a file is an I/O error."""
    (package / "a.py").write_bytes(b"a\n")
    unreadable = mock.patch.object(Path, "read_bytes", side_effect=IsADirectoryError(21, "Is a directory"))
    with unreadable, pytest.raises(IsADirectoryError):
        links.identity(package / "a.py")
