"""errors: each raisable error carries its exit code; the base class carries none."""

from __future__ import annotations

import pytest

from sm120patch.errors import EnvironmentProblem, ExitCode, InternalError, NotAsAsked, ToolError


@pytest.mark.parametrize(
    ("error", "code"),
    [(NotAsAsked, ExitCode.NOT_AS_ASKED), (EnvironmentProblem, ExitCode.ENVIRONMENT), (InternalError, 70)],
)
def test_each_error_carries_its_exit_code(error: type[ToolError], code: int) -> None:
    with pytest.raises(ToolError) as info:
        raise error("message")
    assert info.value.exit_code == code
    assert str(info.value) == "message"


def test_the_base_class_is_not_raised_and_has_no_code() -> None:
    assert "exit_code" not in vars(ToolError)
    with pytest.raises(TypeError) as raised:
        ToolError("which exit code?")
    assert str(raised.value) == "raise a subclass of ToolError: the subclass says the exit code"


def test_a_new_error_must_say_its_exit_code() -> None:
    with pytest.raises(TypeError, match="must set exit_code"):

        class Vague(ToolError):
            pass

    class Narrower(EnvironmentProblem):  # inherits a concrete error's code
        pass

    assert Narrower("x").exit_code is ExitCode.ENVIRONMENT


def test_every_stable_code_is_listed_with_its_meaning_in_the_reference() -> None:
    from pathlib import Path

    from sm120patch.errors import CODES

    reference = (Path(__file__).resolve().parents[1] / "docs" / "reference.md").read_text()
    assert [code for code in CODES if f"| `{code}` | {CODES[code]} |" not in reference] == []


def test_an_error_carries_its_code_and_an_unknown_code_is_refused() -> None:
    import pytest

    from sm120patch.errors import EnvironmentProblem, InternalError, NotAsAsked, coded

    assert EnvironmentProblem("x").code == "environment"
    assert NotAsAsked("x").code == "not-as-asked"
    assert InternalError("x").code == "internal-error"
    assert EnvironmentProblem("x", code="locked").code == "locked"
    assert coded("drift", "the gate moved") == "[drift] the gate moved"
    with pytest.raises(ValueError, match="unknown code 'nope'"):
        EnvironmentProblem("x", code="nope")
    with pytest.raises(ValueError, match="unknown code 'nope'"):
        coded("nope", "x")
