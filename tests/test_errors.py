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
