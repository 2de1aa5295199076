"""Whether a saved state is this tree's: the same release by version, or the files it names
still hold what apply wrote.

A version alone does not say it: a checkout's version appears once ``pip install -e`` writes
``_version.py``, or moves when a tag is put on the same commit, and the tree is the same one.
What the state recorded of its own writing (``sha256_after`` of each file) is what says the
backups beside it are the originals of the files in place: one file that holds it is enough
(the others may hold their original again, or a hand edit since, which revert keeps aside
under ``--force``); an upgrade or a reinstall leaves none.  Where RECORD lists the files, a
state saved under another version must also have backed up this release's own files.  The
state lives inside the package directory, so a tree moved whole (a Docker layer, an rsync)
carries it along: the recorded ``sglang_location`` is shown, the hashes decide.
"""

from __future__ import annotations

from sm120patch.patcher.transaction.fsutil import sha256_file
from sm120patch.patcher.transaction.state_dir import Manifest
from sm120patch.sglang.tree import SglangTree


def holds_its_writing(tree: SglangTree, manifest: Manifest) -> bool:
    """Whether at least one file ``manifest`` names holds what apply wrote into it."""
    return any(sha256_file(tree.path(rel)) == rec.sha256_after for rel, rec in manifest.files.items())


def not_this_release(tree: SglangTree, manifest: Manifest, kept: bool = False) -> str | None:
    """Why ``manifest``'s backups may not be this release's own files, or None.  A state of this
    release by version needs no more; one of another version must have backed up the files
    RECORD lists, byte for byte.  ``kept``: a state set aside (``stale-*/``), which without a
    RECORD to check is taken only if it knew no version (a checkout before its version file)."""
    if tree.same_release(manifest.sglang_version):
        return None
    old = manifest.sglang_version or "(unknown version)"
    if tree.record.prefix is not None:
        foreign = [rel for rel, rec in sorted(manifest.files.items()) if tree.record.sha256(rel) != rec.sha256_before]
        if foreign:
            return (
                f"it is the state of sglang {old}, and its backups of {', '.join(foreign)} are not "
                f"sglang {tree.version}'s files (RECORD)"
            )
        return None
    if kept and manifest.sglang_version is not None:
        return (
            f"it is the state of sglang {old}, not {tree.version or '(unknown version)'}, and there is no RECORD "
            "to check its backups against"
        )
    return None


def same_tree(tree: SglangTree, manifest: Manifest) -> bool:
    """Whether ``manifest`` is the saved state of this tree: its release, by version, or its
    files, by what apply wrote into them (a version that appeared or moved since)."""
    if tree.same_release(manifest.sglang_version):
        return True
    return holds_its_writing(tree, manifest) and not_this_release(tree, manifest) is None
