"""sm120patch where fleets and images use it: the Ansible playbook, the Dockerfile and its
entrypoint, and a git checkout laid out like sglang's repository."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.realtrees import copy_release, serving_env

REPO = Path(__file__).resolve().parent.parent
DOCKER = REPO / "examples" / "docker"
PLAYBOOK = REPO / "examples" / "ansible" / "playbook.yml"
BIN = Path(sys.executable).parent  # where this environment's sm120patch command lives


# --- the Dockerfile ------------------------------------------------------------------------


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction: comments dropped, continuations joined."""
    found: list[tuple[str, str]] = []
    pending = ""
    for line in dockerfile.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, rest = pending.strip().partition(" ")
        found.append((keyword.upper(), " ".join(rest.split())))
        pending = ""
    assert not pending, "a continuation runs off the end of the file"
    return found


def test_dockerfile_builds_on_the_official_image_and_applies_strictly() -> None:
    steps = instructions(DOCKER / "Dockerfile")
    keywords = [k for k, _ in steps]
    assert set(keywords) <= {"ARG", "FROM", "RUN", "COPY", "ENTRYPOINT", "CMD", "ENV"}
    (base,) = [args for k, args in steps if k == "FROM"]
    assert base.startswith("lmsysorg/sglang:")
    runs = " && ".join(args for k, args in steps if k == "RUN")
    assert re.search(r"pip install (--no-cache-dir )?sm120patch && sm120patch apply --strict", runs)
    copies = [args.split() for k, args in steps if k == "COPY"]
    assert all((DOCKER / source).is_file() for source, *_ in copies)
    (entry,) = [json.loads(args) for k, args in steps if k == "ENTRYPOINT"]
    assert [target for _, target in copies if target == entry[0]] == [entry[0]]
    assert keywords.index("FROM") < keywords.index("RUN") < keywords.index("ENTRYPOINT")


def fake_python(bin_dir: Path, log: Path) -> None:
    """``python`` that records what it was asked to run (stands for sglang's server)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "python"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\n')
    script.chmod(0o755)


@pytest.mark.slow
def test_entrypoint_starts_the_server_only_while_patched(tmp_path: Path) -> None:
    package = copy_release("0.5.9", tmp_path / "site", hardlink=False)
    log = tmp_path / "server-args"
    fake_python(tmp_path / "bin", log)
    env = dict(os.environ, SM120PATCH_SGLANG_PATH=str(package), PATH=f"{tmp_path / 'bin'}:{BIN}:/usr/bin:/bin")
    entry = [str(DOCKER / "entrypoint.sh"), "--model-path", "m", "--tp", "2"]

    refused = subprocess.run(entry, capture_output=True, text=True, env=env)
    assert refused.returncode == 1 and "Run `sm120patch apply`" in refused.stderr
    assert not log.exists()  # the server never started

    assert subprocess.run([str(BIN / "sm120patch"), "apply"], env=env, capture_output=True).returncode == 0
    started = subprocess.run(entry, capture_output=True, text=True, env=env)
    assert started.returncode == 0, started.stderr
    assert log.read_text().split() == ["-m", "sglang.launch_server", "--model-path", "m", "--tp", "2"]


# --- the Ansible playbook ------------------------------------------------------------------


def recap(output: str) -> dict[str, int]:
    line = next(line for line in output.splitlines() if line.startswith("localhost") and "changed=" in line)
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", line)}


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("ansible-playbook") is None and not (BIN / "ansible-playbook").exists(),
    reason="ansible-core is a test dependency: pip install -e '.[test]'",
)
def test_playbook_changed_then_ok_then_changed_after_a_reinstall(tmp_path: Path) -> None:
    serving = serving_env(tmp_path / "serving", "0.5.9")
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(REPO)],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = dist.glob("sm120patch-*.whl")
    playbook = shutil.which("ansible-playbook") or str(BIN / "ansible-playbook")
    command = [
        playbook, "-i", "localhost,", "-c", "local", str(PLAYBOOK),
        "-e", f"sm120patch_python={serving}", "-e", f"sm120patch_package={wheel}",
        "-e", f"sm120patch_venv={tmp_path / 'tool'}", "-e", f"sm120patch_venv_python={sys.executable}",
        "-e", f"ansible_python_interpreter={sys.executable}",
    ]  # fmt: skip
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))

    def play() -> dict[str, int]:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:]
        return recap(proc.stdout)

    first = play()
    assert first["failed"] == 0 and first["changed"] >= 1
    second = play()
    assert second["failed"] == 0 and second["changed"] == 0
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(serving), "install", "--quiet", "--no-deps",
         "--force-reinstall", "--disable-pip-version-check", "sglang==0.5.9"],
        check=True,
    )  # fmt: skip
    third = play()
    assert third["failed"] == 0 and third["changed"] == 1  # sm120patch wrote the files again
    verify = subprocess.run(
        [str(tmp_path / "tool" / "bin" / "sm120patch"), "verify", "--python", str(serving), "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert json.loads(verify.stdout)["ok"]


# --- a git checkout ------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return proc.stdout


@pytest.mark.slow
def test_checkout_stays_clean_and_knows_its_version(tmp_path: Path) -> None:
    """A tree laid out like sglang's repository (python/sglang, a pyproject whose version
    comes from the git tag), installed nowhere: the version comes from `git describe`."""
    repo = tmp_path / "sglang"
    package = copy_release("0.5.9", tmp_path / "site", hardlink=False)
    shutil.copytree(package, repo / "python" / "sglang")
    (repo / "python" / "sglang" / "_version.py").unlink()  # written by setuptools-scm at build, not tracked
    (repo / "python" / "pyproject.toml").write_text(
        '[project]\nname = "sglang"\ndynamic = ["version"]\n\n[tool.setuptools_scm]\nroot = ".."\n'
    )
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "sglang 0.5.9")
    git(repo, "tag", "v0.5.9")
    tool = [sys.executable, "-m", "sm120patch"]

    applied = subprocess.run(
        [*tool, "apply", "--sglang-path", str(repo / "python"), "--json"], capture_output=True, text=True
    )
    data = json.loads(applied.stdout)
    assert applied.returncode == 0, data["headline"]
    assert data["sglang"]["version"] == "0.5.9" and data["sglang"]["install_kind"] == "path"
    assert data["sglang"]["flashinfer_pinned"] == "0.6.3"
    assert any("sglang 0.5.9 pins 0.6.3" in w for w in data["warnings"])
    changed = sorted(line[3:] for line in git(repo, "status", "--porcelain").splitlines())
    assert changed == ["python/sglang/srt/layers/communicator.py", "python/sglang/srt/server_args.py"]

    (repo / "NOTES.md").write_text("local work\n")
    git(repo, "add", "NOTES.md")
    git(repo, "commit", "-q", "-m", "local work")  # a commit past the tag
    verify = subprocess.run(
        [*tool, "verify", "--sglang-path", str(repo / "python"), "--json"], capture_output=True, text=True
    )
    assert verify.returncode == 0
    version = json.loads(verify.stdout)["sglang"]["version"]
    assert re.fullmatch(r"0\.5\.9\+1\.g[0-9a-f]+", version)
    assert json.loads(verify.stdout)["sglang"]["flashinfer_pinned"] == "0.6.3"
    revert = subprocess.run([*tool, "revert", "--sglang-path", str(repo / "python")], capture_output=True, text=True)
    assert revert.returncode == 0, revert.stderr
    assert git(repo, "status", "--porcelain") == ""  # back to the commit, the state dir ignored
