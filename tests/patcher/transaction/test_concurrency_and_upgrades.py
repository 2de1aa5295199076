"""Eight ranks at once, dead lock holders, and real pip upgrades/downgrades under a patched tree."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sm120patch.patcher.commands.demo import fetch_wheel
from sm120patch.patcher.plan.planner import make_plan
from sm120patch.patcher.plan.registry import all_patches
from sm120patch.runner.locate import locate
from sm120patch.sglang.layout import COMMUNICATOR as COMM
from tests.support.cli import jrun_process, run_process
from tests.support.realtrees import pip_install_into, record_hashes, serving_env, sha256

pytestmark = pytest.mark.slow  # real sglang releases from the package index


def test_eight_concurrent_applies_patch_once(release) -> None:
    package = release("0.5.9")
    env = dict(os.environ)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "sm120patch", "apply", "--sglang-path", str(package), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(8)
    ]
    results = [(p.wait(timeout=300), json.loads(p.stdout.read())) for p in procs]
    assert [code for code, _ in results] == [0] * 8
    writers = [data for _, data in results if data["written"]]
    assert len(writers) == 1
    assert sum("already applied" in data["headline"] for _, data in results) == 7
    text = (package / COMM).read_text()
    assert text.count("_is_sm120_supported = _is_cuda and is_sm120_supported()") == 1
    assert text.count("    is_sm120_supported,\n") == 1
    assert run_process("verify", "--sglang-path", package).returncode == 0


def test_lock_of_a_killed_process_does_not_block(release) -> None:
    package = release("0.5.9")
    state = package / ".sm120patch"
    state.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(state / 'lock')!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    started = time.monotonic()
    assert run_process("apply", "--sglang-path", package).returncode == 0
    assert time.monotonic() - started < 60


def test_apply_waits_for_a_live_holder_then_finds_the_tree_patched(release) -> None:
    package = release("0.5.9", hardlink=False)  # written below without the tool
    state = package / ".sm120patch"
    state.mkdir()
    fd = os.open(state / "lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    waiting = subprocess.Popen(
        [sys.executable, "-m", "sm120patch", "apply", "--sglang-path", str(package), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)
    assert waiting.poll() is None  # blocked on the lock, not failed
    # Meanwhile "another rank" patches the tree under the lock we hold.
    from sm120patch.sglang.tree import from_directory

    tree = from_directory(package)
    plan = make_plan(tree, list(all_patches()), change=True)
    for f in plan.changes:
        f.path.write_bytes(f.updated)
    os.close(fd)
    assert waiting.wait(timeout=120) == 0
    data = json.loads(waiting.stdout.read())
    assert data["written"] == [] and "already applied" in data["headline"]


def _venv_with(tmp_path: Path, version: str) -> tuple[Path, Path]:
    python = serving_env(tmp_path / "serving-env", version)
    return python, Path(locate(python=str(python)).package_dir)


def pip_install(python: Path, version: str) -> None:
    pip_install_into(python, str(fetch_wheel(version)), upgrade=True)


def _run(python: Path, command: str) -> dict:
    return jrun_process(command, "--python", python)[1]


def _upgrade_cycle(tmp_path: Path, old: str, new: str) -> None:
    python, package = _venv_with(tmp_path, old)
    assert _run(python, "apply")["ok"]
    pip_install(python, new)  # a real pip upgrade/downgrade over the patched tree

    verify = _run(python, "verify")
    assert verify["exit_code"] == 1
    assert verify["sglang"]["version"] == new
    assert verify["headline"].startswith(f"not patched: sglang was upgraded from {old} to {new} after `apply`")
    assert verify["state"]["stale"] and verify["state"]["sglang_version"] == old
    assert any(f"saved state is from sglang {old}" in m for m in verify["messages"])

    apply = _run(python, "apply")
    assert apply["ok"] and apply["state"]["sglang_version"] == new
    (aside,) = (package / ".sm120patch").glob(f"stale-{old}-*")
    assert (aside / "manifest.json").is_file() and any((aside / "backups").rglob("*.py"))
    assert any(str(aside) in m for m in apply["messages"])
    assert _run(python, "verify")["ok"]

    revert = _run(python, "revert")
    assert revert["ok"] and sorted(revert["written"]) == sorted(apply["written"]) != []
    record = record_hashes(package)
    for written in revert["written"]:
        rel = written.removeprefix("sglang/")
        assert sha256(package / rel) == record[rel]  # the *new* release's files


def test_upgrade_under_a_patched_tree(tmp_path: Path) -> None:
    _upgrade_cycle(tmp_path, "0.5.8", "0.5.9")


def test_downgrade_under_a_patched_tree(tmp_path: Path) -> None:
    _upgrade_cycle(tmp_path, "0.5.9", "0.5.8")
