"""apply names the form of the auto-enable in force (TP 2 or any TP) as the closing news of
an apply that did what was asked; an apply refused (``--strict`` over a warning) ends on its
refusal, not on a form it did not write, though the tree already holds it."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_doctor_recalls_the_sweep import applied_with_a_gate_no_patch_owns
from tests.support.cli import jrun

#: What the note of the form in force ends with (plan/auto_enable.auto_enable_note).
WIDEN_HINT = "`sm120patch apply --auto-enable-tp any` widens it to every TP"


def test_a_strict_refusal_of_a_patched_tree_has_no_auto_enable_note(mini: Path) -> None:
    applied_with_a_gate_no_patch_owns(mini)
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert code == 0 and any(WIDEN_HINT in m for m in data["messages"])
    code, data = jrun("apply", "--sglang-path", str(mini), "--strict")
    assert (code, data["code"], data["written"]) == (1, "strict", [])
    assert not any(WIDEN_HINT in m for m in data["messages"])
