"""``doctor.patch_states``: each patch's state from the plan layer, as ``State`` members."""

from __future__ import annotations

from pathlib import Path

from sm120patch.patcher.exports import patch_states
from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan.registry import all_patches
from sm120patch.sglang.tree import from_directory
from tests.support.mini_sglang import FILES, write_mini_sglang


def test_states_are_state_members(tmp_path: Path) -> None:
    states = patch_states(from_directory(write_mini_sglang(tmp_path / "site")))
    assert states and all(isinstance(s, State) for s in states.values())
    assert State.PENDING in states.values()


def test_a_refused_release_refuses_every_patch_as_state_refused(tmp_path: Path) -> None:
    """A release without the SM12x probe (sglang.srt.utils.is_sm120_supported) is refused."""
    files = {**FILES, "srt/utils/__init__.py": "def is_sm100_supported():\n    return False\n"}
    states = patch_states(from_directory(write_mini_sglang(tmp_path / "site", files=files)))
    assert states == {p.id: State.REFUSED for p in all_patches()}
