"""verify, list and doctor judge a tree against what the last apply was asked to do (its
saved patch set), and name a damaged journal or manifest as apply and revert do."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sm120patch.doctor import checks
from sm120patch.doctor.findings import Severity
from sm120patch.patcher.exports import patch_states
from sm120patch.patcher.kit.model import State
from sm120patch.sglang.tree import from_directory
from tests.support.cli import jrun, run
from tests.support.mini_sglang import FILES, SERVER_ARGS

REPO = Path(__file__).resolve().parents[2]
ENTRYPOINT = REPO / "examples" / "docker" / "entrypoint.sh"
AUTO_ENABLE = "server-args-auto-enable"


def states(data: dict) -> dict[str, str]:
    return {p["id"]: p["state"] for p in data["patches"]}


@pytest.mark.parametrize(
    ("selection", "left_out"),
    [
        (("--skip", AUTO_ENABLE), {AUTO_ENABLE}),
        (("--only", "communicator-fusion-gate"), {AUTO_ENABLE, "workspace-preflight"}),
    ],
)
def test_a_patch_apply_was_asked_to_leave_out_reads_as_skipped_everywhere(
    mini: Path, selection: tuple[str, str], left_out: set[str]
) -> None:
    assert run("apply", "--sglang-path", str(mini), *selection)[0] == 0

    code, data = jrun("verify", "--sglang-path", str(mini))
    assert code == 0, data["headline"]
    assert {pid for pid, state in states(data).items() if state == "skipped"} == left_out
    assert data["headline"].startswith("all patches applied, except ")
    assert all(pid in data["headline"] for pid in left_out)

    code, listed = jrun("list", "--sglang-path", str(mini))
    assert code == 0 and states(listed) == states(data)

    found = patch_states(from_directory(mini))
    assert {pid for pid, state in found.items() if state is State.SKIPPED} == left_out
    findings = {f.id: f for f in checks.patches(from_directory(mini), found, Severity.ERROR)}
    # The auto-enable left out is information; the preflight left out keeps the fused path shut.
    severities = {pid: findings[f"patch:{pid}"].severity for pid in left_out}
    assert severities == {pid: Severity.ERROR if pid == "workspace-preflight" else Severity.INFO for pid in left_out}
    assert [i for i, f in findings.items() if f.severity is Severity.ERROR] == [
        f"patch:{pid}" for pid in sorted(left_out) if pid == "workspace-preflight"
    ]


def test_a_reinstall_after_a_skipping_apply_is_still_not_patched(mini: Path) -> None:
    """Skipped excuses only what apply was asked to leave out."""
    assert run("apply", "--sglang-path", str(mini), "--skip", AUTO_ENABLE)[0] == 0
    for rel in ("srt/layers/communicator.py", "srt/layers/flashinfer_comm_fusion.py"):
        (mini / rel).write_text(FILES[rel])  # pip install --force-reinstall
    code, data = jrun("verify", "--sglang-path", str(mini))
    assert code == 1 and "reinstalled" in data["headline"]
    assert states(data)[AUTO_ENABLE] == "skipped"
    assert states(data)["communicator-flag"] == "pending"


def test_a_plain_apply_after_a_skipping_one_applies_what_was_skipped(mini: Path) -> None:
    assert run("apply", "--sglang-path", str(mini), "--skip", AUTO_ENABLE)[0] == 0
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert code == 0 and data["written"] == [f"sglang/{SERVER_ARGS}"]
    assert states(jrun("verify", "--sglang-path", str(mini))[1])[AUTO_ENABLE] == "applied"


@pytest.mark.offline
def test_the_docker_entrypoint_starts_the_server_after_a_skipping_apply(mini: Path, tmp_path: Path) -> None:
    """examples/docker/entrypoint.sh runs `sm120patch verify`, then the server."""
    bin_dir, log = tmp_path / "bin", tmp_path / "server-args"
    bin_dir.mkdir()
    tool = bin_dir / "sm120patch"
    tool.write_text(f'#!/bin/sh\nexec {sys.executable} -m sm120patch "$@"\n')
    server = bin_dir / "python"  # stands for sglang's server: records what it was asked to run
    server.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\n')
    for script in (tool, server):
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    env = dict(
        os.environ,
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=str(REPO),
        SM120PATCH_SGLANG_PATH=str(mini),
    )
    assert run("apply", "--sglang-path", str(mini), "--skip", AUTO_ENABLE)[0] == 0
    started = subprocess.run([str(ENTRYPOINT), "--tp", "2"], capture_output=True, text=True, env=env)
    assert started.returncode == 0, started.stderr
    assert log.read_text().split() == ["-m", "sglang.launch_server", "--tp", "2"]


DAMAGED = {
    "journal.json": b'{"format": 1, "op": "apply"}',  # a journal cut short: no entries
    "manifest.json": b'{"format": 2, "sglang_version": "0.5.11", "unknown": 1}',
}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_a_damaged_journal_or_manifest_is_named_by_every_command_in_the_same_words(mini: Path, name: str) -> None:
    assert run("apply", "--sglang-path", str(mini))[0] == 0
    (mini / ".sm120patch" / name).write_bytes(DAMAGED[name])
    answers = {}
    for command in ("apply", "revert", "verify", "list", "doctor"):
        code, data = jrun(command, "--sglang-path", str(mini))
        assert code == 2, (command, data)
        answers[command] = data["error"]
    assert len(set(answers.values())) == 1, answers
    assert "corrupted" in answers["verify"]


def test_a_refused_apply_shows_the_lines_the_files_hold_not_the_ones_it_would_write(mini: Path) -> None:
    """--strict refuses (no FlashInfer beside the miniature release): nothing is written, and
    each evidence line is the file's own line at that number."""
    code, data = jrun("apply", "--sglang-path", str(mini), "--strict")
    assert code == 1 and data["written"] == [] and "nothing was written" in data["headline"]
    shown = [(p["file"], e) for p in data["patches"] for e in p["evidence"]]
    assert shown
    for file, evidence in shown:
        lines = (mini.parent / file).read_text().splitlines()
        assert lines[evidence["line"] - 1].rstrip() == evidence["text"], (file, evidence)
    assert all(p["state_after"] == p["state"] for p in data["patches"])
    err = run("apply", "--sglang-path", str(mini), "--strict")[2]
    assert "evidence:" in err and "sm120" not in err.partition("evidence:")[2].partition("warning")[0]


def test_a_dry_run_says_its_evidence_is_what_apply_would_write(mini: Path) -> None:
    code, _, err = run("apply", "--sglang-path", str(mini), "--dry-run")
    assert code == 0 and "evidence, as apply would write it:" in err


def test_a_skipping_apply_with_nothing_to_write_still_records_what_was_asked(mini: Path) -> None:
    """Every other patch is already in the code (upstream, or by hand): apply writes no file,
    yet verify must know that the one left out was left out on purpose."""
    assert run("apply", "--sglang-path", str(mini), "--skip", AUTO_ENABLE)[0] == 0
    shutil.rmtree(mini / ".sm120patch")  # as if those patches had come with the release
    code, data = jrun("apply", "--sglang-path", str(mini), "--skip", AUTO_ENABLE)
    assert code == 0 and data["written"] == []
    code, data = jrun("verify", "--sglang-path", str(mini))
    assert code == 0 and states(data)[AUTO_ENABLE] == "skipped", data["headline"]
    code, data = jrun("revert", "--sglang-path", str(mini))
    assert code == 0 and data["written"] == []
    assert not (mini / ".sm120patch").exists()
