"""The contract every registered patch meets, checked once for all of them (Fixit's one
generated test for all rules): a new patch module is held to it without a line of test.

* Each named example (``Patch.examples``, Fixit's VALID/INVALID with names) gives its state
  and detail; a pending one gives exactly its ``after``, which compiles, changes (by the
  independent ``ast`` comparison) only what the patch's ``edits`` says, and re-checks as
  applied; no example leaves anything to apply, and its evidence is on its lines.
* The patch describes itself the way ``list --docs`` and README's table need (a summary, a
  docstring that says why and when to remove it), anchors only in files of the layout, and
  has distinctly named examples that cover pending and drift.
* Each patch it requires binds a name in the same files (that is why it is required).
* Slow tier: what the full cycle finds on one real release per era is what the patch's own
  anchor row for that release says.

What is particular to one patch lives in tests/patcher/patches/test_<patch>.py.
"""

from __future__ import annotations

import libcst as cst
import pytest

from sm120patch.patcher.commands.self_test import run_example
from sm120patch.patcher.kit.model import Edit, Example, Patch, State
from sm120patch.patcher.plan.evidence import generate
from sm120patch.patcher.plan.registry import all_patches, by_id, provided_for
from sm120patch.sglang.layout import FILES, kept_in
from tests.support.patch_checks import ERAS, every_example
from tests.support.realtrees import intended_changes

#: Every file a patch may look in (sm120patch.sglang.layout).

PATCHES = [pytest.param(patch, id=patch.id) for patch in all_patches()]


@pytest.mark.parametrize(("patch", "example"), every_example())
def test_example_gives_its_state_and_code(patch: Patch, example: Example) -> None:
    """What ``sm120patch self-test`` runs for users, and the evidence lines besides."""
    assert run_example(patch, example) is None
    ctx = example.context(provided_for(patch))
    module = cst.parse_module(example.before)
    finding = patch.check(module, ctx)
    if finding.apply is not None:
        module = finding.apply(module)
        finding = patch.check(module, ctx)
    if example.evidence is not None:
        _, (lines,) = generate(module, [finding.evidence])
        assert [e.line for e in lines] == list(example.evidence)


@pytest.mark.parametrize(("patch", "example"), every_example(State.PENDING))
def test_a_pending_example_names_the_same_place_once_applied(patch: Patch, example: Example) -> None:
    """The report and the manifest name where a patch acts (``where``: the function or the
    constant) and show its lines, the same before the change (a dry run) and after it."""
    ctx = example.context(provided_for(patch))
    module = cst.parse_module(example.before)
    pending = patch.check(module, ctx)
    assert pending.apply is not None
    applied = patch.check(pending.apply(module), ctx)
    assert applied.where == pending.where
    assert bool(applied.evidence) == bool(pending.evidence)


@pytest.mark.parametrize(("patch", "example"), every_example(State.PENDING))
def test_a_pending_example_makes_only_the_edit_the_patch_declares(patch: Patch, example: Example) -> None:
    """Read with ``ast``, not by the patch's own matchers: the edit its ``edits`` names, and
    besides it at most the helper import."""
    assert example.after is not None
    changes = set(intended_changes(example.before.encode(), example.after.encode()))
    assert patch.edits.value in changes and changes - {Edit.IMPORT.value} <= {patch.edits.value}, changes


@pytest.mark.parametrize("patch", PATCHES)
def test_describes_itself_and_anchors_in_known_files(patch: Patch) -> None:
    """A summary for the table, a docstring that says why and when to remove it, and anchors
    only in files of the layout."""
    assert patch.summary and len(patch.doc.splitlines()) > 5
    for word in ("Why", "Remove when"):
        assert word in patch.doc, word
    assert patch.anchors and {a.file for a in patch.anchors} <= FILES


@pytest.mark.parametrize("patch", PATCHES)
def test_examples_are_distinct_and_cover_pending_and_drift(patch: Patch) -> None:
    names = [e.name for e in patch.examples]
    assert len(names) == len(set(names)), names
    states = {e.state for e in patch.examples}
    assert State.PENDING in states and State.DRIFT in states, states


@pytest.mark.parametrize("patch", PATCHES)
def test_requires_only_patches_that_bind_its_names(patch: Patch) -> None:
    """Each required patch binds a name, in the same files as ``patch``: the name ``patch``
    adds would not resolve without it."""
    registry = by_id()
    for dep in patch.requires:
        assert registry[dep].provides, f"{patch.id} requires {dep}, which binds no name"
        assert registry[dep].files == patch.files, (dep, registry[dep].files, patch.files)
    assert bool(provided_for(patch)) == bool(patch.requires)


@pytest.mark.slow  # real sglang releases from the package index
@pytest.mark.parametrize(
    ("patch", "version"),
    [pytest.param(patch, version, id=f"{patch.id}/{version}") for patch in all_patches() for version in ERAS],
)
def test_real_release_shows_its_anchor_row(release_cycle, patch: Patch, version: str) -> None:
    """The cycle (run once per release, shared with tests/patcher/plan/test_release_matrix.py) shows
    the state of the patch's anchor row for ``version`` (no row: not needed), and where
    pending, the patch's edit in the row's file (with the helper import where the row says so)."""
    cycle = release_cycle(version)
    anchor = patch.anchor_at(version)
    state = anchor.expect if anchor else State.NOT_NEEDED
    assert cycle["exit_code"] == 0
    assert cycle["states"][patch.id] == state.value
    if anchor is not None and state is State.PENDING:
        kinds = set(cycle["changes"].get(anchor.file, ()))
        assert patch.edits.value in kinds, (anchor.file, kinds)
        if anchor.imports:
            assert Edit.IMPORT.value in kinds, (anchor.file, kinds)


@pytest.mark.parametrize("patch", PATCHES)
def test_each_row_names_the_file_the_layout_table_gives_for_its_releases(patch: Patch) -> None:
    """sglang.layout.KEPT is the one table of where sglang keeps each target: a row that says
    another file for its releases is a layout stated twice."""
    for row in patch.anchors:
        ends = [row.seen.first, *([row.seen.last] if row.seen.last else [])]
        assert {kept_in(patch.place, end) for end in ends} == {row.file}, (row, patch.place)
