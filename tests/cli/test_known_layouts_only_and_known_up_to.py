"""The options every tree command reads before it looks for sglang (cli/run._known_layouts_only):
``--known-layouts-only`` turns role finds off for that command only, and
``SM120PATCH_KNOWN_UP_TO`` must name a release (a usage error naming it otherwise)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.kit.model import KNOWN_UP_TO, ROLE_FINDS
from sm120patch.runner import locate
from tests.support.cli import jrun


def test_known_layouts_only_turns_role_finds_off_for_its_command_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off while the command runs (as it looks for sglang); on again once it is done, for the
    next command run in the same process."""
    seen = []

    def no_sglang(**kwargs: object) -> None:
        seen.append(ROLE_FINDS.get())
        raise EnvironmentProblem("no sglang here", code="no-sglang")

    monkeypatch.setattr(locate, "locate", no_sglang)
    code, data = jrun("verify", "--known-layouts-only", "--sglang-path", str(tmp_path))
    assert (code, data["code"], seen) == (2, "no-sglang", [False])
    assert ROLE_FINDS.get() is True
    jrun("verify", "--sglang-path", str(tmp_path))
    assert seen == [False, True]


@pytest.mark.parametrize("raw", ["banana", "0.5.x"])
def test_a_known_up_to_that_names_no_release_is_a_usage_error_naming_it(tmp_path: Path, raw: str) -> None:
    code, data = jrun("verify", "--sglang-path", str(tmp_path / "none"), env={KNOWN_UP_TO: raw})
    assert (code, data["code"]) == (2, "usage")
    assert data["error"].startswith(f"{KNOWN_UP_TO}={raw!r} is not a release number"), data["error"]


def test_a_known_up_to_that_names_a_release_is_taken(tmp_path: Path) -> None:
    """The command goes on to look for sglang (and finds none here)."""
    code, data = jrun("verify", "--sglang-path", str(tmp_path / "none"), env={KNOWN_UP_TO: " 0.5.3 "})
    assert (code, data["code"]) == (2, "no-sglang")
