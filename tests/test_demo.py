"""`sm120patch demo`: the whole cycle on a real release in a scratch directory."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from sm120patch.cli import main
from sm120patch.commands.demo import DEMO_VERSION, fetch_wheel

pytestmark = pytest.mark.slow  # real sglang releases from the package index


def test_demo_runs_the_cycle_on_the_pinned_release() -> None:
    before = set(Path(tempfile.gettempdir()).glob("sm120patch-demo-*"))
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 0, result.stderr
    assert f"sglang-{DEMO_VERSION}-" in result.stderr
    for step in ("sm120patch apply", "sm120patch verify", "apply again", "sm120patch revert"):
        assert step in result.stderr
    assert (
        "communicator.py:97:        (_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)" in result.stderr
    )
    assert "already applied: nothing to change" in result.stderr
    assert "demo ok" in result.stderr
    assert set(Path(tempfile.gettempdir()).glob("sm120patch-demo-*")) == before  # cleaned up


def test_demo_with_a_given_wheel_and_keep(tmp_path: Path) -> None:
    wheel = fetch_wheel("0.5.14")
    result = CliRunner().invoke(main, ["demo", "--wheel", str(wheel), "--keep"])
    assert result.exit_code == 0, result.stderr
    assert "fusion-backend-resolver    pending -> applied" in result.stderr
    kept = result.stderr.split("scratch directory kept: ")[1].split()[0]
    assert Path(kept, "site-packages", "sglang").is_dir()
    shutil.rmtree(kept)
