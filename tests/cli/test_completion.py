"""Shell completion offers patch ids after ``--only`` / ``--skip`` (click's bash protocol)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sm120patch.cli import main
from sm120patch.patcher.plan.registry import all_patches

IDS = [p.id for p in all_patches()]


def complete(*words: str) -> list[str]:
    """What bash completion gets for ``sm120patch WORDS <TAB>`` (the last word is being typed)."""
    env = {"_SM120PATCH_COMPLETE": "bash_complete", "COMP_WORDS": " ".join(["sm120patch", *words])}
    env["COMP_CWORD"] = str(len(words))
    result = CliRunner().invoke(main, [], env=env, prog_name="sm120patch")
    assert result.exit_code == 0, result.output
    return [line.split(",", 1)[1] for line in result.stdout.splitlines() if line.startswith("plain,")]


@pytest.mark.parametrize("option", ["--only", "--skip"])
def test_every_patch_id_is_offered(option: str) -> None:
    assert complete("apply", option, "") == IDS


def test_the_last_id_of_a_list_is_completed_and_chosen_ones_are_not_offered_again() -> None:
    offered = complete("apply", "--only", "communicator-import,communicator-f")
    assert offered == ["communicator-import,communicator-flag", "communicator-import,communicator-fusion-gate"]
    assert complete("apply", "--only", "communicator-import,communicator-i") == []
