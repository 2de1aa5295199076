"""Whether a saved state of another sglang version may be this tree's (transaction/identity.py):
RECORD decides where the tree has one; without one, a state kept aside is refused when it
knew a version, while the saved state in place is left to the files apply wrote."""

from __future__ import annotations

from pathlib import Path

from sm120patch.patcher.transaction.identity import not_this_release
from sm120patch.patcher.transaction.state_dir import FileRecord, Manifest
from sm120patch.sglang.tree import InstallKind, SglangTree, from_directory
from tests.support.mini_sglang import COMM, FUSION, write_mini_sglang


def backed_up(*rels: str, version: str | None) -> Manifest:
    """A state of sglang ``version`` whose backups of ``rels`` are no file RECORD lists."""
    files = {rel: FileRecord("0" * 64, "1" * 64, ["p"], f"backups/{rel}") for rel in rels}
    return Manifest(version, "/site/sglang", files=files)


def checkout(tmp_path: Path, version: str | None) -> SglangTree:
    """A tree without install metadata (a checkout): no RECORD."""
    return SglangTree(tmp_path / "sglang", version, InstallKind.PATH, None, "--sglang-path")


def test_backups_record_disowns_are_named_each_of_a_state_that_knew_no_version(tmp_path: Path) -> None:
    tree = from_directory(write_mini_sglang(tmp_path / "site"))
    said = not_this_release(tree, backed_up(COMM, FUSION, version=None))
    assert said == (
        f"it is the state of sglang (unknown version), and its backups of {COMM}, {FUSION} are not "
        f"sglang {tree.version}'s files (RECORD)"
    )


def test_without_record_the_saved_state_is_left_to_the_files_a_kept_one_is_refused(tmp_path: Path) -> None:
    """The version of a checkout moves (a tag, ``pip install -e``) while its files stay: the
    saved state in place is judged by what apply wrote; one kept aside is not taken blind."""
    tree = checkout(tmp_path, "0.5.11")
    manifest = backed_up(COMM, version="0.5.10")
    assert not_this_release(tree, manifest) is None
    assert not_this_release(tree, manifest, kept=True) == (
        "it is the state of sglang 0.5.10, not 0.5.11, and there is no RECORD to check its backups against"
    )
    unversioned = checkout(tmp_path, None)
    assert not_this_release(unversioned, manifest, kept=True) == (
        "it is the state of sglang 0.5.10, not (unknown version), and there is no RECORD to check its backups against"
    )
    # A kept state that knew no version (saved before the checkout had one) is taken.
    assert not_this_release(tree, backed_up(COMM, version=None), kept=True) is None
