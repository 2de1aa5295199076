"""apply, revert and verify take the tree's lock before they judge it: each, run as a real
process while another run holds the lock and changes the tree, waits, then judges what that
run left and tells the truth about it (a run that judged first answered from a tree that
changed under it: revert said "sm120patch did not write them", verify "not patched", a
repeated apply "already applied" over a tree being reverted)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sm120patch.patcher.transaction.state_dir import StateDir
from tests.support.cli import apply_all, revert_tree, verify_tree
from tests.support.mini_sglang import COMM, FILES, FUSION, SERVER_ARGS

pytestmark = pytest.mark.offline  # each test starts processes: the slow tier (tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]
TARGETS = (COMM, FUSION, SERVER_ARGS)


def start(command: str, package: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sm120patch", command, "--sglang-path", str(package), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )


def waits_on(proc: subprocess.Popen[str], lock: Path, timeout: float = 120) -> bool:
    """True once ``proc`` has ``lock`` open (it waits for the lock), False if it ended first
    (it judged without waiting)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        for fd in Path(f"/proc/{proc.pid}/fd").glob("*"):
            try:
                if os.readlink(fd) == str(lock):
                    return True
            except OSError:
                continue
        time.sleep(0.02)
    raise AssertionError(f"{proc.args} neither opened {lock} nor ended within {timeout}s")


@contextmanager
def held(package: Path) -> Iterator[None]:
    """The tree's lock, held by this test as the other run holds it."""
    state = StateDir(package)
    state.make()
    fd = os.open(state.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        os.close(fd)


@contextmanager
def as_the_holder(self: StateDir, timeout: float = 300.0, shared: bool = False) -> Iterator[bool]:
    """The other run's own lock: this test holds it for it."""
    yield True


def patched(package: Path) -> bool:
    return all((package / rel).read_text() != FILES[rel] for rel in TARGETS)


CASES: dict[str, tuple[Callable[[Path], object], Callable[[Path], object], Callable[[dict, Path], None]]] = {
    # command: (before it starts, what the lock holder does meanwhile, what must be true after)
    "revert": (lambda p: None, apply_all, lambda data, p: data["written"] != [] and not patched(p)),
    "verify": (lambda p: None, apply_all, lambda data, p: data["headline"] == "all patches applied"),
    "apply": (apply_all, revert_tree, lambda data, p: data["written"] != [] and patched(p)),
}


@pytest.mark.parametrize("command", sorted(CASES))
def test_a_command_waits_for_the_lock_then_judges_what_the_holder_left(
    mini: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    before, meanwhile, truth = CASES[command]
    before(mini)
    with held(mini):
        proc = start(command, mini)
        assert waits_on(proc, StateDir(mini).lock_path), f"{command} judged before taking the lock"
        with monkeypatch.context() as patch:
            patch.setattr(StateDir, "lock", as_the_holder)
            meanwhile(mini)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    data = json.loads(out)
    assert truth(data, mini), data["headline"]
    assert verify_tree(mini).exit_code == (0 if patched(mini) else 1)


def test_apply_and_revert_side_by_side_serialize_and_both_tell_the_truth(mini: Path) -> None:
    """Each time: apply and revert started together on a patched or pristine tree; each exits
    0 with what it did, and the tree ends as the one that ran last left it."""
    for _ in range(3):
        procs = {command: start(command, mini) for command in ("apply", "revert")}
        answers = {}
        for command, proc in procs.items():
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, (command, err)
            answers[command] = json.loads(out)
        applied, reverted = answers["apply"]["headline"], answers["revert"]["headline"]
        assert applied.startswith(("patched", "already applied")), applied
        assert reverted.startswith(("restored", "nothing to revert")), reverted
        assert patched(mini) or all((mini / rel).read_text() == FILES[rel] for rel in TARGETS)
        if reverted.startswith("nothing to revert"):  # revert ran first, on a pristine tree
            assert applied.startswith("patched") and patched(mini)
        if applied.startswith("already applied"):  # apply ran first, on a patched tree
            assert reverted.startswith("restored") and not patched(mini)
