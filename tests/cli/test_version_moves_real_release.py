"""A real sglang 0.5.23 checkout whose version moves while it is patched, in each order a user
meets it: apply before ``pip install -e`` writes ``_version.py``; apply, then a ``v0.5.23``
tag; apply, then a version change.  Each time the saved state is the tree's own (the files
hold what apply wrote): verify never says "replaced" beside "applied", and revert restores
every file byte for byte from it, with nothing left in a folder no command reaches."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import jrun
from tests.support.realtrees import copy_release, installed_release, record_hashes, sha256

pytestmark = pytest.mark.slow  # a real sglang release from the package index

VERSION = "0.5.23"


def checkout(root: Path) -> Path:
    """An unpacked 0.5.23 source tree before ``pip install -e``: ``python/sglang`` with no
    install metadata and no ``_version.py`` (setuptools-scm writes it on install; the
    version is otherwise read from git).  Its package dir."""
    package = copy_release(VERSION, root / "python")
    for dist in package.parent.glob("sglang-*.dist-info"):
        shutil.rmtree(dist)
    (package / "_version.py").unlink()  # a hard link to the cache: unlinked, never written
    return package


def version_file(package: Path, version: str) -> None:
    """``_version.py`` as setuptools-scm writes it on ``pip install -e`` (a new file: the
    old one, a hard link into the cached tree, is unlinked first)."""
    path = package / "_version.py"
    path.unlink(missing_ok=True)
    released = (installed_release(VERSION) / "sglang" / "_version.py").read_text()
    path.write_text(released.replace(f"'{VERSION}'", f"'{version}'"))


def apply_unknown(package: Path) -> list[str]:
    code, applied = jrun("apply", "--sglang-path", str(package))
    assert code == 0 and applied["sglang"]["version"] is None, applied["headline"]
    assert len(applied["written"]) == 3
    return [rel.removeprefix("sglang/") for rel in applied["written"]]


def assert_restored(package: Path, rels: list[str]) -> None:
    """Each file is the release's, by the RECORD of the cached install (read independently)."""
    record = record_hashes(installed_release(VERSION) / "sglang")
    assert {rel: sha256(package / rel) for rel in rels} == {rel: record[rel] for rel in rels}
    assert not (package / ".sm120patch").exists()


def assert_verified_as_own(package: Path, version: str) -> None:
    code, verified = jrun("verify", "--sglang-path", str(package))
    assert (code, verified["headline"], verified["sglang"]["version"]) == (0, "all patches applied", version)
    assert verified["state"]["stale"] is False
    assert not any("replaced" in message for message in verified["messages"])


def test_apply_before_the_version_file_then_revert(tmp_path: Path) -> None:
    package = checkout(tmp_path / "sglang-src")
    rels = apply_unknown(package)
    version_file(package, VERSION)
    assert_verified_as_own(package, VERSION)
    code, again = jrun("apply", "--sglang-path", str(package))
    assert (code, again["headline"], again["written"]) == (0, "already applied: nothing to change", [])
    assert again["state"]["sglang_version"] == VERSION  # the state now names the version it found
    code, reverted = jrun("revert", "--sglang-path", str(package))
    assert (code, reverted["headline"]) == (0, "restored 3 files byte for byte; state removed")
    assert_restored(package, rels)
    code, forced = jrun("revert", "--force", "--sglang-path", str(package))
    assert code == 0 and "files as released" not in forced["headline"], forced["headline"]
    assert forced["headline"].startswith("nothing to revert: no saved state, and no sm120patch patch is in the files")


def git(root: Path, *args: str) -> str:
    command = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def test_apply_then_a_tag_then_revert(tmp_path: Path) -> None:
    root = tmp_path / "sglang-src"
    package = checkout(root)
    git(root, "init", "-q")
    git(root, "add", "python/sglang/srt/layers", "python/sglang/srt/arg_groups")
    git(root, "commit", "-q", "-m", "sglang 0.5.23")
    rels = apply_unknown(package)  # no tag yet: git describe names no release
    assert git(root, "status", "--porcelain", "--untracked-files=no").count(" M ") == 3
    git(root, "tag", f"v{VERSION}")
    assert_verified_as_own(package, VERSION)
    code, reverted = jrun("revert", "--sglang-path", str(package))
    assert (code, reverted["headline"]) == (0, "restored 3 files byte for byte; state removed")
    assert_restored(package, rels)
    assert git(root, "status", "--porcelain", "--untracked-files=no") == ""


def test_apply_then_a_version_change_then_revert_force(tmp_path: Path) -> None:
    package = checkout(tmp_path / "sglang-src")
    version_file(package, VERSION)
    code, applied = jrun("apply", "--sglang-path", str(package))
    assert code == 0 and applied["sglang"]["version"] == VERSION and len(applied["written"]) == 3
    rels = [rel.removeprefix("sglang/") for rel in applied["written"]]
    version_file(package, "0.5.24.dev3")  # another release by its version; the same files
    assert_verified_as_own(package, "0.5.24.dev3")
    code, reverted = jrun("revert", "--force", "--sglang-path", str(package))
    assert (code, reverted["headline"]) == (0, "restored 3 files byte for byte; state removed")
    assert_restored(package, rels)


def test_a_state_an_earlier_sm120patch_set_aside_is_restored_from_where_it_was_kept(tmp_path: Path) -> None:
    """Where an earlier sm120patch left a user: the state of "sglang (unknown version)" moved to
    ``stale-unknown-*/`` once the version appeared, the three files still patched.  revert
    restores them from there, byte for byte, and names the folder; nothing of it is left."""
    from sm120patch.patcher.transaction.state_dir import StateDir

    package = checkout(tmp_path / "sglang-src")
    rels = apply_unknown(package)
    aside = StateDir(package).set_aside("unknown")
    version_file(package, VERSION)
    code, forced = jrun("revert", "--force", "--dry-run", "--sglang-path", str(package))
    assert (code, forced["headline"]) == (
        0,
        f"dry run: would restore 3 files from the state kept aside in {aside}; nothing written",
    )
    code, reverted = jrun("revert", "--sglang-path", str(package))
    assert (code, reverted["headline"]) == (
        0,
        f"restored 3 files byte for byte from the state of sglang (unknown version) kept aside in {aside}; "
        "state removed",
    )
    assert_restored(package, rels)
