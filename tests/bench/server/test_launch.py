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

from sm120patch.bench.server import launch
from sm120patch.bench.server.driver import probe_env, run_env
from sm120patch.probes import server_hook
from tests.bench.server.fakes import fake_server_site


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


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


def test_a_rank_hanging_in_capture_is_stopped_and_named(tmp_path: Path) -> None:
    failure, pids = start(tmp_path, "hang:capture", timeout=0.3)
    assert failure.kind == "timeout"
    assert failure.phase == "capturing CUDA graphs"
    assert str(failure) == "no progress for 2 s; every process of the run was stopped (phase: capturing CUDA graphs)"
    assert any("Capture cuda graph begin" in line for line in failure.tail)
    assert len(pids) == 2  # both TP ranks hung
    assert not any(alive(pid) for pid in pids)


def test_helpers_in_and_out_of_the_group_are_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(launch.SLOW_PHASES, "capturing CUDA graphs", 1)  # what is tested is the stop
    failure, pids = start(tmp_path, "grandchild", timeout=0.7)
    assert failure.kind == "timeout"  # rank 0 sleeps while loading; rank 1 waits in capture
    assert len(pids) == 2
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids)


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


def test_a_process_that_closes_its_output_and_stays_is_stopped(tmp_path: Path) -> None:
    code = "import os, time\nprint(os.getpid(), flush=True)\nos.close(1); os.close(2)\ntime.sleep(600)\n"
    with pytest.raises(launch.RunFailure) as caught:
        launch.run([sys.executable, "-c", code], dict(os.environ), tmp_path, 0.3)
    assert caught.value.kind == "timeout" and "did not exit" in caught.value.message
    assert not alive(int(caught.value.tail[0]))


def test_a_clean_exit_returns_lines_and_phases(tmp_path: Path) -> None:
    code = "print('Load weight begin.'); print('Warmup ...'); print('Benchmark ...')"
    output = launch.run([sys.executable, "-c", code], dict(os.environ), tmp_path, 5.0)
    assert output.returncode == 0 and output.lines[-1] == "Benchmark ..."
    assert [p for p, _ in output.phases] == [launch.STARTING, "loading weights", "warm-up", "benchmark"]
