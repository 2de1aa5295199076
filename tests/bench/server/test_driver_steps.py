"""The server bench's driver, step by step, in this process: which release and host it
refuses and with which sentence, the command and environment of each run, how a run is
checked, and how the runs become rows, problems and notes.  Where a step would start a
process, a stand-in named in its test answers instead (``launch.run``, ``run_script`` or
the driver's ``_one``); the end-to-end tests (test_driver.py) run the fake server."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TextIO

import pytest

from sm120patch.bench.remote import bench_rank, server_hook
from sm120patch.bench.server import driver, launch
from sm120patch.bench.server.configs import BY_NAME
from sm120patch.bench.server.counter import Calls, Counts
from sm120patch.bench.server.flags import Flags
from sm120patch.bench.server.verdict import Kind, Row
from sm120patch.errors import EnvironmentProblem, ExitCode
from sm120patch.runner import ProbeError
from sm120patch.sglang.options import BACKEND, ENABLE, HATCH
from tests.bench.server.hand import (
    FLAGS,
    MODEL,
    PACKAGE,
    PYTHON,
    GiB,
    fused,
    gpu,
    measurement,
    probe,
    result,
    run,
    settings,
)

NO_HATCH = Flags((ENABLE,), ())


# --- the release ---------------------------------------------------------------------------


def test_the_benchmark_module_of_each_layout(tmp_path: Path) -> None:
    package = tmp_path / "sglang"
    (package / "benchmark").mkdir(parents=True)
    assert driver.bench_module(package) is None
    (package / "bench_one_batch.py").mkdir()  # not a file
    assert driver.bench_module(package) is None
    (package / "bench_one_batch.py").rmdir()
    (package / "bench_one_batch.py").write_text("")
    assert driver.bench_module(package) == "sglang.bench_one_batch"
    (package / "benchmark" / "one_batch.py").write_text("")
    assert driver.bench_module(package) == "sglang.benchmark.one_batch"  # 0.5.15+, where both are


def test_a_release_without_benchmark_or_fusion_is_refused(tmp_path: Path) -> None:
    package = tmp_path / "sglang"
    package.mkdir()
    with pytest.raises(EnvironmentProblem) as raised:
        driver.refuse_release(settings(package_dir=package, version=None))
    assert str(raised.value) == (
        f"sglang (unknown version) in {package} has no bench_one_batch (sglang/bench_one_batch.py or "
        "sglang/benchmark/one_batch.py): there is no offline benchmark to run"
    )
    (package / "bench_one_batch.py").write_text("")
    with pytest.raises(EnvironmentProblem) as raised:
        driver.refuse_release(settings(package_dir=package, version="0.4.8", options=frozenset({HATCH})))
    assert str(raised.value) == (
        "sglang 0.4.8 has no FlashInfer allreduce fusion option in its server arguments: the release is older "
        "than the fusion (0.4.9), so there is nothing to compare"
    )
    assert driver.refuse_release(settings(package_dir=package, options=frozenset({ENABLE}))) == (
        "sglang.bench_one_batch",
        NO_HATCH,
    )


# --- the host ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "need"),
    [
        ((), 0.75),
        (("--mem-fraction-static=0.5",), 0.55),
        (("--mem-fraction-static", "0.6"), 0.65),
        (("--mem-fraction-static", "0.99"), 1.0),
        (("--mem-fraction-static=0.95",), 1.0),
        (("--chunked-prefill-size", "512", "--mem-fraction-static=0.3"), 0.35),
        (("--mem-fraction-static",), 0.75),  # no value after it
        (("--mem-fraction-static=high",), 0.75),
        (("--mem-fraction-static=high", "--mem-fraction-static=0.4"), 0.45),
        (("0.2", "--mem-fraction-static-x=0.1", "--mem-fraction-statics", "0.1"), 0.75),
        (("--mem-fraction-static=0.5=1",), 0.75),
    ],
)
def test_the_free_share_a_run_needs(args: tuple[str, ...], need: float) -> None:
    assert driver.required_free(args) == pytest.approx(need)


def test_what_the_host_refuses_in_one_sentence() -> None:
    two = [gpu(0), gpu(1)]
    assert driver.refusal(probe(two), settings()) is None
    assert driver.refusal(probe(two), settings(tp=None)) is None
    assert driver.refusal({"torch": {"ok": False, "error": "ModuleNotFoundError: torch"}}, settings()) == (
        f"torch does not import in {PYTHON} (ModuleNotFoundError: torch): bench server runs sglang there (--python)"
    )
    assert driver.refusal({}, settings()) == (
        f"torch does not import in {PYTHON} (None): bench server runs sglang there (--python)"
    )
    assert driver.refusal(probe([]), settings()) == (f"torch 2.11.0 in {PYTHON} sees no CUDA GPU: sglang cannot run")
    assert driver.refusal(dict(probe([], error="CUDA driver too old"), cuda_visible_devices=""), settings()) == (
        f"torch 2.11.0 in {PYTHON} sees no CUDA GPU (CUDA_VISIBLE_DEVICES=''): CUDA driver too old: sglang cannot run"
    )
    assert driver.refusal(probe(two), settings(tp=3)) == (
        f"--tp 3 needs 3 GPUs; torch in {PYTHON} sees 2 (GPU 0: NVIDIA RTX PRO 6000; GPU 1: NVIDIA RTX PRO 6000)"
    )


def test_a_busy_gpu_among_those_the_run_uses() -> None:
    busy = gpu(1, free=10 * GiB)
    assert driver.refusal(probe([gpu(0), busy]), settings()) == (
        "GPU 1 (NVIDIA RTX PRO 6000) has 10.0 of 95.0 GiB free: another process is using it, and sglang needs "
        "about 75% of it (a smaller --server-arg=--mem-fraction-static=F lowers that)"
    )
    assert driver.refusal(probe([gpu(0), busy]), settings(tp=1)) is None  # GPU 1 is not used at TP 1
    assert driver.refusal(probe([gpu(0), busy]), settings(tp=None)) is not None  # every GPU is used
    small = settings(server_args=("--mem-fraction-static=0.05",))
    assert driver.refusal(probe([gpu(0), busy]), small) is None
    # exactly the share needed is enough; a byte less is not
    assert driver.refusal(probe([gpu(0, 75, 100), gpu(1, 75, 100)]), settings()) is None
    assert driver.refusal(probe([gpu(0, 74, 100), gpu(1)]), settings()) is not None
    # memory torch did not report is not judged
    assert driver.refusal(probe([gpu(0, None, 100), gpu(1, 1, 0), gpu(2, 1.0, 100)]), settings(tp=3)) is None


def test_the_probe_runs_in_the_serving_interpreter_with_sglangs_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_script`` is replaced by a stand-in that records its call and answers a JSON object."""
    calls: list[tuple[Any, ...]] = []

    class Answer:
        def json_object(self, python: str, step: str) -> dict[str, Any]:
            calls.append(("json_object", python, step))
            return {"gpus": []}

    def fake_run_script(python: str, script: str, args: list[str], **kwargs: Any) -> Answer:
        calls.append((python, script, args, kwargs))
        return Answer()

    monkeypatch.setattr(driver, "run_script", fake_run_script)
    assert driver.run_probe(settings(tp=None, timeout=120.0)) == {"gpus": []}
    (python, script, args, kwargs), answer = calls
    step = "import torch and list the GPUs for bench server"
    assert (python, args, kwargs["step"], kwargs["timeout"]) == (PYTHON, ["64"], step, 60.0)
    assert script.endswith("server_probe.py")
    assert kwargs["env"]["PYTHONPATH"].split(os.pathsep)[0] == "/site"
    assert answer == ("json_object", PYTHON, step)
    calls.clear()
    driver.run_probe(settings(tp=4, timeout=30.0))
    assert (calls[0][2], calls[0][3]["timeout"]) == (["4"], 30.0)

    def failing(*args: Any, **kwargs: Any) -> Answer:
        raise ProbeError(f"{PYTHON} could not start: No such file or directory")

    monkeypatch.setattr(driver, "run_script", failing)
    with pytest.raises(EnvironmentProblem) as raised:
        driver.run_probe(settings())
    assert str(raised.value) == f"{PYTHON} could not start: No such file or directory"


def test_the_environment_of_the_serving_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/a", "", "/b"]))
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    env = driver.probe_env(PACKAGE, (Path("/hook"),))
    assert env["PYTHONPATH"] == os.pathsep.join(["/hook", "/site", "/a", "/b"])
    assert env["PYTHONUNBUFFERED"] == "1"
    assert {k: env[k] for k in bench_rank.MULTICAST_ENV} == bench_rank.MULTICAST_ENV
    assert env["NCCL_NVLS_ENABLE"] == "0"
    monkeypatch.delenv("PYTHONPATH")
    assert driver.probe_env(PACKAGE)["PYTHONPATH"] == "/site"
    run_env = driver.run_env(Path("/hook"), Path("/counts/on-1"), PACKAGE)
    assert run_env[server_hook.COUNT_DIR_ENV] == "/counts/on-1"
    assert run_env["PYTHONPATH"] == os.pathsep.join(["/hook", "/site"])
    assert run_env[server_hook.NUMPY_SEED_ENV] == str(driver.SEED)  # every run answers the same prompts


# --- one run -------------------------------------------------------------------------------


def test_the_command_of_each_run() -> None:
    user = MODEL.__class__(Path("/models/qwen"), Path("/scratch/tokenizer"), False, "Qwen3", 2048, 2)
    on = driver.command(
        settings(dtype="fp16", server_args=("--mem-fraction-static=0.5",)),
        "sglang.bench_one_batch",
        user,
        FLAGS,
        BY_NAME["fusion"],
        1,
    )
    assert on == [
        PYTHON,
        "-m",
        "sglang.bench_one_batch",
        "--model-path",
        "/models/qwen",
        "--load-format",
        "dummy",
        "--tokenizer-path",
        "/scratch/tokenizer",
        "--tp-size",
        "2",
        "--dtype",
        "float16",
        "--batch-size",
        "1",
        "8",
        "--input-len",
        "256",
        "--output-len",
        "64",
        "--run-name",
        "sm120patch-fusion-2",
        BACKEND,
        "trtllm",
        "--mem-fraction-static=0.5",
    ]
    off = driver.command(settings(), "m", MODEL, FLAGS, BY_NAME["default"], 0)
    assert "--tokenizer-path" not in off
    assert off[off.index("--dtype") + 1] == "bfloat16"
    assert off[-3:] == ["--run-name", "sm120patch-default-1", HATCH]
    assert driver.command(settings(), "m", MODEL, NO_HATCH, BY_NAME["default"], 0)[-1] == "sm120patch-default-1"


def test_the_model_of_the_runs(tmp_path: Path) -> None:
    bundled = driver._model(settings(hidden=256, layers=3, input_len=4000, output_len=200), tmp_path)
    assert (bundled.path, bundled.bundled, bundled.hidden, bundled.layers) == (tmp_path / "model", True, 256, 3)
    data = json.loads((tmp_path / "model" / "config.json").read_text())
    assert (data["max_position_embeddings"], data["torch_dtype"]) == (4200, "bfloat16")
    user = tmp_path / "user"
    user.mkdir()
    (user / "config.json").write_text('{"hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 6}')
    model = driver._model(settings(model_path=user, tp=3), tmp_path)
    assert (model.path, model.tokenizer, model.bundled) == (user, tmp_path / "tokenizer", False)
    with pytest.raises(EnvironmentProblem, match="--tp 4 does not divide"):
        driver._model(settings(model_path=user, tp=4), tmp_path)


def test_a_run_that_did_what_it_says_passes() -> None:
    assert driver._check(run("off", 1, {}), FLAGS, 2) is None
    assert driver._check(run("on", 1, {}), FLAGS, 2) is None
    assert driver._check(run("on", 1, {}, counts=Counts(entry=Calls(eager=1))), FLAGS, 2) is None


def test_an_off_run_that_fused() -> None:
    fused_off = run("off", 1, {}, counts=fused())
    assert driver._check(fused_off, FLAGS, 2) == (
        f"the fusion-off run ({HATCH}) launched the fused kernel 18x: sglang turned fusion on by itself for this model"
    )
    assert driver._check(fused_off, NO_HATCH, 2) == (
        f"the fusion-off run (no fusion option (this release has no {HATCH})) launched the fused kernel 18x: "
        "sglang turned fusion on by itself for this model and the release has no option to stop that"
    )


def test_an_on_run_that_never_fused_says_why() -> None:
    unfused = Counts(processes=2, sglang_processes=2)
    asked = f"fusion was asked for ({BACKEND} trtllm) but never ran: "
    fell_back = run(
        "on",
        1,
        {},
        counts=unfused,
        fallbacks=[("W Disabling flashinfer allreduce fusion permanently", "the workspace failed"), ("x", "y")],
    )
    assert driver._check(fell_back, FLAGS, 2) == (
        asked + "the workspace failed; sglang said: 'W Disabling flashinfer allreduce fusion permanently'"
    )
    assert driver._check(run("on", 1, {}, counts=unfused), FLAGS, 1) == asked + "at TP 1 there is no allreduce to fuse"
    assert driver._check(run("on", 1, {}, counts=Counts()), FLAGS, 2) == (
        asked + "the call counter did not reach sglang's processes"
    )
    assert driver._check(run("on", 1, {}, counts=unfused), FLAGS, 2) == (
        asked + "sglang logged no reason (its gate for these GPUs or this model is closed: `sm120patch verify`)"
    )


BENCH_OUTPUT = [
    "[TP0] Init torch distributed begin.",
    "FlashInfer workspace initialized for rank 0",
    "Warmup ...",
    "Prefill. latency: 0.02000 s, throughput:  12800.00 token/s",
    "Decode.  median latency: 0.01000 s, median throughput:    100.00 token/s",
    "Total. latency:  0.100 s, throughput:   2560.00 token/s",
    "Benchmark ...",
    "Prefill. latency: 0.02000 s, throughput:  12800.00 token/s",
    "Decode.  median latency: 0.01016 s, median throughput:     98.43 token/s",
    "Total. latency:  0.100 s, throughput:   2560.00 token/s",
    "skipping (8, 256, 64) due to max batch size limit",
    "  FlashInfer allreduce fusion disabled globally  ",
    "Capture cuda graph failed: out of memory",
]


def test_after_a_run_its_output_and_counts_are_read(tmp_path: Path) -> None:
    (tmp_path / "1.json").write_text(json.dumps({"counts": {"flashinfer.allreduce_fusion": {"eager": 3}}}))
    one = run("on", 1, {})
    driver._after(one, BENCH_OUTPUT, tmp_path, [(1, 256, 64), (8, 256, 64)])
    assert one.counts.fused.eager == 3 and one.counts.processes == 1
    assert one.fallbacks == [
        ("FlashInfer allreduce fusion disabled globally", "another rank could not create its workspace")
    ]
    assert one.fatals == [("Capture cuda graph failed: out of memory", "CUDA-graph capture failed")]
    assert one.workspace == ["FlashInfer workspace initialized for rank 0"]
    assert one.error is None
    assert [(m.batch_size, m.decode_ms) for m in one.measurements] == [(1, pytest.approx(10.16))]
    assert one.skipped == [(8, 256, 64)]


def test_output_that_does_not_match_the_sweep_is_the_runs_error(tmp_path: Path) -> None:
    one = run("off", 1, {1: 5.0})
    driver._after(one, BENCH_OUTPUT, tmp_path, [(1, 256, 64), (16, 256, 64)])
    assert one.error == (
        "its output could not be read: skipped (8, 256, 64), which is not the next of the sweep "
        "[(1, 256, 64), (16, 256, 64)]"
    )
    assert [m.decode_ms for m in one.measurements] == [5.0]  # what was there before stays
    assert one.fatals and one.fallbacks and one.workspace  # read before the figures


def test_a_failed_runs_last_word() -> None:
    failure = launch.RunFailure("exit", "benchmark", "sglang's benchmark ended with exit 3", ["a", "last line"])
    said = "sglang's benchmark ended with exit 3 (phase: benchmark); sglang's last word: "
    assert driver._failure_text(run("on", 1, {}), failure) == said + "'last line'"
    with_fatal = run("on", 1, {}, fatals=[("Capture cuda graph failed: oom", "why"), ("second", "why")])
    assert driver._failure_text(with_fatal, failure) == said + "'Capture cuda graph failed: oom'"
    silent = launch.RunFailure("exit", "benchmark", "sglang's benchmark ended with exit 3")
    assert driver._failure_text(run("on", 1, {}), silent) == said + "'no output'"


class FakeLaunch:
    """Stands in for ``launch.run`` (sglang's benchmark under the watchdog): writes ``log``
    lines to the run's log, reports the phase, and returns ``lines`` or raises ``failure``."""

    def __init__(self, lines: list[str], failure: launch.RunFailure | None = None, log: list[str] = ()) -> None:  # type: ignore[assignment]
        self.lines, self.failure, self.log_lines = lines, failure, list(log)
        self.calls: list[tuple[Any, ...]] = []

    def __call__(
        self, command: list[str], env: dict[str, str], cwd: Path, timeout: float, log: TextIO, on_phase: Any
    ) -> launch.Output:
        self.calls.append((command, env, cwd, timeout))
        # a first line flushed, bytes that are not UTF-8 (sglang's output is not ours to trust),
        # then the rest left in the buffer: read back whole, undecodable bytes replaced
        log.write("".join(line + "\n" for line in self.log_lines[:1]))
        log.flush()
        log.buffer.write(b"\xff\xfe not utf-8\n")  # type: ignore[attr-defined]
        log.write("".join(line + "\n" for line in self.log_lines[1:]))
        on_phase("benchmark")
        if self.failure is not None:
            raise self.failure
        return launch.Output(self.lines, 0, 12.5, [("benchmark", 1.25)])


def one(tmp_path: Path, fake: FakeLaunch, mode: str, monkeypatch: pytest.MonkeyPatch, status: list[str]) -> driver.Run:
    monkeypatch.setattr(launch, "run", fake)
    the_run = driver.Run(mode, 1, ["python", "-m", "bench"])
    (tmp_path / "cwd").mkdir(exist_ok=True)
    with open(tmp_path / "run.log", "w", encoding="utf-8") as log:
        driver._one(
            settings(timeout=42.0),
            the_run,
            tmp_path / "counts",
            tmp_path / "hook",
            tmp_path,
            [(1, 256, 64), (8, 256, 64)],
            log,
            "run 2/4, fusion",
            status.append,
        )
    return the_run


def test_a_run_that_ends_well(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeLaunch(BENCH_OUTPUT[:-2] + [f"line {i}" for i in range(20)])
    status: list[str] = []
    done = one(tmp_path, fake, "on", monkeypatch, status)
    assert status == ["run 2/4, fusion: benchmark"]
    ((command, env, cwd, timeout),) = fake.calls
    assert (command, cwd, timeout) == (["python", "-m", "bench"], tmp_path / "cwd", 42.0)
    assert env[server_hook.COUNT_DIR_ENV] == str(tmp_path / "counts")
    assert env["PYTHONPATH"].startswith(str(tmp_path / "hook") + os.pathsep)
    assert (done.seconds, done.phases, done.error) == (12.5, [("benchmark", 1.25)], None)
    assert done.tail == [f"line {i}" for i in range(8, 20)]  # the last 12 lines
    assert done.skipped == [(8, 256, 64)] and len(done.measurements) == 1


def test_an_on_run_that_fails_is_an_error_of_that_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failure = launch.RunFailure("exit", "capturing CUDA graphs", "sglang's benchmark ended with exit 3", ["t1", "t2"])
    log = ["[TP1] FlashInfer allreduce fusion disabled globally", "[TP0] Capture cuda graph failed: no kernel"]
    done = one(tmp_path, FakeLaunch([], failure, log), "on", monkeypatch, [])
    assert done.tail == ["t1", "t2"]
    assert done.fatals == [("[TP0] Capture cuda graph failed: no kernel", "CUDA-graph capture failed")]
    assert done.fallbacks == [
        ("[TP1] FlashInfer allreduce fusion disabled globally", "another rank could not create its workspace")
    ]
    assert done.error == (
        "sglang's benchmark ended with exit 3 (phase: capturing CUDA graphs); sglang's last word: "
        "'[TP0] Capture cuda graph failed: no kernel'"
    )
    assert done.seconds is None and done.measurements == []


@pytest.mark.parametrize(("kind", "mode"), [("timeout", "on"), ("exit", "off"), ("timeout", "off")])
def test_a_hang_or_a_failed_off_run_stops_the_bench(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, mode: str
) -> None:
    failure = launch.RunFailure(kind, "warm-up", "no progress for 300 s", ["t1"])
    with pytest.raises(driver.RunStopped) as raised:
        one(tmp_path, FakeLaunch([], failure), mode, monkeypatch, [])
    assert str(raised.value) == (
        f"bench server stopped in run 2/4, fusion: no progress for 300 s (phase: warm-up); sglang's last word: "
        f"'t1'; the log is in {tmp_path / 'logs'}"
    )
    assert raised.value.__cause__ is failure
    assert isinstance(raised.value, EnvironmentProblem)


# --- the runs, the rows ---------------------------------------------------------------------


def test_a_runs_decode_latency_per_batch_size() -> None:
    the_run = run("on", 1, {})
    the_run.measurements = [measurement(8, None), measurement(1, 0.005), measurement(8, 0.012), measurement(8, 0.5)]
    assert the_run.decode_ms(8) == pytest.approx(12.0)
    assert the_run.decode_ms(1) == pytest.approx(5.0)
    assert the_run.decode_ms(16) is None


def test_rows_need_a_latency_in_every_run() -> None:
    notes: list[str] = []
    runs = [
        run("off", 1, {1: 10.0, 8: 12.0, 64: 20.0}),
        run("on", 1, {1: 9.0, 8: 11.0}, skipped=[(64, 256, 64)]),
        run("on", 2, {1: 9.2}),
        run("off", 2, {1: 10.2, 8: 12.2}),
    ]
    rows = driver._rows(settings(batch_sizes=(1, 8, 64, 128)), runs, notes)
    assert rows == [Row(1, [10.0, 10.2], [9.0, 9.2])]
    assert notes == ["batch 64 was skipped by sglang: it does not fit in the KV cache (max batch size limit)"]
    # a pair cut short (the on run of the second pair missing) still counts its runs
    assert driver._rows(settings(batch_sizes=(8,)), runs[:2] + runs[3:], []) == [Row(8, [12.0, 12.2], [11.0])]


def fake_one(script: dict[tuple[str, int], dict[str, Any]], seen: list[tuple[Any, ...]]) -> Any:
    """Stands in for the driver's ``_one`` (one sglang run): fills the run from ``script``."""

    def _one(
        settings: driver.Settings,
        the_run: driver.Run,
        count_dir: Path,
        hook_dir: Path,
        scratch: Path,
        sweep: list[tuple[int, int, int]],
        log: TextIO,
        label: str,
        on_status: Any,
    ) -> None:
        seen.append((the_run.mode, the_run.repeat, count_dir, hook_dir, sweep, Path(log.name), label))
        assert count_dir.is_dir() and (scratch / "cwd").is_dir() and (scratch / "logs").is_dir()
        assert (hook_dir / "sitecustomize.py").read_bytes() == Path(server_hook.__file__).read_bytes()
        on_status(label)
        for name, value in script.get((the_run.mode, the_run.repeat), {}).items():
            if name == "decode_ms":
                the_run.measurements = [measurement(size, ms / 1000) for size, ms in value.items()]
            else:
                setattr(the_run, name, value)

    return _one


PAYS: dict[tuple[str, int], dict[str, Any]] = {
    ("off", 1): {"decode_ms": {1: 10.0, 8: 12.0}},
    ("on", 1): {"decode_ms": {1: 9.0, 8: 11.0}, "counts": fused()},
    ("on", 2): {"decode_ms": {1: 9.1, 8: 11.1}, "counts": fused()},
    ("off", 2): {"decode_ms": {1: 10.1, 8: 12.1}},
}


def server_run(
    package: Path, monkeypatch: pytest.MonkeyPatch, script: dict[tuple[str, int], dict[str, Any]], **changes: Any
) -> tuple[driver.ServerResult, list[tuple[Any, ...]], list[str]]:
    seen: list[tuple[Any, ...]] = []
    status: list[str] = []
    monkeypatch.setattr(driver, "_one", fake_one(script, seen))
    changes.setdefault("tp", None)
    return driver.run(settings(package_dir=package, hidden=256, **changes), status.append), seen, status


def scratch_dirs() -> list[Path]:
    import tempfile

    return sorted(Path(tempfile.gettempdir()).glob("sm120patch-bench-server-*"))


def test_runs_in_order_with_their_own_logs_and_counts(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done, seen, status = server_run(host, monkeypatch, PAYS)
    assert done.settings.tp == 2  # every GPU the probe saw
    assert [(mode, repeat, label) for mode, repeat, *_, label in seen] == [
        ("off", 1, "run 1/4, default"),
        ("on", 1, "run 2/4, fusion"),
        ("on", 2, "run 3/4, fusion"),
        ("off", 2, "run 4/4, default"),
    ]
    assert status == [label for *_, label in seen]
    _, _, count_dir, hook_dir, sweep, log, _ = seen[2]
    scratch = hook_dir.parent
    assert (count_dir, log) == (scratch / "counts" / "fusion-2", scratch / "logs" / "fusion-2.log")
    assert sweep == [(1, 256, 64), (8, 256, 64)]
    assert [r.command[r.command.index("--run-name") + 1] for r in done.runs] == [
        "sm120patch-default-1",
        "sm120patch-fusion-1",
        "sm120patch-fusion-2",
        "sm120patch-default-2",
    ]
    assert done.module == "sglang.bench_one_batch" and done.flags == FLAGS
    assert done.model.bundled and done.model.hidden == 256
    assert done.rows == [Row(1, [10.0, 10.1], [9.0, 9.1]), Row(8, [12.0, 12.1], [11.0, 11.1])]
    assert done.verdict.kind is Kind.PAYS
    assert (done.problems, done.notes, done.kept) == ([], [], None)
    assert done.exit_code is ExitCode.OK
    assert scratch_dirs() == []  # nothing kept when the runs did what they say


def test_a_run_that_did_not_do_what_it_says_stops_after_its_pair(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = {**PAYS, ("on", 1): {"decode_ms": {1: 9.0, 8: 11.0}, "counts": Counts(2, 2)}}
    done, _, _ = server_run(host, monkeypatch, script, repeat=2)
    assert [(r.mode, r.repeat) for r in done.runs] == [("off", 1), ("on", 1)]
    assert done.problems == [
        f"fusion was asked for ({BACKEND} trtllm) but never ran: sglang logged no reason (its gate for these GPUs "
        "or this model is closed: `sm120patch verify`)"
    ]
    assert done.verdict.kind is Kind.NONE and done.verdict.advice == "no verdict: " + done.problems[0]
    assert done.notes[0] == "stopped after this pair of runs: the next ones would not do what they say either"
    assert done.exit_code is ExitCode.NOT_AS_ASKED
    (scratch,) = scratch_dirs()
    assert done.kept == scratch / "logs" and (scratch / "logs" / "fusion-1.log").is_file()


def test_a_problem_in_the_last_pair_has_no_next_runs_to_mention(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = {**PAYS, ("off", 2): {"decode_ms": {1: 10.1}, "counts": fused()}}
    done, _, _ = server_run(host, monkeypatch, script)
    assert len(done.runs) == 4 and done.problems[0].startswith("the fusion-off run")
    assert not any("stopped after" in note for note in done.notes)
    single, _, _ = server_run(host, monkeypatch, {("on", 1): {"counts": Counts()}}, repeat=1)
    assert not any("stopped after" in note for note in single.notes)


def test_a_failed_run_ends_the_runs(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = {**PAYS, ("on", 1): {"error": "sglang's benchmark ended with exit 3", "counts": fused()}}
    done, seen, _ = server_run(host, monkeypatch, script)
    assert len(seen) == 2
    assert done.problems == ["the fusion run failed: sglang's benchmark ended with exit 3"]
    assert done.verdict.advice == "no verdict: the fusion run failed: sglang's benchmark ended with exit 3"


def test_no_latency_in_every_run_is_no_verdict(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = {("off", 1): {"decode_ms": {1: 10.0}}, ("on", 1): {"decode_ms": {8: 9.0}, "counts": fused()}}
    done, _, _ = server_run(host, monkeypatch, script, repeat=1)
    assert done.rows == []
    assert done.problems == ["no batch size has a decode latency in every run"]
    assert done.verdict.advice == "no verdict: no batch size has a decode latency in every run"
    assert done.notes == []  # no rows: nothing to say about their noise


def test_notes_of_tp1_and_of_single_runs(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = {("off", 1): {"decode_ms": {1: 10.0, 8: 12.0}}, ("on", 1): {"decode_ms": {1: 9.8, 8: 12.1}}}
    script[("on", 1)]["counts"] = Counts(entry=Calls(eager=1))
    done, _, _ = server_run(host, monkeypatch, script, repeat=1, tp=1)
    assert done.problems == []
    assert done.notes == [
        "TP 1 has no allreduce, so nothing can be fused: this run checks the harness, not fusion",
        "one run per mode: the noise is not measured, and the off run went first with cold caches "
        "(--repeat 2 or more measures the noise and alternates the order)",
    ]
    assert done.verdict.advice == (
        "fusion makes no difference beyond the noise (±3.0 %) in sglang's own decode at TP 1: either way"
    )


def test_a_stopped_run_keeps_the_logs(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def stopping(*args: Any) -> None:
        raise driver.RunStopped("bench server stopped in run 1/4, default")

    monkeypatch.setattr(driver, "_one", stopping)
    with pytest.raises(driver.RunStopped):
        driver.run(settings(package_dir=host, hidden=256))
    (scratch,) = scratch_dirs()
    assert (scratch / "logs" / "default-1.log").is_file()


def test_a_refusal_before_any_run_leaves_no_scratch(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EnvironmentProblem, match="--tp 4 needs 4 GPUs"):
        driver.run(settings(package_dir=host, tp=4))
    with pytest.raises(EnvironmentProblem, match="--hidden 1000: the bundled model needs a multiple of 128"):
        driver.run(settings(package_dir=host, hidden=1000))
    assert scratch_dirs() == []


def test_the_exit_code_follows_the_problems() -> None:
    assert result().exit_code is ExitCode.OK
    assert result(problems=["x"]).exit_code is ExitCode.NOT_AS_ASKED


def test_order_alternates_from_the_second_pair() -> None:
    assert driver.order(0) == []
    assert driver.order(2) == [(0, "off"), (0, "on"), (1, "on"), (1, "off")]
    assert driver.MIN_FREE_FRACTION == 0.75 and driver.PROBE_TIMEOUT_S == 60.0
