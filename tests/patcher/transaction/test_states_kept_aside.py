"""``StateDir.kept_states``: which folders of the state directory are states set aside, in
which order revert considers them, and that one it cannot read keeps it from none of the others."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from sm120patch.patcher.transaction.state_dir import Manifest, StateDir


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    """The state directory of an installed sglang package."""
    package = tmp_path / "site" / "sglang"
    package.mkdir(parents=True)
    state = StateDir(package)
    state.make()
    return state


def kept(state: StateDir, name: str, version: str, mtime_ns: int) -> Path:
    """A state of sglang ``version`` set aside as ``name``, its manifest written at ``mtime_ns``."""
    path = state.root / name / "manifest.json"
    state.write_json(path, Manifest(version, "/site/sglang").to_json())
    os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


def versions(state: StateDir) -> list[tuple[str, str | None]]:
    return [(name, manifest.sglang_version) for name, manifest in state.kept_states()]


def test_kept_states_are_listed_newest_first(state: StateDir) -> None:
    kept(state, "stale-0.5.8-20250101T000000", "0.5.8", 1_000_000_000)
    kept(state, "stale-0.5.10-20250301T000000", "0.5.10", 3_000_000_000)
    kept(state, "stale-0.5.9-20250201T000000", "0.5.9", 2_000_000_000)
    assert versions(state) == [
        ("stale-0.5.10-20250301T000000", "0.5.10"),
        ("stale-0.5.9-20250201T000000", "0.5.9"),
        ("stale-0.5.8-20250101T000000", "0.5.8"),
    ]


def test_only_stale_folders_are_kept_states(state: StateDir) -> None:
    """A copy of a state the user made under another name is theirs, not one set aside."""
    kept(state, "stale-0.5.8-20250101T000000", "0.5.8", 1_000_000_000)
    kept(state, "my-copy", "0.5.9", 2_000_000_000)
    (state.root / "stale-notes").write_text("a file, not a folder\n")
    assert versions(state) == [("stale-0.5.8-20250101T000000", "0.5.8")]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda path: path.write_text("{not json\n"), id="not JSON"),
        pytest.param(lambda path: path.write_text(json.dumps({"format": 999})), id="a newer format"),
        pytest.param(lambda path: (path.unlink(), path.mkdir()), id="manifest is a folder"),
    ],
)
def test_a_kept_state_that_does_not_load_is_passed_over(state: StateDir, damage: Callable[[Path], object]) -> None:
    kept(state, "stale-0.5.8-20250101T000000", "0.5.8", 1_000_000_000)
    damage(kept(state, "stale-0.5.9-20250201T000000", "0.5.9", 2_000_000_000))
    assert versions(state) == [("stale-0.5.8-20250101T000000", "0.5.8")]
    assert (state.root / "stale-0.5.9-20250201T000000" / "manifest.json").exists()  # left where it is


def test_a_kept_state_removed_while_it_is_read_is_passed_over(state: StateDir, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another revert drops a kept state it restored between this one reading its manifest
    and asking when it was written: the rest are still listed."""
    kept(state, "stale-0.5.8-20250101T000000", "0.5.8", 1_000_000_000)
    kept(state, "stale-0.5.9-20250201T000000", "0.5.9", 2_000_000_000)
    real_load = StateDir.load

    def load_then_dropped(self: StateDir) -> Manifest | None:
        """StateDir.load, with another revert removing the 0.5.9 folder right after it is read."""
        manifest = real_load(self)
        if self.root.name.startswith("stale-0.5.9"):
            shutil.rmtree(self.root)
        return manifest

    monkeypatch.setattr(StateDir, "load", load_then_dropped)
    assert versions(state) == [("stale-0.5.8-20250101T000000", "0.5.8")]
