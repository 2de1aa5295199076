"""Server-bench results built by hand, for the tests of the driver's pieces and of what is
shown: settings, one run's measurements and counts, a whole ``ServerResult``.  Nothing here
runs sglang; the figures are the fake server's (fakes.py) shape, chosen to be read back."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from sm120patch.bench.server import config, driver, parse
from sm120patch.bench.server.counter import Calls, Counts, Logits
from sm120patch.bench.server.flags import Flags
from sm120patch.bench.server.verdict import Row, Verdict, judge, no_verdict
from sm120patch.sglang.options import BACKEND, HATCH

PYTHON = "/opt/venv/bin/python"
PACKAGE = Path("/site/sglang")
FLAGS = Flags((BACKEND, "trtllm"), (HATCH,))
MODEL = config.Model(Path("/scratch/model"), None, True, "LlamaForCausalLM", 1024, 4)


def settings(**changes: Any) -> driver.Settings:
    base = driver.Settings(
        python=PYTHON,
        package_dir=PACKAGE,
        version="0.5.14",
        options=frozenset({BACKEND, HATCH}),
        tp=2,
        batch_sizes=(1, 8),
        input_len=256,
        output_len=64,
        repeat=2,
        timeout=300.0,
        model_path=None,
        hidden=1024,
        layers=4,
        dtype="bf16",
    )
    return dataclasses.replace(base, **changes)


def measurement(batch_size: int, decode_s: float | None, **changes: Any) -> parse.Measurement:
    return dataclasses.replace(
        parse.Measurement(batch_size, 256, 64, 0.02, 12800.0, decode_s, None if decode_s is None else 1.5), **changes
    )


def fused(processes: int = 2) -> Counts:
    """Counts of an "on" run whose ranks launched the fused kernel."""
    return Counts(processes, processes, Calls(processes, 8 * processes), Calls(processes, 8 * processes), Calls(), 2)


def run(mode: str, repeat: int, decode_ms: dict[int, float], **changes: Any) -> driver.Run:
    one = driver.Run(
        mode,
        repeat,
        [PYTHON, "-m", "sglang.benchmark.one_batch", f"--run-name=sm120patch-{mode}-{repeat}"],
        measurements=[measurement(size, ms / 1000) for size, ms in decode_ms.items()],
        counts=fused() if mode == "on" else Counts(2, 2),
    )
    return dataclasses.replace(one, **changes)


def result(
    runs: list[driver.Run] | None = None,
    rows: list[Row] | None = None,
    verdict: Verdict | None = None,
    problems: list[str] | None = None,
    notes: list[str] | None = None,
    kept: Path | None = None,
    **settings_changes: Any,
) -> driver.ServerResult:
    if runs is None:
        runs = [
            run("off", 1, {1: 10.0, 8: 12.0}),
            run("on", 1, {1: 9.0, 8: 11.0}),
            run("on", 2, {1: 9.2, 8: 11.2}),
            run("off", 2, {1: 10.2, 8: 12.2}),
        ]
    if rows is None:
        rows = [Row(1, [10.0, 10.2], [9.0, 9.2]), Row(8, [12.0, 12.2], [11.0, 11.2])]
    the_settings = settings(**settings_changes)
    if verdict is None:
        verdict = judge(rows, the_settings.tp or 2, FLAGS) if rows else no_verdict((problems or ["no rows"])[0])
    probe = {
        "gpus": [{"index": i, "name": "NVIDIA RTX PRO 6000", "free_bytes": 90, "total_bytes": 95} for i in range(4)],
        "torch": {"ok": True, "version": "2.11.0"},
    }
    return driver.ServerResult(
        the_settings,
        "sglang.benchmark.one_batch",
        FLAGS,
        MODEL,
        probe,
        runs,
        rows,
        verdict,
        problems or [],
        notes or [],
        kept,
    )


GiB = 1 << 30


def gpu(index: int, free: Any = 90 * GiB, total: Any = 95 * GiB) -> dict[str, Any]:
    """One GPU as the serving interpreter's probe reports it."""
    return {"index": index, "name": "NVIDIA RTX PRO 6000", "free_bytes": free, "total_bytes": total}


def probe(gpus: list[dict[str, Any]], **torch: Any) -> dict[str, Any]:
    """The probe's answer: torch and the GPUs it sees."""
    return {"torch": {"ok": True, "version": "2.11.0", **torch}, "gpus": gpus}


def logits_record(
    head: list[float | None], nonfinite: int = 0, decode_ids: list[int] | None = None, forwards: int = 20
) -> Logits:
    """What the hook saw of one run's logits: ``head`` as the first decode's and the first
    extend's row 0, with ``nonfinite`` forwards that held a NaN or inf."""
    step = {"shape": [1, 32000], "head": head, "top_values": [], "top_indices": []}
    return Logits(
        forwards,
        nonfinite,
        {
            "extend": dict(step, input_ids=[5, 6, 7]),
            "decode": dict(step, input_ids=decode_ids if decode_ids is not None else [42]),
        },
        [],
        0,
    )
