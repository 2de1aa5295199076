"""Read what ``bench_one_batch`` prints: its latencies, the phase it is in, and the lines in
which sglang says fusion is off after all.

The print formats are the same f-strings in every release read (0.5.9, 0.5.13, 0.5.14,
0.5.15 and 0.5.23; ``sglang/bench_one_batch.py``, from 0.5.15 ``sglang/benchmark/one_batch.py``);
the slow tier renders them from each release's own source and parses the result
(tests/bench/server/test_releases.py):

    Prefill. latency: {prefill_latency:6.5f} s, throughput: {throughput:9.2f} token/s
    Decode {i}. Batch size: {batch_size}, latency: {latency:6.5f} s, throughput: {throughput:9.2f} token/s
    Decode.  median latency: {med_decode_latency:6.5f} s, median throughput: {med_decode_throughput:9.2f} token/s
    Total. latency: {tot_latency:6.3f} s, throughput: {throughput:9.2f} token/s
    skipping ({batch_size}, {input_len}, {output_len}) due to max batch size limit

Rank 0 prints them, once for the warm-up (the first batch size, at most 32 output tokens)
after ``Warmup ...``, then once per (batch size, input length, output length) of the sweep
after ``Benchmark ...``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

_NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|inf|nan)"
PREFILL = re.compile(rf"Prefill\.\s+latency:\s*{_NUM}\s*s,\s*throughput:\s*{_NUM}\s*token/s")
DECODE_STEP = re.compile(
    rf"Decode\s+(\d+)\.\s+Batch size:\s*(\d+),\s*latency:\s*{_NUM}\s*s,\s*throughput:\s*{_NUM}\s*token/s"
)
DECODE_MEDIAN = re.compile(rf"Decode\.\s+median latency:\s*{_NUM}\s*s,\s*median throughput:\s*{_NUM}\s*token/s")
TOTAL = re.compile(rf"Total\.\s+latency:\s*{_NUM}\s*s,\s*throughput:\s*{_NUM}\s*token/s")
SKIPPING = re.compile(r"skipping \((\d+), (\d+), (\d+)\) due to max batch size limit")
WARMUP = "Warmup ..."
BENCHMARK = "Benchmark ..."
MAX_TOKENS = re.compile(r"max_total_num_tokens=(\d+)")

#: Lines that start a phase of the run (the watchdog's unit), in the order they come.
MILESTONES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Init torch distributed begin"), "distributed init"),
    (re.compile(r"Load weight begin"), "loading weights"),
    (re.compile(r"Capture .*begin"), "capturing CUDA graphs"),
    (MAX_TOKENS, "model ready"),
    (re.compile(re.escape(WARMUP)), "warm-up"),
    (re.compile(re.escape(BENCHMARK)), "benchmark"),
)

#: What sglang logs when fusion was asked for and is off after all: (text in the line, why).
#: Each text is checked against the real releases' source (slow tier).
FALLBACKS: tuple[tuple[str, str], ...] = (
    ("Disabling flashinfer allreduce fusion permanently", "FlashInfer's workspace could not be created"),
    ("FlashInfer allreduce fusion disabled globally", "another rank could not create its workspace"),
    ("FlashInfer AllReduce fusion disabled", "the ranks are not on one NVLink clique"),
    ("FlashInfer workspace preflight probe failed", "the workspace preflight (cuMulticastGetGranularity) failed"),
    ("FlashInfer workspace preflight: cuMemCreate probe failed", "the workspace preflight's cuMemCreate failed"),
    ("FlashInfer comm not available", "flashinfer.comm is not importable"),
    ("allreduce_fusion API is not available", "this FlashInfer lacks the fusion API sglang calls"),
    ("flashinfer.comm is not available", "flashinfer.comm is not importable"),
    ("because deterministic inference is enabled", "deterministic inference turns fusion off"),
)
#: What sglang logs when fusion stops the server (these end the run with an error).
FATALS: tuple[tuple[str, str], ...] = (
    ("FlashInfer allreduce fusion requires SM90 or SM10X", "the release's backend gate refuses these GPUs"),
    ("No supported CUDA architectures found", "FlashInfer's kernel is not built for these GPUs"),
    ("Capture cuda graph failed", "CUDA-graph capture failed"),
)
#: What sglang logs when its PCIe-IPC allreduce (0.5.21+, ``pcie_ipc_ar.py``) stays off.
PCIE_IPC_OFF: tuple[tuple[str, str], ...] = (
    ("leaving PCIe-IPC all-reduce off", "deterministic inference turns PCIe-IPC off"),
    ("FlashInfer PCIe-IPC all-reduce serves bf16 only", "PCIe-IPC serves bf16 only"),
    ("has no pcie_ipc_comm", "this FlashInfer has no PCIe-IPC kernels"),
    ("; reductions stay on NCCL", "PCIe-IPC's workspace could not be built"),
    ("FlashInfer PCIe-IPC all-reduce skipped", "PCIe-IPC does not take this world size"),
)
WORKSPACE_OK = ("FlashInfer workspace initialized", "FlashInfer AllReduce Fusion enabled and workspace initialized")


class ParseError(ValueError):
    """The output does not say what the sweep asked for (a missing or foreign line)."""


@dataclass
class Measurement:
    """One (batch size, input length, output length) as bench_one_batch printed it."""

    batch_size: int
    input_len: int | None
    output_len: int | None
    prefill_latency_s: float
    prefill_throughput: float
    decode_median_s: float | None = None
    decode_median_throughput: float | None = None
    total_latency_s: float | None = None
    total_throughput: float | None = None
    decode_steps: list[tuple[int, int, float, float]] = field(default_factory=list)

    @property
    def decode_ms(self) -> float | None:
        """Median decode step in ms: the time per output token of each sequence."""
        return None if self.decode_median_s is None else self.decode_median_s * 1000.0


@dataclass
class Parsed:
    warmup: list[Measurement] = field(default_factory=list)
    runs: list[Measurement] = field(default_factory=list)
    skipped: list[tuple[int, int, int]] = field(default_factory=list)
    max_total_num_tokens: int | None = None


def _f(text: str) -> float:
    return float(text)


def parse(lines: Iterable[str], sweep: Sequence[tuple[int, int, int]] = ()) -> Parsed:
    """The measurements in ``lines``; ``sweep`` is the (batch size, input, output) product in
    the order bench_one_batch runs it, used to name each block (ParseError on a mismatch)."""
    parsed = Parsed()
    in_benchmark = False
    current: Measurement | None = None
    counted = False  # whether ``current`` is one of the sweep (not the warm-up)
    index = 0
    for raw in lines:
        line = raw.rstrip("\n")
        if BENCHMARK in line:
            in_benchmark, current = True, None
            continue
        if WARMUP in line:
            in_benchmark, current = False, None
            continue
        if match := MAX_TOKENS.search(line):
            parsed.max_total_num_tokens = int(match.group(1))
        if match := SKIPPING.search(line):
            triple = (int(match.group(1)), int(match.group(2)), int(match.group(3)))
            if in_benchmark:
                _expect(sweep, index, triple)
                parsed.skipped.append(triple)
                index += 1
            continue
        if match := PREFILL.search(line):
            size: tuple[int | None, int | None, int | None] = (0, None, None)
            if in_benchmark and sweep:
                if index >= len(sweep):
                    raise ParseError(f"more results than the {len(sweep)} asked for: {line.strip()!r}")
                size = sweep[index]
            current = Measurement(int(size[0] or 0), size[1], size[2], _f(match.group(1)), _f(match.group(2)))
            (parsed.runs if in_benchmark else parsed.warmup).append(current)
            counted = in_benchmark
            continue
        if current is None:
            continue
        if match := DECODE_STEP.search(line):
            step = (int(match.group(1)), int(match.group(2)), _f(match.group(3)), _f(match.group(4)))
            if current.batch_size and step[1] != current.batch_size:
                raise ParseError(
                    f"batch size {step[1]} printed where {current.batch_size} was expected: {line.strip()!r}"
                )
            current.batch_size = current.batch_size or step[1]
            current.decode_steps.append(step)
        elif match := DECODE_MEDIAN.search(line):
            current.decode_median_s, current.decode_median_throughput = _f(match.group(1)), _f(match.group(2))
        elif match := TOTAL.search(line):
            current.total_latency_s, current.total_throughput = _f(match.group(1)), _f(match.group(2))
            if counted:
                index += 1
            current = None
    return parsed


def _expect(sweep: Sequence[tuple[int, int, int]], index: int, triple: tuple[int, int, int]) -> None:
    if sweep and (index >= len(sweep) or sweep[index] != triple):
        raise ParseError(f"skipped {triple}, which is not the next of the sweep {list(sweep)}")


def milestone(line: str) -> str | None:
    """The phase this line starts, if it starts one."""
    for pattern, phase in MILESTONES:
        if pattern.search(line):
            return phase
    return None


def said(lines: Iterable[str], table: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(line, why) for each line of ``lines`` that holds a text of ``table``, in order, each
    distinct line once."""
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    for raw in lines:
        line = raw.strip()
        for text, why in table:
            if text in line and line not in seen:
                seen.add(line)
                found.append((line, why))
                break
    return found
