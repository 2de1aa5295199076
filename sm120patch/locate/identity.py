"""Whether a saved state is this tree's: the same release by version, or the files it names
still hold what apply wrote.

A version alone does not say it: a checkout's version appears once ``pip install -e`` writes
``_version.py``, or moves when a tag is put on the same commit, and the tree is the same one.
What the state recorded of its own writing (``sha256_after`` of each file) is what says the
backups beside it are the originals of the files in place.  The state lives inside the
package directory, so a tree moved whole (a Docker layer, an rsync) carries it along: the
recorded ``sglang_location`` is shown, the hashes decide.
"""

from __future__ import annotations

from sm120patch.locate.tree import SglangTree
from sm120patch.transaction.fsutil import sha256_file
from sm120patch.transaction.state import Manifest


def written_in_place(tree: SglangTree, manifest: Manifest) -> bool:
    """Whether every file ``manifest`` names holds what apply wrote, or still what it backed up,
    and at least one holds what apply wrote: an upgrade or reinstall leaves none of them."""
    seen = [(sha256_file(tree.path(rel)), rec) for rel, rec in manifest.files.items()]
    return any(now == rec.sha256_after for now, rec in seen) and all(
        now in (rec.sha256_after, rec.sha256_before) for now, rec in seen
    )


def same_tree(tree: SglangTree, manifest: Manifest) -> bool:
    """Whether ``manifest`` is the saved state of this tree: its release, by version, or its
    files, by what apply wrote into them (a version that appeared or moved since)."""
    return tree.same_release(manifest.sglang_version) or written_in_place(tree, manifest)
