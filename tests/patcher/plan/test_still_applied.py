"""plan.left_out.still_applied: the note an apply prints where ``--only`` / ``--skip`` leave out
patches an earlier apply applied: those patches named, and the commands that take them out,
whose ``--skip`` names every patch left out (applied or not); and where ``left_out`` names a
patch left out.  The note on the miniature
release, followed as printed: tests/cli/test_left_out_patches_and_strict.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan.left_out import left_out as left_out_of
from sm120patch.patcher.plan.left_out import still_applied
from sm120patch.patcher.plan.types import Evidence, PatchReport, Plan
from sm120patch.sglang.tree import InstallKind, SglangTree

TREE = SglangTree(Path("/site/sglang"), "0.5.11", InstallKind.WHEEL, None, "a test")


def left_out(*states: tuple[str, State]) -> Plan:
    return Plan(TREE, [], left_out=[PatchReport(pid, "", (), "srt/f.py", state, "") for pid, state in states])


def test_nothing_left_out_applied_says_nothing() -> None:
    assert still_applied(left_out(("workspace-preflight", State.SKIPPED))) == []


@pytest.mark.parametrize(
    ("states", "start", "end"),
    [
        (
            [("server-args-auto-enable", State.APPLIED), ("workspace-preflight", State.SKIPPED)],
            "server-args-auto-enable stays applied: ",
            "`sm120patch apply --skip server-args-auto-enable,workspace-preflight` takes it out",
        ),
        (
            [("server-args-auto-enable", State.APPLIED), ("communicator-flag", State.APPLIED)],
            "server-args-auto-enable, communicator-flag stay applied: ",
            "`sm120patch apply --skip server-args-auto-enable,communicator-flag` takes them out",
        ),
    ],
    ids=["one", "two"],
)
def test_the_applied_ones_are_named_and_the_apply_skips_every_one_left_out(
    states: list[tuple[str, State]], start: str, end: str
) -> None:
    (note,) = still_applied(left_out(*states))
    assert note.startswith(start) and note.endswith(end)
    assert "`sm120patch revert`, then " in note


def test_a_patch_left_out_with_no_clause_found_is_named_by_its_file() -> None:
    """A left-out patch whose target the release lacks has no line nor function to name: its
    file and ``<module>``; one with evidence, the first line of it and its function."""
    bare = PatchReport("workspace-preflight", "", (), "srt/f.py", State.SKIPPED, "")
    found = PatchReport(
        "server-args-auto-enable", "", (), "srt/g.py", State.SKIPPED, "", "ServerArgs.adjust", [Evidence(7, "if x:")]
    )
    first, second = left_out_of(Plan(TREE, [], left_out=[bare, found]))
    assert (first.where, second.where) == ("sglang/srt/f.py <module>", "sglang/srt/g.py:7 ServerArgs.adjust")
