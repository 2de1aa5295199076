"""docs/safety.md says what a full revert leaves in the tree: nothing, lock file included (it
said the lock stays after revert, while revert removes ``.sm120patch``)."""

from __future__ import annotations

from pathlib import Path

from sm120patch.sglang.tree import DIRNAME
from tests.support.cli import apply_all, revert_tree
from tests.support.mini_sglang import write_mini_sglang

SAFETY = Path(__file__).resolve().parents[1] / "docs" / "safety.md"


def test_a_full_revert_leaves_no_state_and_the_page_says_so(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site")
    apply_all(package)
    assert (package / DIRNAME / "lock").exists()
    revert_tree(package)
    assert not (package / DIRNAME).exists()
    lock = next(line for line in SAFETY.read_text().splitlines() if line.startswith("lock "))
    assert "a full revert removes it" in lock and "stays" not in lock
