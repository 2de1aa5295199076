"""verify's notes under its verdict: the version a moved state was written for, a cache
patched through its links beside a verdict of its own, and the recorded sweep of a trusted
tree taken as apply left it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.errors import ExitCode
from tests.cli.test_doctor_recalls_the_sweep import applied_with_a_gate_no_patch_owns, forbid_sweeping
from tests.cli.test_unknown_sm_checks import NEW_MODULE
from tests.cli.test_verify_and_apply_verdicts import applied, edit_manifest
from tests.support.cli import apply_all, jrun, verify_tree
from tests.support.mini_sglang import COMM, write_mini_sglang
from tests.support.shared_store import linked_site


def test_a_moved_version_is_named_as_the_saved_state_recorded_it(mini: Path) -> None:
    """The state names the version this sglang read as when apply wrote it: the one to look
    for in ``pip list`` history, not a placeholder."""
    edit_manifest(applied(mini), sglang_version="0.5.10")
    code, data = jrun("verify", "--sglang-path", str(mini))
    assert code == 0, data
    assert data["messages"][0].startswith("the saved state was written when this sglang read as 0.5.10; its files")


def test_a_patched_cache_is_still_named_when_verify_fails_for_another_reason(tmp_path: Path) -> None:
    """An older sm120patch wrote one file through uv's links into the cache; the others are
    the release's, so verify's verdict is "not patched", and the cache's line (with its fix)
    stays among the notes."""
    store = write_mini_sglang(tmp_path / "cache" / "archive-v0" / "abc123")
    patched = write_mini_sglang(tmp_path / "patched")
    assert apply_all(patched).exit_code == ExitCode.OK
    (store / COMM).write_bytes((patched / COMM).read_bytes())  # what the older tool left in the cache
    seen = verify_tree(linked_site(store.parent, tmp_path / "site"))
    assert seen.exit_code == ExitCode.NOT_AS_ASKED and seen.headline.startswith("not patched"), seen.headline
    cache = [note for note in seen.notes if "`uv cache clean sglang`" in note]
    assert len(cache) == 1 and cache[0].startswith(f"sglang/{COMM} "), seen.notes
    assert cache[0] == (
        f"sglang/{COMM} is a link into {store}, whose files differ from sglang 0.5.11's RECORD: the installer's "
        "cache holds patched files, written by an earlier sm120patch, shared by every environment linked to it. "
        "Clean it (uv: `uv cache clean sglang`), then reinstall sglang"
    )


def test_verify_of_a_trusted_tree_reports_the_recorded_gates_without_sweeping_it(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After apply, verify takes the sweep apply recorded: the package (some 70 MB in 0.5.23)
    is not read again, and the gate no patch owns is still a warning."""
    applied_with_a_gate_no_patch_owns(mini)
    forbid_sweeping(monkeypatch)
    seen = verify_tree(mini)
    assert seen.exit_code == ExitCode.OK, seen.headline
    assert [c["file"] for c in seen.sm_checks] == [f"sglang/{NEW_MODULE}"]
