"""What a user ran into on real releases (0.5.9, 0.5.15, 0.5.23), run as they ran it: a
skipping apply read as "reinstalled" and stopped the Docker entrypoint; revert after an
upgrade called pristine files "not pristine"; pip uninstall left an importable ``sglang``
that was only sm120patch's folder; a refused apply showed lines the files did not hold."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sm120patch.patcher.commands.demo import fetch_wheel
from tests.support.cli import jrun_process, run_process
from tests.support.realtrees import pip_install_into, record_hashes, serving_env, sha256

pytestmark = pytest.mark.slow  # real sglang releases from the package index

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO))


def test_a_skipping_apply_on_0_5_15_verifies_and_the_entrypoint_starts_the_server(release, tmp_path: Path) -> None:
    package = release("0.5.15")
    code, applied, _ = jrun_process("apply", "--sglang-path", package, "--skip", "server-args-auto-enable", env=ENV)
    assert code == 0 and applied["written"], applied["headline"]
    code, verified, _ = jrun_process("verify", "--sglang-path", package, env=ENV)
    assert code == 0, verified["headline"]
    assert {p["id"]: p["state"] for p in verified["patches"]}["server-args-auto-enable"] == "skipped"

    bin_dir, log = tmp_path / "bin", tmp_path / "server-args"
    bin_dir.mkdir()
    (bin_dir / "sm120patch").write_text(f'#!/bin/sh\nexec {sys.executable} -m sm120patch "$@"\n')
    (bin_dir / "python").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\n')
    for script in bin_dir.iterdir():
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    env = dict(ENV, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", SM120PATCH_SGLANG_PATH=str(package))
    entry = [str(REPO / "examples" / "docker" / "entrypoint.sh"), "--tp", "2"]
    started = subprocess.run(entry, capture_output=True, text=True, env=env)
    assert started.returncode == 0, started.stderr
    assert log.read_text().split() == ["-m", "sglang.launch_server", "--tp", "2"]


def test_revert_after_an_upgrade_from_0_5_15_to_0_5_23_sets_the_old_state_aside(tmp_path: Path) -> None:
    python = serving_env(tmp_path / "env", "0.5.15")
    assert jrun_process("apply", "--python", python, env=ENV)[0] == 0
    pip_install_into(python, str(fetch_wheel("0.5.23")), upgrade=True)

    code, reverted, _ = jrun_process("revert", "--python", python, env=ENV)
    assert code == 0, reverted["headline"]
    assert reverted["headline"].startswith("nothing of sglang 0.5.23 to revert: the saved state is from sglang 0.5.15")
    assert reverted["written"] == []
    package = Path(reverted["sglang"]["location"])
    [aside] = (package / ".sm120patch").glob("stale-0.5.15-*")
    assert (aside / "manifest.json").is_file()
    assert any(str(aside) in m for m in reverted["messages"])
    record = record_hashes(package)
    for f in reverted["files"]:  # what the old state names: gone, or 0.5.23's own file
        rel = f["file"].removeprefix("sglang/")
        assert not (package / rel).exists() or sha256(package / rel) == record[rel]

    # The upgraded tree then patches and reverts as any other.
    assert jrun_process("apply", "--python", python, env=ENV)[0] == 0
    code, back, _ = jrun_process("revert", "--python", python, env=ENV)
    assert code == 0 and back["headline"].startswith("restored")
    assert sorted(p.name for p in (package / ".sm120patch").iterdir()) == [".gitignore", aside.name]


@pytest.mark.parametrize("reverted", [True, False], ids=["apply-revert-uninstall", "apply-uninstall"])
def test_pip_uninstall_leaves_no_sglang_behind_for_any_command(tmp_path: Path, reverted: bool) -> None:
    python = serving_env(tmp_path / "env", "0.5.9")
    assert jrun_process("apply", "--python", python, env=ENV)[0] == 0
    package = Path(jrun_process("verify", "--python", python, env=ENV)[1]["sglang"]["location"])
    if reverted:
        assert jrun_process("revert", "--python", python, env=ENV)[0] == 0
        assert not (package / ".sm120patch").exists()
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "uninstall", "--quiet", "--yes", "sglang"], check=True
    )
    assert package.exists() is not reverted  # only sm120patch's state can keep the folder
    for command in ("verify", "apply", "revert", "list", "doctor"):
        proc = run_process(command, "--python", python, env=ENV)
        assert proc.returncode == 2, (command, proc.stderr)
        assert "no sglang found" in proc.stderr, (command, proc.stderr)


def test_a_refused_apply_on_0_5_9_shows_the_lines_its_files_hold(release) -> None:
    package = release("0.5.9")
    code, data, _ = jrun_process("apply", "--sglang-path", package, "--strict", env=ENV)  # no FlashInfer here
    assert code == 1 and data["written"] == []
    evidence = [e for p in data["patches"] for e in p["evidence"]]
    assert evidence
    for e in evidence:
        lines = (package.parent / e["file"]).read_text().splitlines()
        assert lines[e["line"] - 1].rstrip() == e["text"], e
    assert not any("sm120" in e["text"] for e in evidence)
