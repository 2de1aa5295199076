"""doctor on a tree apply left trusted takes the sweep of SM checks apply recorded: the
package (some 70 MB in 0.5.23) is not read again, and the unknown gate is still reported."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

from sm120patch.patcher.exports import tree_states
from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan import gate_sweep
from sm120patch.sglang.tree import from_directory
from tests.cli.test_unknown_sm_checks import NEW_MODULE, NEW_SOURCE
from tests.support.cli import jrun


def applied_with_a_gate_no_patch_owns(mini: Path) -> None:
    (mini / NEW_MODULE).parent.mkdir(parents=True)
    (mini / NEW_MODULE).write_text(NEW_SOURCE)
    assert jrun("apply", "--sglang-path", str(mini))[0] == 0


def forbid_sweeping(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in for the sweep: reading the package again fails the test."""

    def no_sweep(*args: object) -> NoReturn:
        raise AssertionError("the package was swept again")

    monkeypatch.setattr(gate_sweep, "sweep", no_sweep)


def test_doctor_reports_the_recorded_gates_of_a_trusted_tree_without_sweeping_it(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    applied_with_a_gate_no_patch_owns(mini)
    forbid_sweeping(monkeypatch)
    states, warnings = tree_states(from_directory(mini))
    assert set(states.values()) <= {State.APPLIED, State.NOT_NEEDED}
    assert warnings == [
        f"[unknown-sm-check] an SM check this tool does not know: sglang/{NEW_MODULE}:6 FusedAllReduce.forward: "
        "not (is_sm90_supported() or is_sm100_supported())"
    ]


def test_the_recalled_sweep_is_the_sweep_apply_recorded(mini: Path) -> None:
    """What a trusted tree is judged by later is the whole record: the unknown gate, and the
    directories, files and kept files that tell whether the tree is still as it was swept."""
    from sm120patch.patcher.commands.planning import plan_tree
    from sm120patch.patcher.plan.registry import all_patches
    from sm120patch.patcher.transaction.state_dir import StateDir

    applied_with_a_gate_no_patch_owns(mini)
    tree, state = from_directory(mini), StateDir(mini)
    found = gate_sweep.recalled(tree, state, state.load())
    fresh = gate_sweep.sweep(tree, plan_tree(tree, list(all_patches()), change=False))
    assert found is not None and found.recalled and not fresh.recalled
    assert (found.unknown, found.unread) == (fresh.unknown, fresh.unread)
    # the record keeps each name once, in its own order
    assert [sorted(f) for f in (found.dirs, found.files, found.kept)] == [
        sorted(f) for f in (fresh.dirs, fresh.files, fresh.kept)
    ]
    assert found.dirs and found.files and found.kept  # a record that tells something
