"""doctor on a tree apply left trusted takes the sweep of SM checks apply recorded: the
package (some 70 MB in 0.5.23) is not read again, and the unknown gate is still reported."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan import gate_sweep
from sm120patch.patcher.states import tree_states
from sm120patch.sglang.tree import from_directory
from tests.commands.test_unknown_sm_checks import NEW_MODULE, NEW_SOURCE
from tests.support.cli import jrun


def test_doctor_reports_the_recorded_gates_of_a_trusted_tree_without_sweeping_it(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (mini / NEW_MODULE).parent.mkdir(parents=True)
    (mini / NEW_MODULE).write_text(NEW_SOURCE)
    assert jrun("apply", "--sglang-path", str(mini))[0] == 0

    def no_sweep(*args: object) -> NoReturn:  # stand-in for the sweep: reading the package again fails the test
        raise AssertionError("the package was swept again")

    monkeypatch.setattr(gate_sweep, "sweep", no_sweep)
    states, warnings = tree_states(from_directory(mini))
    assert set(states.values()) <= {State.APPLIED, State.NOT_NEEDED}
    assert warnings == [
        f"an SM check this tool does not know: sglang/{NEW_MODULE}:6 FusedAllReduce.forward: "
        "not (is_sm90_supported() or is_sm100_supported())"
    ]
