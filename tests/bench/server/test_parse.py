"""The parser on lines written here in bench_one_batch's format (the slow tier renders the
real releases' own f-strings: test_releases.py)."""

from __future__ import annotations

import pytest

from sm120patch.bench.server import parse

OUTPUT = """\
max_total_num_tokens=123456
Warmup ...
Prefill. latency: 0.05000 s, throughput:  20480.00 token/s
Decode 0. Batch size: 1, latency: 0.01200 s, throughput:     83.33 token/s
Decode.  median latency: 0.01100 s, median throughput:     90.91 token/s
Total. latency:  0.400 s, throughput:   3000.00 token/s
Benchmark ...
[2026-12-01 10:00:00 TP1] some log line in between
Prefill. latency: 0.04000 s, throughput:   6400.00 token/s
Decode 0. Batch size: 1, latency: 0.01000 s, throughput:    100.00 token/s
Decode 1. Batch size: 1, latency: 0.00950 s, throughput:    105.26 token/s
Decode.  median latency: 0.00970 s, median throughput:    103.09 token/s
Total. latency:  0.650 s, throughput:    492.31 token/s
skipping (8, 256, 64) due to max batch size limit
Prefill. latency: 0.30000 s, throughput:  27306.67 token/s
Decode 0. Batch size: 32, latency: 0.01500 s, throughput:   2133.33 token/s
Decode.  median latency: 0.01450 s, median throughput:   2206.90 token/s
Total. latency:  1.250 s, throughput:   8192.00 token/s
"""
SWEEP = [(1, 256, 64), (8, 256, 64), (32, 256, 64)]


def test_warmup_and_sweep_apart() -> None:
    parsed = parse.parse(OUTPUT.splitlines(), SWEEP)
    assert parsed.max_total_num_tokens == 123456
    assert [m.batch_size for m in parsed.warmup] == [1]
    assert parsed.warmup[0].decode_median_s == pytest.approx(0.011)
    assert [(m.batch_size, m.input_len, m.output_len) for m in parsed.runs] == [(1, 256, 64), (32, 256, 64)]
    assert parsed.skipped == [(8, 256, 64)]
    first, second = parsed.runs
    assert first.prefill_latency_s == pytest.approx(0.04)
    assert first.prefill_throughput == pytest.approx(6400.0)
    assert first.decode_ms == pytest.approx(9.7)
    assert first.decode_median_throughput == pytest.approx(103.09)
    assert first.total_latency_s == pytest.approx(0.65)
    assert [s[0] for s in first.decode_steps] == [0, 1]
    assert second.decode_ms == pytest.approx(14.5)


def test_without_a_sweep_the_batch_size_comes_from_the_decode_lines() -> None:
    parsed = parse.parse(OUTPUT.splitlines())
    assert [m.batch_size for m in parsed.runs] == [1, 32]


def test_a_batch_size_other_than_the_sweeps_is_an_error() -> None:
    with pytest.raises(parse.ParseError, match="batch size 32 printed where 8 was expected"):
        parse.parse(OUTPUT.replace("skipping (8, 256, 64) due to max batch size limit\n", "").splitlines(), SWEEP)


def test_more_results_than_asked_for_is_an_error() -> None:
    with pytest.raises(parse.ParseError, match="more results than the 1 asked for"):
        parse.parse(
            OUTPUT.replace("skipping (8, 256, 64) due to max batch size limit\n", "").splitlines(), [(1, 256, 64)]
        )


def test_a_skip_out_of_order_is_an_error() -> None:
    with pytest.raises(parse.ParseError, match="not the next of the sweep"):
        parse.parse(OUTPUT.splitlines(), [(1, 256, 64), (32, 256, 64), (8, 256, 64)])


def test_no_output_no_measurements() -> None:
    parsed = parse.parse([], SWEEP)
    assert parsed.runs == [] and parsed.warmup == [] and parsed.max_total_num_tokens is None


@pytest.mark.parametrize(
    ("line", "phase"),
    [
        ("[2026-12-01 TP0] Init torch distributed begin.", "distributed init"),
        ("[TP0] Load weight begin. avail mem=93.10 GB", "loading weights"),
        (
            "[TP1] Capture cuda graph begin. This can take up to several minutes. avail mem=20 GB",
            "capturing CUDA graphs",
        ),
        ("Capture piecewise CUDA graph begin. avail mem=20 GB", "capturing CUDA graphs"),
        ("max_total_num_tokens=5", "model ready"),
        ("Warmup ...", "warm-up"),
        ("Benchmark ...", "benchmark"),
        ("Capture cuda graph end. Time elapsed: 3.00 s.", None),
        ("Prefill. latency: 0.1 s, throughput: 1 token/s", None),
    ],
)
def test_milestones(line: str, phase: str | None) -> None:
    assert parse.milestone(line) == phase


def test_said_finds_each_fallback_line_once() -> None:
    lines = [
        "[TP0] Failed to initialize FlashInfer workspace: boom. Disabling flashinfer allreduce fusion permanently.",
        "[TP1] Failed to initialize FlashInfer workspace: boom. Disabling flashinfer allreduce fusion permanently.",
        "[TP0] Failed to initialize FlashInfer workspace: boom. Disabling flashinfer allreduce fusion permanently.",
        "[TP0] FlashInfer workspace preflight probe failed (801). Skipping allreduce fusion.",
        "an unrelated line",
    ]
    found = parse.said(lines, parse.FALLBACKS)
    assert [why for _, why in found] == [
        "FlashInfer's workspace could not be created",
        "FlashInfer's workspace could not be created",
        "the workspace preflight (cuMulticastGetGranularity) failed",
    ]
    assert found[0][0] == lines[0]


def test_the_whole_parse_of_a_run() -> None:
    assert parse.parse([line + "\n" for line in OUTPUT.splitlines()], SWEEP) == parse.Parsed(
        warmup=[
            parse.Measurement(1, None, None, 0.05, 20480.0, 0.011, 90.91, 0.4, 3000.0, [(0, 1, 0.012, 83.33)]),
        ],
        runs=[
            parse.Measurement(
                1, 256, 64, 0.04, 6400.0, 0.0097, 103.09, 0.65, 492.31, [(0, 1, 0.01, 100.0), (1, 1, 0.0095, 105.26)]
            ),
            parse.Measurement(32, 256, 64, 0.3, 27306.67, 0.0145, 2206.9, 1.25, 8192.0, [(0, 32, 0.015, 2133.33)]),
        ],
        skipped=[(8, 256, 64)],
        max_total_num_tokens=123456,
    )


def test_without_a_sweep_sizes_come_from_the_output_and_every_skip_is_kept() -> None:
    parsed = parse.parse(OUTPUT.splitlines())
    assert [(m.batch_size, m.input_len, m.output_len) for m in parsed.runs] == [(1, None, None), (32, None, None)]
    assert parsed.skipped == [(8, 256, 64)]


def test_a_skip_in_the_warm_up_is_not_the_sweeps() -> None:
    text = OUTPUT.replace("Warmup ...\n", "Warmup ...\nskipping (64, 256, 64) due to max batch size limit\n")
    parsed = parse.parse(text.splitlines(), SWEEP)
    assert parsed.skipped == [(8, 256, 64)]
    assert [m.batch_size for m in parsed.runs] == [1, 32]


def test_lines_outside_a_measurement_are_not_read_into_one() -> None:
    text = (
        "Decode 0. Batch size: 4, latency: 0.5 s, throughput: 8 token/s\n"
        "Decode.  median latency: 0.5 s, median throughput: 8 token/s\n"
        "Benchmark ...\n"
        "Decode 0. Batch size: 4, latency: 0.5 s, throughput: 8 token/s\n"
        "Prefill. latency: 0.1 s, throughput: 10 token/s\n"
        "Decode 0. Batch size: 2, latency: 0.25 s, throughput: 8 token/s\n"
        "Total. latency: 1 s, throughput: 2 token/s\n"
        "Decode 0. Batch size: 4, latency: 0.5 s, throughput: 8 token/s\n"
        "Decode.  median latency: 0.5 s, median throughput: 8 token/s\n"
    )
    parsed = parse.parse(text.splitlines(), [(2, 8, 1)])
    assert parsed == parse.Parsed(
        runs=[parse.Measurement(2, 8, 1, 0.1, 10.0, None, None, 1.0, 2.0, [(0, 2, 0.25, 8.0)])]
    )
    assert parsed.runs[0].decode_ms is None


def test_a_warm_up_after_the_benchmark_does_not_count_against_the_sweep() -> None:
    block = (
        "Prefill. latency: 0.1 s, throughput: 10 token/s\n"
        "Decode 0. Batch size: 2, latency: 0.25 s, throughput: 8 token/s\n"
        "Total. latency: 1 s, throughput: 2 token/s\n"
    )
    parsed = parse.parse(
        f"Benchmark ...\n{block}Warmup ...\n{block}Benchmark ...\n{block}".splitlines(), [(2, 8, 1)] * 2
    )
    assert [(m.batch_size, m.input_len) for m in parsed.runs] == [(2, 8), (2, 8)]
    assert [(m.batch_size, m.input_len) for m in parsed.warmup] == [(2, None)]


def test_each_mismatch_is_said_whole() -> None:
    dropped = OUTPUT.replace("skipping (8, 256, 64) due to max batch size limit\n", "")
    with pytest.raises(parse.ParseError) as raised:
        parse.parse(dropped.splitlines(), SWEEP)
    assert str(raised.value) == (
        "batch size 32 printed where 8 was expected: 'Decode 0. Batch size: 32, latency: 0.01500 s, throughput:   "
        "2133.33 token/s'"
    )
    with pytest.raises(parse.ParseError) as raised:
        parse.parse(dropped.splitlines(), [(1, 256, 64)])
    assert (
        str(raised.value)
        == "more results than the 1 asked for: 'Prefill. latency: 0.30000 s, throughput:  27306.67 token/s'"
    )
    with pytest.raises(parse.ParseError) as raised:
        parse.parse(OUTPUT.splitlines(), [(1, 256, 64)])
    assert str(raised.value) == "skipped (8, 256, 64), which is not the next of the sweep [(1, 256, 64)]"
    with pytest.raises(parse.ParseError) as raised:
        parse.parse(OUTPUT.splitlines(), [(1, 256, 64), (32, 256, 64), (8, 256, 64)])
    assert str(raised.value) == (
        "skipped (8, 256, 64), which is not the next of the sweep [(1, 256, 64), (32, 256, 64), (8, 256, 64)]"
    )


def test_a_line_is_one_phase_the_first_it_starts() -> None:
    assert parse.milestone("Load weight begin; max_total_num_tokens=5") == "loading weights"


def test_said_keeps_a_line_once_under_the_first_text_it_holds_stripped() -> None:
    both = "  FlashInfer comm not available; flashinfer.comm is not available  \n"
    table = (("flashinfer.comm is not available", "second"), ("FlashInfer comm not available", "first"))
    assert parse.said([both, both.strip(), "other"], table) == [(both.strip(), "second")]
    assert parse.said([both], parse.FALLBACKS) == [(both.strip(), "flashinfer.comm is not importable")]
    assert parse.said(["x", "y"], ()) == []


def test_two_skips_in_a_row_each_take_their_place_in_the_sweep() -> None:
    text = OUTPUT.replace(
        "skipping (8, 256, 64) due to max batch size limit\n",
        "skipping (8, 256, 64) due to max batch size limit\nskipping (16, 256, 64) due to max batch size limit\n",
    )
    parsed = parse.parse(text.splitlines(), [(1, 256, 64), (8, 256, 64), (16, 256, 64), (32, 256, 64)])
    assert parsed.skipped == [(8, 256, 64), (16, 256, 64)]
    assert [(m.batch_size, m.input_len, m.output_len) for m in parsed.runs] == [(1, 256, 64), (32, 256, 64)]


def test_output_before_any_warm_up_or_benchmark_line_is_not_the_sweeps() -> None:
    text = (
        "skipping (4, 8, 1) due to max batch size limit\n"
        "Prefill. latency: 0.1 s, throughput: 10 token/s\n"
        "Decode 0. Batch size: 2, latency: 0.25 s, throughput: 8 token/s\n"
        "Total. latency: 1 s, throughput: 2 token/s\n"
    )
    parsed = parse.parse(text.splitlines(), [(4, 8, 1)])
    assert parsed == parse.Parsed(
        warmup=[parse.Measurement(2, None, None, 0.1, 10.0, None, None, 1.0, 2.0, [(0, 2, 0.25, 8.0)])]
    )


def test_a_mismatch_quotes_the_line_as_printed() -> None:
    text = (
        "Benchmark ...\n"
        "Prefill. latency: 0.1 s, throughput: 10 token/s\n"
        "Decode 0. Batch size: 2, latency: 0.25 s, throughput: 8 token/s on GPU X\n"
    )
    with pytest.raises(parse.ParseError) as raised:
        parse.parse(text.splitlines(keepends=True), [(4, 8, 1)])
    assert str(raised.value) == (
        "batch size 2 printed where 4 was expected: "
        "'Decode 0. Batch size: 2, latency: 0.25 s, throughput: 8 token/s on GPU X'"
    )


def test_each_run_moves_on_one_place_in_the_sweep() -> None:
    block = (
        "Prefill. latency: 0.1 s, throughput: 10 token/s\n"
        "Decode 0. Batch size: {size}, latency: 0.25 s, throughput: 8 token/s\n"
        "Total. latency: 1 s, throughput: 2 token/s\n"
    )
    text = "Benchmark ...\n" + "".join(block.format(size=size) for size in (1, 8, 32))
    parsed = parse.parse(text.splitlines(), [(1, 16, 4), (8, 16, 4), (32, 16, 4)])
    assert [(m.batch_size, m.input_len, m.output_len) for m in parsed.runs] == [(1, 16, 4), (8, 16, 4), (32, 16, 4)]
