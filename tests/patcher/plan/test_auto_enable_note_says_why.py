"""plan/auto_enable.auto_enable_note: the form in force says why it is that one: the option
that asked for it, sglang's default (TP 2), or, for the SM120 term alone that no one asked
for, a hand edit."""

from __future__ import annotations

import pytest

from sm120patch.patcher.kit.auto_enable_tp import ANY, AT_ANY, AT_TP2, TP2
from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan.auto_enable import PATCH_ID, auto_enable_note
from sm120patch.patcher.plan.types import PatchReport


def note(form: str, asked: str | None) -> str:
    """The note for an applied auto-enable whose detail names ``form``."""
    report = PatchReport(PATCH_ID, "", (), "srt/server_args.py", State.APPLIED, f"{form} in _handle_model_specific")
    said = auto_enable_note([report], asked)
    assert said is not None
    return said


@pytest.mark.parametrize(("asked", "why"), [(TP2, "as `--auto-enable-tp 2` asked"), (None, "the default")])
def test_the_tp2_form_names_who_asked_for_it(asked: str | None, why: str) -> None:
    assert note(AT_TP2, asked).startswith(f"{AT_TP2} for the models sglang lists ({why}: ")


@pytest.mark.parametrize(
    ("asked", "why"),
    [(ANY, "as `--auto-enable-tp any` asked"), (None, "the code has the SM120 term alone: a hand edit?")],
)
def test_the_any_tp_form_names_who_asked_for_it_or_a_hand_edit(asked: str | None, why: str) -> None:
    assert note(AT_ANY, asked).startswith(f"{AT_ANY} for the models sglang lists ({why}); ")
