"""bench's measuring step in this process: the refusals read from the probe's answer, the
rows combined from the ranks' events, the baseline they name, and ``run`` from probe to
result with the probe and the ranks stood in for (the real ranks run in test_bench_cpu.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sm120patch.bench.kernel import measure
from sm120patch.bench.kernel.estimate import Model
from sm120patch.bench.kernel.measure import Baseline, BaselineSource, BenchResult, Row, Settings, Timing, refusal
from sm120patch.bench.kernel.verdict import Kind, judge
from sm120patch.bench.remote import bench_rank
from sm120patch.errors import EnvironmentProblem, ExitCode, NotAsAsked
from sm120patch.runner import Answer, ProbeError
from sm120patch.runner import ranks as launch
from sm120patch.runner.ranks import FailureKind, RankFailure, RankLog
from sm120patch.sglang import flashinfer as flashinfer_kernel
from sm120patch.sglang.fusion_call import read_call
from tests.bench.fakes import fake_serving_site
from tests.bench.kernel.rows import measured_row

PY = "/env/bin/python"
SM120 = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
H200 = "NVIDIA H200"


def gpu(index: int, name: str = SM120, major: int = 12) -> dict[str, Any]:
    return {"index": index, "name": name, "capability": [major, 0]}


def probe(count: int = 2, **changes: Any) -> dict[str, Any]:
    """What bench_rank.py's probe answers on ``count`` SM120 GPUs with FlashInfer 0.6.18."""
    answer: dict[str, Any] = {
        "torch": {"ok": True, "version": "2.11.0", "error": None},
        "gpus": [gpu(i) for i in range(count)],
        "cuda_visible_devices": None,
        "flashinfer": {"ok": True, "version": "0.6.18", "package_dir": None, "unified_api": True, "comm_error": None},
        "p2p": [[i, j, True] for i in range(count) for j in range(count) if i != j],
    }
    answer.update(changes)
    return answer


def test_a_host_that_can_run_is_not_refused() -> None:
    assert refusal(probe(2), 2, PY) is None
    assert refusal(probe(4), None, PY) is None
    assert refusal(probe(16), None, PY) is None


@pytest.mark.parametrize(
    ("torch", "says"),
    [
        (
            {"ok": False, "error": "ModuleNotFoundError: No module named 'torch'"},
            "ModuleNotFoundError: No module named 'torch'",
        ),
        (None, "None"),
    ],
)
def test_no_torch_names_the_interpreter_and_the_error(torch: object, says: str) -> None:
    assert refusal(probe(torch=torch), 2, PY) == (
        f"torch does not import in {PY} ({says}): bench runs in the interpreter that serves sglang (--python)"
    )


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({}, "torch 2.11.0 in /env/bin/python sees no CUDA GPU: nothing to measure"),
        (
            {"torch": {"ok": True, "version": "2.11.0", "error": "CUDA driver initialization failed"}},
            "torch 2.11.0 in /env/bin/python sees no CUDA GPU: CUDA driver initialization failed: nothing to measure",
        ),
        (
            {"cuda_visible_devices": ""},
            "torch 2.11.0 in /env/bin/python sees no CUDA GPU (CUDA_VISIBLE_DEVICES=''): nothing to measure",
        ),
        (
            {"cuda_visible_devices": "7", "torch": {"ok": True, "version": "2.11.0", "error": "no device"}},
            "torch 2.11.0 in /env/bin/python sees no CUDA GPU (CUDA_VISIBLE_DEVICES='7'): no device: "
            "nothing to measure",
        ),
    ],
)
def test_no_gpu_says_what_hides_them(changes: dict[str, Any], says: str) -> None:
    assert refusal(probe(0, **changes), 2, PY) == says
    assert refusal(probe(0, **changes, gpus=None), None, PY) == says


def test_one_gpu_or_fewer_than_tp_names_the_gpus() -> None:
    one = probe(1, gpus=[gpu(0, H200, 9)])
    assert refusal(one, None, PY) == (
        "one GPU is visible to torch: an allreduce needs --tp 2 or more GPUs (GPU 0: NVIDIA H200)"
    )
    assert refusal(probe(2), 4, PY) == (f"--tp 4 needs 4 GPUs; torch in {PY} sees 2 (GPU 0: {SM120}; GPU 1: {SM120})")
    assert refusal(probe(4), 4, PY) is None


@pytest.mark.parametrize(
    ("count", "tp", "how"),
    [(3, None, "3 GPUs are visible; --tp 3"), (8, 6, "--tp 6"), (32, None, "32 GPUs are visible; --tp 32")],
)
def test_a_rank_count_the_kernel_does_not_take_is_refused(count: int, tp: int | None, how: str) -> None:
    world = tp or count
    assert refusal(probe(count), tp, PY) == (
        "FlashInfer's trtllm fused allreduce runs on 2, 4, 8, 16 ranks only ('unsupported ranks number'), so "
        f"sglang cannot fuse at TP {world}: {how} has nothing to measure"
    )


@pytest.mark.parametrize(
    ("flashinfer", "says"),
    [
        (
            {"ok": False, "error": "ImportError: libcudart.so.13"},
            f"FlashInfer does not import in {PY} (ImportError: libcudart.so.13): there is no fused kernel to measure",
        ),
        (None, f"FlashInfer does not import in {PY} (None): there is no fused kernel to measure"),
        (
            {"ok": True, "version": "0.6.18", "comm_error": "OSError: libnccl.so.2", "unified_api": True},
            f"flashinfer.comm does not import in {PY}: OSError: libnccl.so.2",
        ),
        (
            {"ok": True, "version": "0.2.9", "unified_api": False},
            "FlashInfer 0.2.9 has no create_allreduce_fusion_workspace/allreduce_fusion: bench needs FlashInfer "
            "0.6.17 or newer",
        ),
    ],
)
def test_a_flashinfer_without_the_fused_kernel_is_refused(flashinfer: object, says: str) -> None:
    assert refusal(probe(2, flashinfer=flashinfer), 2, PY) == says


def test_a_flashinfer_built_without_these_gpus_is_refused_with_where_it_says_so(tmp_path: Path) -> None:
    site = fake_serving_site(tmp_path, [], flashinfer=("0.6.3", [9, 10]))
    package = site / "flashinfer"
    source = flashinfer_kernel.inspect("0.6.3", package).source
    assert source == f"{package / 'jit' / 'comm.py'}: gen_trtllm_comm_module(supported_major_versions=[9, 10])"
    flashinfer = {"ok": True, "version": "0.6.3", "package_dir": str(package), "unified_api": True}
    assert refusal(probe(2, flashinfer=flashinfer), 2, PY) == (
        f"FlashInfer 0.6.3 builds its trtllm allreduce for SM [9, 10] only, and these GPUs are SM [12] ({source}); "
        "upgrade to flashinfer-python>=0.6.17"
    )
    mixed = [gpu(0, H200, 9), gpu(1, H200, 9), gpu(2), gpu(3)]
    assert refusal(probe(4, gpus=mixed, flashinfer=flashinfer), 2, PY) is None  # only the first TP GPUs run
    assert refusal(probe(4, gpus=mixed, flashinfer=flashinfer), 4, PY) == (
        f"FlashInfer 0.6.3 builds its trtllm allreduce for SM [9, 10] only, and these GPUs are SM [9, 12] ({source}); "
        "upgrade to flashinfer-python>=0.6.17"
    )
    unread = {"ok": True, "version": "0.6.3", "package_dir": None, "unified_api": True}
    assert refusal(probe(2, flashinfer=unread), 2, PY) is None  # judged by its version: no majors to refuse by


@pytest.mark.parametrize(
    ("p2p", "says"),
    [
        ([[0, 1, True], [1, 0, False]], "no P2P access from GPU 1 to GPU 0"),
        ([[0, 2, False], [2, 0, False], [3, 1, False], [1, 3, False]], None),
        ([[0, 1, True], [1, 0, True], [0, 1, False]], "no P2P access from GPU 0 to GPU 1"),
        (None, None),
    ],
)
def test_p2p_is_needed_between_the_first_tp_gpus_only(p2p: object, says: str | None) -> None:
    found = refusal(probe(4, p2p=p2p), 2, PY)
    if says is None:
        assert found is None
    else:
        assert found == (
            f"{says} (torch.cuda.can_device_access_peer): FlashInfer's trtllm allreduce needs P2P between every "
            "pair, so fusion cannot run on this host"
        )


def timing(median: float) -> dict[str, float]:
    return {"median_us": median, "p90_us": median * 2}


def row_event(tokens: int, fused: float, unfused: float, **extra: Any) -> dict[str, Any]:
    event = {
        "event": "row",
        "tokens": tokens,
        "fused": timing(fused),
        "unfused": timing(unfused),
        "allreduce": timing(unfused / 2),
        "max_abs_error": {"norm": 0.01, "residual": 0.0},
        "tolerance": {"atol": 0.03, "rtol": 0.03},
        "ok": True,
    }
    event.update(extra)
    return event


def test_combine_gives_one_row_per_token_count_in_order_from_every_rank() -> None:
    rank0 = RankLog(
        0,
        events=[
            {"event": "phase", "phase": "measure"},
            row_event(128, 10.0, 60.0, allreduce_name="NCCL", allreduce_why="over the limit"),
            row_event(1, 5.0, 20.0, max_abs_error={"norm": 0.02, "residual": 0.1}),
            {"event": "done", "norm": "x"},
        ],
    )
    rank1 = RankLog(
        1,
        events=[
            row_event(1, 4.0, 25.0, max_abs_error={"norm": 0.03, "residual": 0.0}, ok=False, tolerance={"atol": 1.0}),
            row_event(128, 12.0, 50.0, allreduce_name="custom", allreduce_why=""),
        ],
    )
    rank1.events[1]["fused"] = {"median_us": 11.0, "p90_us": 30.0}  # p90 and median each the largest
    assert measure.combine([rank0, rank1]) == [
        measured_row(
            1,
            Timing(5.0, 10.0),
            Timing(25.0, 50.0),
            Timing(12.5, 25.0),
            {"norm": 0.03, "residual": 0.1},
            {"atol": 0.03, "rtol": 0.03},
            False,
            "",
            "",
        ),
        measured_row(
            128,
            Timing(11.0, 30.0),
            Timing(60.0, 120.0),
            Timing(30.0, 60.0),
            {"norm": 0.01, "residual": 0.0},
            {"atol": 0.03, "rtol": 0.03},
            True,
            "NCCL",
            "over the limit",
        ),
    ]
    assert measure.combine([RankLog(0, events=[{"event": "done"}])]) == []


def test_the_baseline_names_each_allreduce_once_in_token_order() -> None:
    rows = measure.combine(
        [
            RankLog(
                0,
                events=[
                    row_event(1, 5.0, 20.0, allreduce_name="custom"),
                    row_event(8, 5.0, 20.0),
                    row_event(2048, 5.0, 20.0, allreduce_name="NCCL"),
                    row_event(128, 5.0, 20.0, allreduce_name="custom"),
                ],
            )
        ]
    )
    done = {"source": "sglang", "norm": "sglang RMSNorm.forward", "fused": "fused call", "notes": ["a", 7]}
    assert measure.read_baseline(done, rows) == Baseline(
        BaselineSource.SGLANG, ("custom", "NCCL"), "sglang RMSNorm.forward", "fused call", ("a", "7")
    )
    assert measure.read_baseline({"norm": "torch", "notes": None}, []) == Baseline(
        BaselineSource.STAND_IN, (), "torch", "", ()
    )


def test_a_baseline_describes_its_allreduces_and_norm() -> None:
    assert Baseline(BaselineSource.SGLANG, ("custom", "NCCL"), "norm", "f").describe() == "custom / NCCL, then norm"
    assert Baseline(BaselineSource.STAND_IN, (), "torch", "f").describe() == "allreduce, then torch"
    assert Baseline(BaselineSource.SGLANG, (), "n", "f").indicative is False
    assert Baseline(BaselineSource.STAND_IN, (), "n", "f").indicative is True


def test_fused_against_the_allreduce_floor() -> None:
    row = measured_row(1, Timing(5.0, 6.0), Timing(20.0, 21.0), Timing(4.0, 5.0), {}, {}, True)
    assert row.vs_floor_pct == 25.0
    assert row.point == measure.Point(1, 5.0, 20.0, True)


def test_the_ranks_run_with_multicast_off_and_unbuffered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOMETHING_OF_THE_USER", "kept")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    env = measure.rank_env()
    assert env == {**os.environ, **bench_rank.MULTICAST_ENV, "PYTHONUNBUFFERED": "1"}
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["SOMETHING_OF_THE_USER"] == "kept"
    assert os.environ["NCCL_NVLS_ENABLE"] == "1"


def test_a_free_port_is_an_unprivileged_one() -> None:
    port = measure.free_port()
    assert isinstance(port, int) and 1024 <= port < 65536


def test_the_probe_runs_bench_rank_with_the_world_and_its_failure_is_an_environment_problem(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[Any, ...]] = []

    def run_script(python: str, script: str, args: list[str], **kwargs: Any) -> Answer:
        calls.append((python, script, args, kwargs))
        return Answer(0, json.dumps({"torch": {"ok": True}}), "")

    monkeypatch.setattr(measure, "run_script", run_script)
    assert measure.run_probe(PY, 4, 12.5) == {"torch": {"ok": True}}
    ((python, script, args, kwargs),) = calls
    assert (python, script, args) == (PY, bench_rank.__file__, ["probe", "4"])
    assert kwargs == {"step": "import torch and FlashInfer for bench", "timeout": 12.5, "env": measure.rank_env()}

    def fails(*args: Any, **kwargs: Any) -> Answer:
        raise ProbeError(f"{PY} could not import torch and FlashInfer for bench: it ran past 30 s")

    monkeypatch.setattr(measure, "run_script", fails)
    with pytest.raises(EnvironmentProblem) as raised:
        measure.run_probe(PY, 2, 1.0)
    assert str(raised.value) == f"{PY} could not import torch and FlashInfer for bench: it ran past 30 s"

    monkeypatch.setattr(measure, "run_script", lambda *a, **k: Answer(0, "[1]", ""))
    with pytest.raises(EnvironmentProblem) as raised:
        measure.run_probe(PY, 2, 1.0)
    assert str(raised.value) == (
        f"{PY} could not import torch and FlashInfer for bench: it printed a JSON list, not an object"
    )


class Ranks:
    """Stands in for the probe and the ranks: records what ``run`` asked of them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, answer: dict[str, Any], done: dict[str, Any]) -> None:
        self.answer = answer
        self.done = done
        self.probed: list[tuple[str, int, float]] = []
        self.launched: list[dict[str, Any]] = []
        self.failure: RankFailure | None = None
        monkeypatch.setattr(measure, "run_probe", self.run_probe)
        monkeypatch.setattr(launch, "launch", self.launch)
        monkeypatch.setattr(measure, "free_port", lambda: 29512)

    def run_probe(self, python: str, world: int, timeout: float) -> dict[str, Any]:
        self.probed.append((python, world, timeout))
        return self.answer

    def launch(
        self, python: str, script: str, args: list[str], world: int, env: dict, timeout: float, on_event: Any
    ) -> list[RankLog]:
        self.launched.append(
            {"python": python, "script": script, "args": args, "world": world, "env": env, "timeout": timeout}
        )
        on_event(0, {"event": "phase", "phase": "measure"})
        if self.failure is not None:
            raise self.failure
        rows = [row_event(1, 5.0, 20.0), row_event(2048, 150.0, 100.0)]
        return [RankLog(0, events=[*rows, {"event": "done", **self.done}]), RankLog(1, events=rows)]


STANDIN_DONE = {
    "source": "stand-in",
    "norm": "torch (add + RMSNorm as separate ops)",
    "fused": "fi",
    "notes": ["no sglang"],
    "versions": {"torch": "2.11"},
}


def settings(**changes: Any) -> Settings:
    base = Settings(PY, 2, (1, 2048), 7168, "bf16", 300.0)
    return Settings(**{**base.__dict__, **changes})


def test_run_measures_at_the_tp_asked_and_judges_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = Ranks(monkeypatch, probe(4), STANDIN_DONE)
    seen: list[tuple[int, dict]] = []
    call = read_call(None, None)
    model = Model(2, 64, False, "x")
    result = measure.run(
        settings(eps=1e-5, fault="garbage", baseline="stand-in", custom_allreduce=False),
        call,
        "`--off`",
        on_event=lambda rank, event: seen.append((rank, event)),
        sglang_version="0.5.23",
        model=model,
    )
    assert ranks.probed == [(PY, 2, 30.0)]
    assert seen == [(0, {"event": "phase", "phase": "measure"})]
    (launched,) = ranks.launched
    assert (launched["python"], launched["script"], launched["world"], launched["timeout"]) == (
        PY,
        bench_rank.__file__,
        2,
        300.0,
    )
    assert launched["args"][0] == "run"
    assert json.loads(launched["args"][1]) == {
        "device": "cuda",
        "fault": "garbage",
        "dtype": "bf16",
        "hidden": 7168,
        "eps": 1e-5,
        "tokens": [1, 2048],
        "calls": 10,
        "replays": 40,
        "call": json.loads(json.dumps(dict(call.for_world(2).values, routes_allreduce=True))),
        "baseline": "stand-in",
        "custom_allreduce": False,
        "sglang_version": "0.5.23",
    }
    assert launched["env"] == {**measure.rank_env(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29512"}
    rows = measure.combine(ranks.launch(PY, "", [], 2, {}, 1.0, lambda rank, event: None))
    baseline = Baseline(BaselineSource.STAND_IN, (), "torch (add + RMSNorm as separate ops)", "fi", ("no sglang",))
    assert result == BenchResult(
        settings=settings(eps=1e-5, fault="garbage", baseline="stand-in", custom_allreduce=False),
        tp=2,
        call=call.for_world(2),
        probe=probe(4),
        rows=rows,
        baseline=baseline,
        versions={"torch": "2.11"},
        verdict=judge([r.point for r in rows], 2, "`--off`", indicative=("no sglang",)),
        notes=[*call.notes, measure.floor_note(rows, baseline.norm)],
        model=model,
    )
    assert result.verdict.kind is Kind.MIXED and result.verdict.text.startswith("indicative only (no sglang): ")
    assert result.exit_code is ExitCode.OK


def test_run_on_every_gpu_with_sglangs_own_code_adds_no_floor_note(monkeypatch: pytest.MonkeyPatch) -> None:
    done = {"source": "sglang", "norm": "sglang 0.5.23 RMSNorm.forward", "notes": ["ignored"]}
    ranks = Ranks(monkeypatch, probe(8), done)
    call = read_call(None, None)
    result = measure.run(settings(tp=None, timeout=5.0), call, "`--off`")
    assert ranks.probed == [(PY, 0, 5.0)]
    assert ranks.launched[0]["world"] == 8 and json.loads(ranks.launched[0]["args"][1])["sglang_version"] is None
    assert (result.tp, result.notes, result.versions, result.model) == (8, list(call.notes), {}, None)
    assert result.verdict.indicative == ()
    assert result.baseline == Baseline(BaselineSource.SGLANG, (), "sglang 0.5.23 RMSNorm.forward", "", ("ignored",))


def test_a_stand_in_run_of_sglangs_own_norm_kernel_adds_no_floor_note(monkeypatch: pytest.MonkeyPatch) -> None:
    done = {"source": "stand-in", "norm": f"{measure.SGLANG_NORM} (sgl-kernel 0.3)", "notes": ["no sglang"]}
    Ranks(monkeypatch, probe(2), done)
    call = read_call(None, None)
    result = measure.run(settings(), call, "`--off`")
    assert result.notes == list(call.notes)
    assert result.verdict.indicative == ("no sglang",)


def test_the_cpu_stand_in_is_never_refused_and_runs_two_ranks_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = Ranks(monkeypatch, probe(0, torch={"ok": False}), STANDIN_DONE)
    result = measure.run(settings(tp=None, device="cpu-standin"), read_call(None, None), "`--off`")
    assert result.tp == 2 and ranks.launched[-1]["world"] == 2
    assert json.loads(ranks.launched[-1]["args"][1])["device"] == "cpu-standin"
    result = measure.run(settings(tp=4, device="cpu-standin"), read_call(None, None), "`--off`")
    assert result.tp == 4 and ranks.launched[-1]["world"] == 4


def test_a_refused_host_launches_no_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = Ranks(monkeypatch, probe(2), STANDIN_DONE)
    with pytest.raises(EnvironmentProblem) as raised:
        measure.run(settings(tp=4), read_call(None, None), "`--off`")
    assert str(raised.value) == f"--tp 4 needs 4 GPUs; torch in {PY} sees 2 (GPU 0: {SM120}; GPU 1: {SM120})"
    assert ranks.launched == []


@pytest.mark.parametrize(
    ("kind", "error", "says"),
    [
        (
            "no-kernel",
            EnvironmentProblem,
            "FlashInfer has no trtllm allreduce kernel for these GPUs (rank 1, phase workspace: no SM120 build)",
        ),
        ("environment", EnvironmentProblem, "rank 1, phase workspace: no SM120 build"),
        (
            "declined",
            NotAsAsked,
            "no SM120 build: a server with fusion on would run unfused on these GPUs (rank 1)",
        ),
        ("failure", RankFailure, "rank 1, phase workspace: no SM120 build"),
    ],
)
def test_a_rank_failure_is_said_by_its_kind(
    monkeypatch: pytest.MonkeyPatch, kind: str, error: type[Exception], says: str
) -> None:
    ranks = Ranks(monkeypatch, probe(2), STANDIN_DONE)
    ranks.failure = RankFailure(1, "workspace", FailureKind(kind), "no SM120 build")
    with pytest.raises(error) as raised:
        measure.run(settings(), read_call(None, None), "`--off`")
    assert type(raised.value) is error and str(raised.value) == says
    assert raised.value.__cause__ is (None if error is RankFailure else ranks.failure)


def test_a_wrong_row_is_exit_1() -> None:
    good = measured_row(1, Timing(5.0, 6.0), Timing(20.0, 21.0), Timing(4.0, 5.0), {}, {}, True)
    bad = measured_row(2, Timing(5.0, 6.0), Timing(20.0, 21.0), Timing(4.0, 5.0), {}, {}, False)
    call = read_call(None, None)
    base = Baseline(BaselineSource.SGLANG, (), "n", "f")

    def result(rows: list[Row]) -> BenchResult:
        return BenchResult(settings(), 2, call, {}, rows, base, {}, judge([r.point for r in rows], 2))

    assert result([good]).exit_code is ExitCode.OK
    assert result([good, bad]).exit_code is ExitCode.NOT_AS_ASKED
    assert result([]).exit_code is ExitCode.OK


class PcieRanks(Ranks):
    """The ranks of a 0.5.23 PCIe host: a first pass with sglang's own code (no full NVLink,
    plain allreduces routed to kAllReduce), then the unfused pass with the PCIe-IPC allreduce."""

    def launch(
        self, python: str, script: str, args: list[str], world: int, env: dict, timeout: float, on_event: Any
    ) -> list[RankLog]:
        self.launched.append(
            {"python": python, "script": script, "args": args, "world": world, "env": env, "timeout": timeout}
        )
        on_event(0, {"event": "phase", "phase": f"pass {len(self.launched)}"})
        if len(self.launched) == 1:
            routed = {"allreduce_on": timing(6.0)}
            rows = [row_event(1, 5.0, 20.0, **routed), row_event(2048, 150.0, 100.0, **routed)]
            done = {"event": "done", "source": "sglang", "full_nvlink": False, "norm": "sglang RMSNorm", "notes": []}
            return [RankLog(0, events=[*rows, done]), RankLog(1, events=rows)]
        if self.failure is not None:
            raise self.failure
        ipc = "FlashInfer PCIe-IPC allreduce (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE)"
        second = [
            {"event": "phase", "phase": "tokens 1"},  # not a row: passed over
            {"event": "row", "tokens": 1, "unfused": timing(4.0), "allreduce_name": ipc},
            {"event": "row", "tokens": 2048, "unfused": timing(120.0)},  # a rank that named none
        ]
        return [RankLog(0, events=second), RankLog(1, events=second)]


def test_a_pcie_host_of_a_release_with_the_option_measures_it_in_a_second_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ranks = PcieRanks(monkeypatch, probe(2), {})
    ports = iter([29512, 29513])
    monkeypatch.setattr(measure, "free_port", lambda: next(ports))
    seen: list[tuple[int, dict]] = []
    result = measure.run(
        settings(pcie_ipc=True), read_call(None, None), "`--off`", on_event=lambda r, e: seen.append((r, e))
    )
    first, second = ranks.launched
    assert "only_unfused" not in json.loads(first["args"][1])
    assert second["args"][0] == "run"
    assert json.loads(second["args"][1]) == {**json.loads(first["args"][1]), "only_unfused": True}
    assert (second["python"], second["script"], second["world"], second["timeout"]) == (
        PY,
        bench_rank.__file__,
        2,
        300.0,
    )
    assert second["env"] == {**first["env"], measure.PCIE_IPC_FLAG: "1", "MASTER_PORT": "29513"}
    assert seen == [
        (0, {"event": "phase", "phase": "pass 1"}),
        (0, {"event": "phase", "phase": f"unfused again with {measure.PCIE_IPC_FLAG}=1"}),
        (0, {"event": "phase", "phase": "pass 2"}),
    ]
    assert SGLANG_NOTE_PCIE in result.notes
    assert [(r.tokens, r.pcie_ipc, r.pcie_ipc_name, r.fastest) for r in result.rows] == [
        (1, Timing(4.0, 8.0), "FlashInfer PCIe-IPC allreduce (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE)", "pcie-ipc"),
        (2048, Timing(120.0, 240.0), "", "unfused"),
    ]
    assert [r.allreduce_on for r in result.rows] == [Timing(6.0, 12.0), Timing(6.0, 12.0)]
    assert result.notes[-2] == (
        "with fusion on, this release also sends plain allreduces (attention-TP and MoE groups) to FlashInfer's "
        "kAllReduce instead of its own allreduce: 6.0 vs 10.0 µs at 1 token, 6.0 vs 50.0 µs at 2048 tokens"
    )


SGLANG_NOTE_PCIE = (
    f"this release has {measure.PCIE_IPC_FLAG}=1 and these GPUs have no full NVLink: sglang's unfused path "
    "was measured again with it (column PCIe-IPC)"
)


def test_a_second_pass_that_fails_is_said_and_the_first_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = PcieRanks(monkeypatch, probe(2), {})
    ranks.failure = RankFailure(1, "tokens 1", FailureKind.FAILURE, "exit 1: boom")
    result = measure.run(settings(pcie_ipc=True), read_call(None, None), "`--off`")
    assert len(ranks.launched) == 2
    assert result.notes[-1] == f"{measure.PCIE_IPC_FLAG}=1 could not be measured: rank 1, phase tokens 1: exit 1: boom"
    assert all(r.pcie_ipc is None for r in result.rows) and result.exit_code is ExitCode.OK


def test_no_second_pass_without_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = PcieRanks(monkeypatch, probe(2), {})
    result = measure.run(settings(pcie_ipc=False), read_call(None, None), "`--off`")
    assert len(ranks.launched) == 1 and SGLANG_NOTE_PCIE not in result.notes
