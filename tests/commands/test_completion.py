"""Shell completion offers patch ids after ``--only`` / ``--skip`` (click's bash protocol)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sm120patch.plan.registry import all_patches

IDS = [p.id for p in all_patches()]


def complete(*words: str) -> list[str]:
    """What bash completion gets for ``sm120patch WORDS <TAB>`` (the last word is being typed)."""
    env = dict(os.environ, _SM120PATCH_COMPLETE="bash_complete", COMP_WORDS=" ".join(["sm120patch", *words]))
    env["COMP_CWORD"] = str(len(words))
    script = "import sys; from sm120patch.cli import main; sys.exit(main(prog_name='sm120patch'))"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    return [line.split(",", 1)[1] for line in proc.stdout.splitlines() if line.startswith("plain,")]


@pytest.mark.parametrize("option", ["--only", "--skip"])
def test_every_patch_id_is_offered(option: str) -> None:
    assert complete("apply", option, "") == IDS


def test_the_last_id_of_a_list_is_completed_and_chosen_ones_are_not_offered_again() -> None:
    offered = complete("apply", "--only", "communicator-import,communicator-f")
    assert offered == ["communicator-import,communicator-flag", "communicator-import,communicator-fusion-gate"]
    assert complete("apply", "--only", "communicator-import,communicator-i") == []
