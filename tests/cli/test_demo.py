"""`sm120patch demo`: the whole cycle on a real release in a scratch directory."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from sm120patch.patcher.commands.demo import DEMO_VERSION, fetch_wheel
from tests.support.cli import run

pytestmark = pytest.mark.slow  # real sglang releases from the package index


def test_demo_runs_the_cycle_on_the_pinned_release() -> None:
    before = set(Path(tempfile.gettempdir()).glob("sm120patch-demo-*"))
    code, _, err = run("demo")
    assert code == 0, err
    assert f"sglang-{DEMO_VERSION}-" in err
    for step in ("sm120patch apply", "sm120patch verify", "apply again", "sm120patch revert"):
        assert step in err
    assert "communicator-fusion-gate   pending -> applied" in err
    assert "ok sm120patch apply again (must change nothing): already applied: nothing to change" in err
    assert err.count("warning: [kernel-missing] FlashInfer is not installed here") == 1  # each warning once
    assert "demo ok" in err
    assert err.strip().splitlines()[-1].endswith("(pipx: add --python /path/to/env/bin/python).")
    assert len(err.splitlines()) <= 40  # about a screen
    assert set(Path(tempfile.gettempdir()).glob("sm120patch-demo-*")) == before  # cleaned up


def test_demo_with_a_given_wheel_and_keep(tmp_path: Path) -> None:
    wheel = fetch_wheel("0.5.14")
    code, _, err = run("demo", "--wheel", str(wheel), "--keep")
    assert code == 0, err
    assert "fusion-backend-resolver    pending -> applied" in err
    kept = err.split("scratch directory kept: ")[1].split()[0]
    assert Path(kept, "site-packages", "sglang").is_dir()
    shutil.rmtree(kept)
