"""bench's ranks with the real torch (CPU build), gloo between two processes.

There is no GPU here, so the rank runs its ``cpu-standin`` device: gloo instead of NCCL,
wall-clock timing instead of CUDA graphs, and ``CpuStandInFusedKernel`` (torch ops that
compute what FlashInfer's kernel computes) in place of the kernel.  Everything else --
the process group, the inputs, the fp32 reference, the correctness check, the unfused
path, the protocol and the verdict -- is the code the GPU runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sm120patch.bench.kernel.measure import Settings, run
from sm120patch.bench.kernel.verdict import Kind
from sm120patch.sglang.fusion_call import read_call

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]


def settings(python: Path, **changes: object) -> Settings:
    base = Settings(str(python), 2, (1, 8, 64), 1024, "bf16", 120.0, calls=2, replays=30, device="cpu-standin")
    return Settings(**{**base.__dict__, **changes})  # type: ignore[arg-type]


def test_the_cli_refuses_a_serving_python_without_a_gpu(cpu_torch_python: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    proc = subprocess.run(
        [sys.executable, "-m", "sm120patch", "bench", "--python", str(cpu_torch_python), "--tp", "2", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error == f"torch 2.13.0+cpu in {cpu_torch_python} sees no CUDA GPU: nothing to measure"


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_two_real_ranks_measure_check_and_judge(cpu_torch_python: Path, dtype: str) -> None:
    events: list[tuple[int, dict]] = []
    result = run(
        settings(cpu_torch_python, dtype=dtype), read_call(None, None), "`--off`", lambda r, e: events.append((r, e))
    )
    assert [row.tokens for row in result.rows] == [1, 8, 64]
    assert all(row.ok for row in result.rows), [row.max_abs_error for row in result.rows]
    for row in result.rows:
        assert 0 < row.max_abs_error["norm"] < row.tolerance["atol"] * 4  # rounding, not zero, not garbage
        assert row.fused.median_us > 0 and row.fused.p90_us >= row.fused.median_us
    assert result.exit_code == 0
    assert result.baseline.source == "stand-in" and result.baseline.indicative
    assert result.baseline.allreduce == ("torch.distributed all_reduce (gloo)",)
    assert result.baseline.norm == "torch (add + RMSNorm as separate ops)"
    # sglang is not installed in this interpreter: the rank says so, and the verdict carries it
    assert result.baseline.why == (
        "sglang's modules do not import here: ModuleNotFoundError: No module named 'sglang'",
    )
    assert result.verdict.text.startswith("indicative only (sglang's modules do not import here")
    assert result.versions["torch"] == "2.13.0+cpu"
    assert result.verdict.kind in (Kind.PAYS, Kind.COSTS, Kind.EVEN, Kind.MIXED)
    phases = [e["phase"] for rank, e in events if rank == 1 and e["event"] == "phase"]
    assert phases == ["setup", "process-group", "workspace", "tokens 1", "tokens 8", "tokens 64"]


def test_a_kernel_that_returns_garbage_is_caught(cpu_torch_python: Path) -> None:
    result = run(settings(cpu_torch_python, fault="garbage"), read_call(None, None), "`--off`")
    assert [row.ok for row in result.rows] == [False, False, False]
    assert result.exit_code == 1
    assert result.verdict.kind is Kind.WRONG
    assert result.verdict.advice.startswith("the fused kernel gave wrong results at 1, 8, 64 tokens")


def test_the_torch_baseline_is_flagged(cpu_torch_python: Path) -> None:
    result = run(settings(cpu_torch_python, tokens=(1, 8)), read_call(None, None), "`--off`")
    assert result.notes[-1].startswith("unfused ran torch (add + RMSNorm as separate ops), not sglang's")


def test_a_pass_for_the_unfused_path_alone_times_no_fused_call(cpu_torch_python: Path) -> None:
    """The PCIe-IPC pass (``only_unfused``): two real ranks time sglang's unfused path and the
    allreduce, and never call the fused kernel."""
    from sm120patch.bench.kernel.measure import combine_unfused, free_port, rank_env
    from sm120patch.bench.remote import bench_rank
    from sm120patch.runner import ranks as launch

    config = {
        "device": "cpu-standin",
        "fault": "garbage",  # a fused call would be wrong: none is made, so no row can say so
        "dtype": "bf16",
        "hidden": 256,
        "eps": 1e-6,
        "tokens": [1, 8],
        "calls": 2,
        "replays": 30,
        "call": read_call(None, None).values,
        "only_unfused": True,
    }
    env = dict(rank_env(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    logs = launch.launch(str(cpu_torch_python), bench_rank.__file__, ["run", json.dumps(config)], 2, env, 120.0)
    rows = [e for log in logs for e in log.events if e["event"] == "row"]
    assert len(rows) == 4 and all("fused" not in row and row["ok"] for row in rows)
    assert all(row["unfused"]["median_us"] > 0 for row in rows)
    second = combine_unfused(logs)
    assert sorted(second) == [1, 8]
    assert {name for _, name in second.values()} == {"torch.distributed all_reduce (gloo)"}


def test_with_a_real_sglang_that_cannot_import_the_stand_ins_are_named_and_why(
    cpu_torch_python: Path, release, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real sglang 0.5.13 on the ranks' path, in the CPU-torch interpreter: its modules do not
    import here (sglang's utils import third-party packages at module level -- triton,
    torchvision's CUDA build, orjson ... -- that a CPU-only interpreter from the package index
    does not have), so the ranks measure the stand-ins, name the import error, and the verdict is
    indicative.  What only the GPU run covers (docs/bench.md, "sglang 0.5.13 on one H200"):
    sglang's init_distributed_environment / initialize_model_parallel, GroupCoordinator.all_reduce
    and RMSNorm.forward, captured in sglang's graph_capture(), and its fused entry."""
    site = release("0.5.13").parent
    monkeypatch.setenv("PYTHONPATH", str(site))
    result = run(settings(cpu_torch_python, tokens=(1, 8)), read_call(site / "sglang", "0.5.13"), "`--off`")
    assert result.baseline.source == "stand-in"
    (why,) = result.baseline.why
    assert why.startswith("sglang's modules do not import here: ModuleNotFoundError: No module named ")
    assert result.verdict.text.startswith(f"indicative only ({why}): ")
    assert result.exit_code == 0 and all(row.ok for row in result.rows)


def test_baseline_sglang_refuses_instead_of_measuring_stand_ins(cpu_torch_python: Path) -> None:
    from sm120patch.errors import EnvironmentProblem

    with pytest.raises(EnvironmentProblem, match="sglang's modules do not import here: ModuleNotFoundError"):
        run(settings(cpu_torch_python, tokens=(1,), baseline="sglang"), read_call(None, None), "`--off`")


def fake_sglang_without_a_server(root: Path) -> Path:
    """FakeSglang: modules that import, and a parallel state that refuses to be set up, as a
    release does whose parallel state reads the config only its server's launcher publishes."""
    files = {
        "sglang/__init__.py": "",
        "sglang/srt/__init__.py": "",
        "sglang/srt/distributed/__init__.py": "",
        "sglang/srt/distributed/parallel_state.py": (
            "_ENABLE_CUSTOM_ALL_REDUCE = True\n"
            "def set_custom_all_reduce(enable):\n    pass\n"
            "def init_distributed_environment(world_size=-1, rank=-1, distributed_init_method='env://',"
            " local_rank=-1, backend='nccl'):\n"
            "    raise ValueError(\"config namespace 'parallel' not published\")\n"
        ),
        "sglang/srt/layers/__init__.py": "",
        "sglang/srt/layers/flashinfer_comm_fusion.py": "",
        "sglang/srt/layers/layernorm.py": "",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_a_parallel_state_that_cannot_be_set_up_falls_back_to_named_stand_ins(
    cpu_torch_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sm120patch.errors import EnvironmentProblem

    monkeypatch.setenv("PYTHONPATH", str(fake_sglang_without_a_server(tmp_path)))
    result = run(settings(cpu_torch_python, tokens=(1, 8)), read_call(None, None), "`--off`", sglang_version="0.5.23")
    assert result.baseline.source == "stand-in"
    assert result.baseline.why == (
        "sglang 0.5.23's parallel state cannot be set up outside its server (ValueError: config namespace "
        "'parallel' not published)",
    )
    assert result.exit_code == 0 and all(row.ok for row in result.rows)
    with pytest.raises(EnvironmentProblem, match="sglang's parallel state cannot be set up here: ValueError"):
        run(settings(cpu_torch_python, tokens=(1,), baseline="sglang"), read_call(None, None), "`--off`")
