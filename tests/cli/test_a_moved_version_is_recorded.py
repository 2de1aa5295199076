"""apply over a saved state of this very tree: where the state names another version (a
checkout's tag moved, ``_version.py`` rewritten) apply records the tree's version and place
and says which version the state named; where it names this release, apply says nothing of
the kind (the miniature release, sglang 0.5.11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_fuse_up_to import LIMITED
from tests.cli.test_verify_and_apply_verdicts import applied, edit_manifest
from tests.support.cli import jrun
from tests.support.mini_sglang import COMM, FILES, write_mini_sglang

MOVED = "the saved state was written when this sglang read as"


def test_a_state_saved_under_another_version_names_it_and_records_this_tree(mini: Path) -> None:
    manifest = applied(mini)
    edit_manifest(manifest, sglang_version="0.5.10")  # the files still hold what apply wrote
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert (code, data["headline"]) == (0, "already applied: nothing to change")
    assert data["messages"][-1] == (
        f"{MOVED} 0.5.10; its files still hold what apply wrote, so it is this tree's state, now recorded as "
        "sglang 0.5.11"
    )
    saved = json.loads(manifest.read_text())
    # the next revert and verify find the state where it says it is
    assert (saved["sglang_version"], saved["sglang_location"]) == ("0.5.11", str(mini))
    assert (data["state"]["sglang_version"], data["state"]["stale"]) == ("0.5.11", False)  # as recorded now


def test_a_stale_record_of_this_release_is_rewritten_without_a_moved_version_note(mini: Path) -> None:
    """The record is of an older sm120patch (another fingerprint) but of this release: apply
    records it again and does not claim the version moved."""
    manifest = applied(mini)
    edit_manifest(manifest, fingerprint="0" * 64)
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert (code, data["headline"]) == (0, "already applied: nothing to change")
    assert json.loads(manifest.read_text())["fingerprint"] != "0" * 64  # recorded again
    assert not any(MOVED in line for line in data["messages"])


def test_an_apply_that_writes_over_a_state_saved_under_another_version_records_this_tree(mini: Path) -> None:
    """A first apply of one patch, the version moved, then the others: the state is this
    tree's (its files hold what the first apply wrote), so the apply that writes names the
    version it was saved under and records this one."""
    code, data = jrun("apply", "--sglang-path", str(mini), "--only", "server-args-auto-enable")
    assert code == 0, data
    manifest = mini / ".sm120patch" / "manifest.json"
    edit_manifest(manifest, sglang_version="0.5.10")
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert code == 0 and data["headline"].startswith("patched "), data
    assert (
        f"{MOVED} 0.5.10; its files still hold what apply wrote, so it is this tree's state, now recorded as "
        "sglang 0.5.11"
    ) in data["messages"]
    saved = json.loads(manifest.read_text())
    assert (saved["sglang_version"], saved["sglang_location"]) == ("0.5.11", str(mini))


def test_a_tree_changed_while_apply_waited_for_the_lock_is_planned_again_with_the_limit_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fake: ``_still_current`` answers that another run changed the files while this apply
    waited for the lock, so it plans again under the lock: with the --fuse-up-to asked."""
    from sm120patch.patcher.commands import apply

    mini = write_mini_sglang(tmp_path / "site", files={**FILES, COMM: LIMITED})
    monkeypatch.setattr(apply, "_still_current", lambda plan: False)
    code, data = jrun("apply", "--sglang-path", str(mini), "--fuse-up-to", "512")
    assert code == 0 and data["headline"].startswith("patched "), data
    assert json.loads((mini / ".sm120patch" / "manifest.json").read_text())["token_limit"]["limit"] == 512
    assert data["token_limit"]["in_force"] == 512
