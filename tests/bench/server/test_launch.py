"""The watchdog with real processes: FakeSglang (fakes.py) hanging in a phase, with TP ranks
spawned by multiprocessing and helpers of its own (one in a session of its own); after the
run every one of them is gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sm120patch.bench.remote import server_hook
from sm120patch.bench.server import launch
from sm120patch.bench.server.driver import probe_env, run_env
from tests.bench.server.fakes import fake_server_site

pytestmark = pytest.mark.offline  # each test starts processes: the slow tier (tests/conftest.py)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def gone(pid: int, within: float = 5.0) -> bool:
    """Dead within ``within`` seconds: SIGKILL is sent to a group, and the kernel ends its
    processes a moment later."""
    deadline = time.monotonic() + within
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)


def start(tmp_path: Path, mode: str, tp: int = 2, timeout: float = 1.0) -> tuple[launch.RunFailure, list[int]]:
    package = fake_server_site(tmp_path / "site")
    pids = tmp_path / "pids"
    env = probe_env(package)
    env.update(FAKE_SGLANG=mode, FAKE_SGLANG_PIDS=str(pids))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    command = [sys.executable, "-m", "sglang.benchmark.one_batch", "--model-path", str(tmp_path / "model")]
    command += ["--tp-size", str(tp), "--batch-size", "1", "--input-len", "8", "--output-len", "4"]
    phases: list[str] = []
    started = time.monotonic()
    with pytest.raises(launch.RunFailure) as caught:
        launch.run(command, env, tmp_path, timeout, on_phase=phases.append)
    assert time.monotonic() - started < 30
    assert phases[0] == launch.STARTING
    return caught.value, [int(line) for line in pids.read_text().split()] if pids.exists() else []


@pytest.mark.waits
def test_a_rank_hanging_in_capture_is_stopped_and_named(tmp_path: Path) -> None:
    failure, pids = start(tmp_path, "hang:capture", timeout=0.3)
    assert failure.kind == "timeout"
    assert failure.phase == "capturing CUDA graphs"
    assert str(failure) == "no progress for 2 s; every process of the run was stopped (phase: capturing CUDA graphs)"
    assert any("Capture cuda graph begin" in line for line in failure.tail)
    assert len(pids) == 2  # both TP ranks hung
    assert not any(alive(pid) for pid in pids)


@pytest.mark.waits
def test_helpers_in_and_out_of_the_group_are_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(launch.SLOW_PHASES, "capturing CUDA graphs", 1)  # what is tested is the stop
    failure, pids = start(tmp_path, "grandchild", timeout=0.7)
    assert failure.kind == "timeout"  # rank 0 sleeps while loading; rank 1 waits in capture
    assert len(pids) == 2
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids)


@pytest.mark.waits
def test_a_hang_while_starting_gets_its_longer_limit(tmp_path: Path) -> None:
    started = time.monotonic()
    failure, pids = start(tmp_path, "hang:starting (importing sglang)", tp=1, timeout=0.3)
    assert failure.phase == launch.STARTING
    assert time.monotonic() - started >= 0.3 * launch.SLOW_PHASES[launch.STARTING]
    assert pids and not alive(pids[0])


def test_the_hook_counts_and_runs_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    package = fake_server_site(tmp_path / "site")
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(Path(server_hook.__file__).read_text())
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text(f"open({str(tmp_path / 'marker')!r}, 'w').write('ran')\n")
    counts = tmp_path / "counts"
    counts.mkdir()
    env = run_env(hook, counts, package)
    env["PYTHONPATH"] += os.pathsep + str(other)
    code = (
        "import torch\n"
        "from sglang.srt.layers.flashinfer_comm_fusion import flashinfer_allreduce_residual_rmsnorm as f\n"
        "f(1, 2, 3)\n"
        "torch.cuda._capturing = True\n"
        "f(1, 2, 3); f(1, 2, 3)\n"
        "import cuda_stub\n"
    )
    (tmp_path / "cuda_stub.py").write_text("")
    subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, check=True)
    assert (tmp_path / "marker").read_text() == "ran"
    (data,) = [json.loads(p.read_text()) for p in counts.glob("*.json")]
    assert data["counts"]["sglang.flashinfer_allreduce_residual_rmsnorm"] == {"eager": 1, "capture": 2, "fell_back": 0}
    assert data["counts"]["flashinfer.allreduce_fusion[pattern=1]"] == {"eager": 1, "capture": 2, "fell_back": 0}
    assert data["loaded"] == ["flashinfer.comm", "sglang.srt.layers.flashinfer_comm_fusion"]


def test_the_hook_refuses_multicast(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(Path(server_hook.__file__).read_text())
    driver = tmp_path / "site" / "cuda" / "bindings"
    driver.mkdir(parents=True)
    for package in (tmp_path / "site" / "cuda", driver):
        (package / "__init__.py").write_text("")
    (driver / "driver.py").write_text(
        '"""A fake cuda.bindings.driver."""\ndef cuMulticastCreate(prop):\n    return 0\n'
    )
    counts = tmp_path / "counts"
    counts.mkdir()
    env = dict(os.environ, PYTHONPATH=f"{hook}{os.pathsep}{tmp_path / 'site'}", SM120PATCH_COUNT_DIR=str(counts))
    code = (
        "from cuda.bindings import driver\n"
        "try:\n    driver.cuMulticastCreate(None)\nexcept RuntimeError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == server_hook.MULTICAST_MESSAGE


@pytest.mark.waits
def test_a_process_that_closes_its_output_and_stays_is_stopped(tmp_path: Path) -> None:
    code = "import os, time\nprint(os.getpid(), flush=True)\nos.close(1); os.close(2)\ntime.sleep(600)\n"
    with pytest.raises(launch.RunFailure) as caught:
        launch.run([sys.executable, "-c", code], dict(os.environ), tmp_path, 0.3)
    assert str(caught.value) == (
        f"its output ended but it did not exit; every process of the run was stopped (phase: {launch.STARTING})"
    )
    assert caught.value.kind == "timeout"
    assert not alive(int(caught.value.tail[0]))


def test_a_clean_exit_returns_lines_and_phases(tmp_path: Path) -> None:
    code = "print('Load weight begin.'); print('Warmup ...'); print('Benchmark ...')"
    output = launch.run([sys.executable, "-c", code], dict(os.environ), tmp_path, 5.0)
    assert output.returncode == 0 and output.lines[-1] == "Benchmark ..."
    assert [p for p, _ in output.phases] == [launch.STARTING, "loading weights", "warm-up", "benchmark"]


def test_output_is_kept_as_printed_whatever_its_bytes(tmp_path: Path) -> None:
    """sglang's log as printed: trailing spaces and a last letter kept, bytes that are not
    UTF-8 replaced (a localized CUDA message), each phase named as it starts and timed."""
    code = (
        "import sys, time\n"
        "out = sys.stdout.buffer\n"
        "out.write(b'Load weight begin.\\n'); out.flush(); time.sleep(0.2)\n"
        "out.write(b'Warmup ...\\n'); out.write(b'mem   \\n'); out.write(b'GPU MAX\\n')\n"
        "out.write(b'CUDA \\xff\\xfe error\\n'); out.flush()\n"
    )
    seen: list[str] = []
    started = time.monotonic()
    output = launch.run([sys.executable, "-c", code], dict(os.environ), tmp_path, 5.0, on_phase=seen.append)
    took = time.monotonic() - started
    assert output.lines == ["Load weight begin.", "Warmup ...", "mem   ", "GPU MAX", "CUDA \ufffd\ufffd error"]
    assert seen == [launch.STARTING, "loading weights", "warm-up"]
    assert [p for p, _ in output.phases] == seen
    assert all(0 <= seconds <= took for _, seconds in output.phases)


@pytest.mark.waits
def test_a_process_that_closes_its_output_and_then_exits_is_waited_for(tmp_path: Path) -> None:
    """Waited for as long as its phase may take: starting gets 3x the timeout (3 s here)."""
    code = "import os, time\nos.close(1); os.close(2)\ntime.sleep(1.5)\n"
    output = launch.run([sys.executable, "-c", code], dict(os.environ), tmp_path, 1.0)
    assert output.returncode == 0


@pytest.mark.waits
def test_a_plain_phase_gets_the_timeout_once(tmp_path: Path) -> None:
    code = "import time\nprint('Load weight begin.', flush=True)\nprint('Warmup ...', flush=True)\ntime.sleep(600)\n"
    with pytest.raises(launch.RunFailure) as caught:
        launch.run([sys.executable, "-c", code], dict(os.environ), tmp_path, 0.4)
    assert str(caught.value) == "no progress for 0 s; every process of the run was stopped (phase: warm-up)"
    assert launch.limit_for("warm-up", 0.4) == 0.4


def test_stopping_groups_that_ended_meanwhile_is_no_error(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    gone = subprocess.Popen(["true"], start_new_session=True)
    gone.wait()
    launch.stop(proc, {proc.pid, gone.pid})
    assert proc.returncode == -15


def test_the_benchmark_gets_the_environment_folder_and_no_terminal_input(tmp_path: Path) -> None:
    """Its stderr is read with its stdout; the environment and folder are the ones given; it
    never reads this process's stdin (here a pipe nobody writes to: it would wait forever)."""
    code = (
        "import os, sys\n"
        "print(os.environ.get('MARK'), os.getcwd(), flush=True)\n"
        "print('on stderr', file=sys.stderr, flush=True)\n"
        "print(repr(sys.stdin.read()), flush=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MARK"} | {"MARK": "given"}
    read, write = os.pipe()
    saved = os.dup(0)
    os.dup2(read, 0)
    try:
        output = launch.run([sys.executable, "-c", code], env, tmp_path, 2.0)
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read, write):
            os.close(fd)
    assert output.lines == [f"given {tmp_path}", "on stderr", "''"]


@pytest.mark.parametrize(
    ("ending", "said"),
    [
        ("sys.exit(1)", "exit 1"),
        ("sys.exit(3)", "exit 3"),
        ("os.kill(os.getpid(), signal.SIGKILL)", "killed by signal 9"),
    ],
)
def test_a_benchmark_that_fails_says_how_and_in_which_phase(tmp_path: Path, ending: str, said: str) -> None:
    code = f"import os, signal, sys\nprint('Load weight begin.', flush=True)\n{ending}\n"
    with pytest.raises(launch.RunFailure) as caught:
        launch.run([sys.executable, "-c", code], dict(os.environ), tmp_path, 5.0)
    assert (caught.value.kind, caught.value.phase) == ("exit", "loading weights")
    assert str(caught.value) == f"sglang's benchmark ended with {said} (phase: loading weights)"


def test_a_clean_run_says_how_long_it_took(tmp_path: Path) -> None:
    started = time.monotonic()
    output = launch.run([sys.executable, "-c", "import time; time.sleep(0.3)"], dict(os.environ), tmp_path, 5.0)
    assert 0.3 <= output.seconds <= time.monotonic() - started


@pytest.mark.waits
def test_a_helper_seen_once_is_stopped_though_it_left_the_process_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A helper in a session of its own whose parent exits is no longer a descendant of the
    benchmark (it is re-parented to init): the groups seen in every scan add up, so it is
    still stopped at the end.  Scans every 0.05 s here, so several see it and several do not."""
    monkeypatch.setattr(launch, "SCAN_EVERY_S", 0.05)
    pid_file = tmp_path / "helper"
    parent = (
        "import subprocess, time\n"
        "helper = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(helper.pid))\n"
        "time.sleep(0.5)\n"
    )
    code = (
        "import subprocess, sys, time\n"
        f"subprocess.run([sys.executable, '-c', {parent!r}], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print('parent gone', flush=True)\n"
        "time.sleep(0.5)\n"
    )
    output = launch.run([sys.executable, "-c", code], dict(os.environ), tmp_path, 5.0)
    assert output.lines == ["parent gone"]
    assert gone(int(pid_file.read_text()))


@pytest.mark.waits
def test_a_process_that_closes_its_output_is_waited_for_only_what_is_left_of_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its phase (warm-up, limit 2 s) had run 1 s when the output closed: at most the second
    left is waited for, not the whole limit again."""
    asked: list[float] = []
    real_wait = subprocess.Popen.wait

    def wait(self: subprocess.Popen[str], timeout: float | None = None) -> int:
        """Fake ``Popen.wait`` for a timed wait: records the time it was given and gives up at
        once, as if that time had passed; an untimed wait (the stop's reaping) is the real one."""
        if timeout is None:
            return real_wait(self)
        asked.append(timeout)
        raise subprocess.TimeoutExpired(self.args, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", wait)
    code = "import os, time\nprint('Warmup ...', flush=True)\ntime.sleep(1.0)\n"
    code += "os.close(1); os.close(2)\ntime.sleep(600)\n"
    with pytest.raises(launch.RunFailure, match="its output ended but it did not exit"):
        launch.run([sys.executable, "-c", code], dict(os.environ), tmp_path, 2.0)
    assert len(asked) == 1 and 0.1 <= asked[0] < 1.8


@pytest.mark.waits
def test_a_helper_started_after_the_output_closed_is_stopped(tmp_path: Path) -> None:
    """No scan runs once the output has closed; the last look at the run's processes, as it is
    stopped, still finds a helper started then."""
    pid_file = tmp_path / "helper"
    code = (
        "import os, subprocess, time\n"
        "os.close(1); os.close(2)\n"
        "helper = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(helper.pid))\n"
        "time.sleep(600)\n"
    )
    with pytest.raises(launch.RunFailure):
        launch.run([sys.executable, "-c", code], dict(os.environ), tmp_path, 0.3)
    assert gone(int(pid_file.read_text()))


def test_a_group_that_may_not_be_signalled_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    real_killpg = os.killpg

    def killpg(pgid: int, sig: int) -> None:
        """Fake ``os.killpg``: group 424242 belongs to another user (a helper that changed uid)."""
        if pgid == 424242:
            raise PermissionError(1, "Operation not permitted")
        real_killpg(pgid, sig)

    monkeypatch.setattr(launch.os, "killpg", killpg)
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    launch.stop(proc, {proc.pid, 424242})
    assert proc.returncode == -15
