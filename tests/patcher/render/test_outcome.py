"""What a command found and did, as the reports read it: a file's standing against the
release's RECORD, the saved state's summary, and the diff of what was (or would be) written."""

from __future__ import annotations

from pathlib import Path

from sm120patch.errors import ExitCode
from sm120patch.patcher.outcome import CheckedBy, Command, FileStatus, Outcome, Recorded, StateSummary
from sm120patch.sglang.tree import InstallKind, SglangTree

TREE = SglangTree(Path("/site/sglang"), "0.5.11", InstallKind.WHEEL, None, "a test")


def test_the_words_scripts_read() -> None:
    """``command``, ``recorded`` and ``checked_by`` in the JSON output."""
    assert [c.value for c in Command] == ["apply", "verify", "revert", "list"]
    assert [r.value for r in Recorded] == ["patched", "original"]
    assert [c.value for c in CheckedBy] == ["structure", "hash"]


def test_a_file_is_pristine_when_its_hash_is_the_records() -> None:
    assert FileStatus("a.py", "aa", "aa", None).pristine is True
    assert FileStatus("a.py", "aa", "bb", None).pristine is False
    assert FileStatus("a.py", None, "bb", None).pristine is False  # gone: not the release's
    assert FileStatus("a.py", "aa", None, None).pristine is None  # the RECORD cannot say
    assert FileStatus("a.py", None, None, None).pristine is None


def test_a_file_is_checked_by_its_structure_unless_said_otherwise() -> None:
    assert FileStatus("a.py", "aa", "aa", Recorded.PATCHED).checked_by is CheckedBy.STRUCTURE


def test_the_saved_state_summary_as_json_is_a_copy() -> None:
    summary = StateSummary("/s/.sm120patch", False, None, None, True, ["a.py"], True)
    data = summary.to_json()
    assert data == {
        "dir": "/s/.sm120patch",
        "present": False,
        "sglang_version": None,
        "tool_version": None,
        "stale": True,
        "files": ["a.py"],
        "interrupted": True,
    }
    data["present"] = True
    assert summary.present is False


def test_an_outcome_starts_with_nothing_found_or_done_each_its_own() -> None:
    first, second = (Outcome(Command.VERIFY, TREE, ExitCode.OK, "ok") for _ in range(2))
    assert (first.plan, first.state, first.runtime) == (None, None, None)
    assert first.notes == first.warnings == first.written == first.changes == first.files == []
    first.notes.append("x")
    assert second.notes == [] and first.diff == ""


def test_the_diff_is_each_changed_file_in_order() -> None:
    outcome = Outcome(
        Command.APPLY, TREE, ExitCode.OK, "ok", changes=[("b.py", b"1\n", b"2\n"), ("a.py", b"x\n", b"x\ny\n")]
    )
    assert outcome.diff == (
        "--- a/sglang/b.py\n+++ b/sglang/b.py\n@@ -1 +1 @@\n-1\n+2\n"
        "--- a/sglang/a.py\n+++ b/sglang/a.py\n@@ -1 +1,2 @@\n x\n+y\n"
    )
