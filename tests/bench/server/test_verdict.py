"""Off against on, per batch size: the noise of the repeats, the kind, the advice's flags."""

from __future__ import annotations

import pytest

from sm120patch.bench.server.flags import choose
from sm120patch.bench.server.verdict import (
    NOISE_FLOOR_PCT,
    SINGLE_RUN_PCT,
    Compare,
    Kind,
    Row,
    Verdict,
    judge,
    no_verdict,
)
from sm120patch.sglang.options import BACKEND, ENABLE, HATCH

FLAGS = choose({BACKEND, ENABLE, HATCH})
assert FLAGS is not None


def test_row_figures() -> None:
    row = Row(8, [10.0, 10.2], [9.0, 9.1])
    assert row.off == pytest.approx(10.1)
    assert row.on == pytest.approx(9.05)
    assert row.off_tps == pytest.approx(8 / 10.1 * 1000)
    assert row.delta_pct == pytest.approx((9.05 - 10.1) / 10.1 * 100)
    assert row.noise_pct == pytest.approx(0.2 / 10.1 * 100)
    assert row.compare is Compare.FASTER


def test_noise_floor_and_single_runs() -> None:
    assert Row(1, [10.0, 10.0], [9.95, 9.95]).noise_pct == NOISE_FLOOR_PCT
    assert Row(1, [10.0, 10.0], [9.95, 9.95]).compare is Compare.EVEN
    single = Row(1, [10.0], [9.8])
    assert single.noise_pct == SINGLE_RUN_PCT and not single.measured_noise
    assert single.compare is Compare.EVEN


def test_a_difference_inside_the_repeats_spread_is_even() -> None:
    assert Row(1, [10.0, 11.0], [9.5, 10.4]).compare is Compare.EVEN


def test_pays_names_the_flag_that_turns_it_on() -> None:
    verdict = judge([Row(1, [10.0, 10.0], [9.0, 9.0]), Row(8, [12.0, 12.0], [11.0, 11.0])], 2, FLAGS)
    assert verdict.kind is Kind.PAYS
    assert verdict.advice.startswith("fusion pays in sglang's own decode at TP 2: 8.3 % to 10.0 % faster")
    assert verdict.advice.endswith("launch with `--flashinfer-allreduce-fusion-backend trtllm`")


def test_costs_names_the_escape_hatch() -> None:
    verdict = judge([Row(64, [10.0, 10.0], [11.0, 11.0])], 4, FLAGS)
    assert verdict.kind is Kind.COSTS
    assert f"keep it off, launch with `{HATCH}`" in verdict.advice


def test_without_a_hatch_off_is_launching_without_the_flag() -> None:
    flags = choose({ENABLE})
    assert flags is not None and flags.off == ()
    verdict = judge([Row(64, [10.0, 10.0], [11.0, 11.0])], 2, flags)
    assert f"launch without `{ENABLE}`" in verdict.advice


def test_even_and_mixed() -> None:
    assert judge([Row(1, [10.0, 10.0], [10.0, 10.0])], 2, FLAGS).kind is Kind.EVEN
    mixed = judge([Row(1, [10.0, 10.0], [9.0, 9.0]), Row(64, [10.0, 10.0], [11.0, 11.0])], 2, FLAGS)
    assert mixed.kind is Kind.MIXED
    assert "faster at batch 1 and slower at batch 64" in mixed.advice


@pytest.mark.parametrize(
    ("options", "on", "off"),
    [
        ({ENABLE}, (ENABLE,), ()),
        ({ENABLE, HATCH}, (ENABLE,), (HATCH,)),
        ({BACKEND, ENABLE, HATCH}, (BACKEND, "trtllm"), (HATCH,)),
        ({BACKEND, HATCH}, (BACKEND, "trtllm"), (HATCH,)),
    ],
)
def test_flags_per_option_set(options: set[str], on: tuple[str, ...], off: tuple[str, ...]) -> None:
    flags = choose(options)
    assert flags is not None and (flags.on, flags.off) == (on, off)


def test_no_fusion_option_no_flags() -> None:
    assert choose(set()) is None
    assert choose({HATCH}) is None


def test_runs_alternate_so_cold_caches_fall_on_both_modes() -> None:
    from sm120patch.bench.server.driver import order

    assert order(1) == [(0, "off"), (0, "on")]
    assert order(3) == [(0, "off"), (0, "on"), (1, "on"), (1, "off"), (2, "off"), (2, "on")]


def test_the_spread_of_the_repeats() -> None:
    from sm120patch.bench.server.verdict import spread_pct

    assert spread_pct([]) is None and spread_pct([10.0]) is None
    assert spread_pct([9.0, 10.0, 12.0]) == pytest.approx(30.0)
    assert spread_pct([10.0, 12.0]) == pytest.approx(2 / 11 * 100)


def test_one_mode_repeated_measures_the_noise_from_that_mode_alone() -> None:
    row = Row(4, [10.0], [9.0, 9.9])
    assert row.noise_pct == pytest.approx(0.9 / 9.45 * 100) and not row.measured_noise
    assert Row(4, [10.0, 10.5], [9.0]).noise_pct == pytest.approx(0.5 / 10.25 * 100)
    assert not Row(4, [10.0, 10.5], [9.0]).measured_noise
    assert Row(4, [10.0, 10.5], [9.0, 9.0]).measured_noise
    assert Row(4, [10.0, 10.0], [9.0, 9.9]).noise_pct == pytest.approx(0.9 / 9.45 * 100)  # the larger spread


def test_throughput_is_tokens_per_second_of_the_batch() -> None:
    row = Row(8, [20.0, 30.0, 40.0], [10.0, 10.0, 50.0])
    assert (row.off, row.on) == (30.0, 10.0)
    assert row.off_tps == pytest.approx(8 / 30.0 * 1000) and row.on_tps == pytest.approx(800.0)


@pytest.mark.parametrize(("on", "expected"), [(99.0, Compare.FASTER), (101.0, Compare.SLOWER), (99.5, Compare.EVEN)])
def test_a_difference_of_exactly_the_noise_counts(on: float, expected: Compare) -> None:
    row = Row(1, [100.0, 100.0], [on, on])
    assert row.noise_pct == NOISE_FLOOR_PCT and abs(row.delta_pct) in (1.0, 0.5)
    assert row.compare is expected


def test_every_advice_is_one_whole_sentence() -> None:
    pays = judge([Row(8, [12.0, 12.0], [11.0, 11.0]), Row(1, [10.0, 10.0], [9.0, 9.0])], 2, FLAGS)
    assert pays.advice == (
        "fusion pays in sglang's own decode at TP 2: 8.3 % to 10.0 % faster per token at batch 1, 8: "
        "launch with `--flashinfer-allreduce-fusion-backend trtllm`"
    )
    one = judge([Row(16, [10.0, 10.0], [9.0, 9.0])], 8, FLAGS)
    assert one.advice == (
        "fusion pays in sglang's own decode at TP 8: 10.0 % faster per token at batch 16: "
        "launch with `--flashinfer-allreduce-fusion-backend trtllm`"
    )
    same = judge([Row(1, [10.0, 10.0], [9.0, 9.0]), Row(2, [20.0, 20.0], [18.0, 18.0])], 2, FLAGS)
    assert "TP 2: 10.0 % faster per token at batch 1, 2:" in same.advice
    costs = judge([Row(64, [10.0, 10.0], [11.0, 11.0]), Row(32, [10.0, 10.0], [12.0, 12.0])], 4, FLAGS)
    assert costs == Verdict(
        Kind.COSTS,
        "fusion is slower in sglang's own decode at TP 4 (10.0 % to 20.0 % at batch 32, 64): keep it off, "
        f"launch with `{HATCH}`",
    )
    even = judge([Row(1, [10.0, 10.4], [10.1, 10.1]), Row(2, [10.0, 10.0], [10.0, 10.0])], 2, FLAGS)
    assert even == Verdict(
        Kind.EVEN,
        "fusion makes no difference beyond the noise (±3.9 %) in sglang's own decode at TP 2: either way",
    )
    mixed = judge(
        [Row(64, [10.0, 10.0], [11.0, 11.0]), Row(8, [10.0, 10.0], [9.0, 9.0]), Row(1, [10.0, 10.0], [9.0, 9.0])],
        2,
        FLAGS,
    )
    assert mixed == Verdict(
        Kind.MIXED,
        "fusion is faster at batch 1, 8 and slower at batch 64 at TP 2: launch with "
        "`--flashinfer-allreduce-fusion-backend trtllm` only where batches like 1 dominate; otherwise launch with "
        f"`{HATCH}`",
    )


def test_no_verdict_says_why() -> None:
    assert no_verdict("the on run made no fused call") == Verdict(
        Kind.NONE, "no verdict: the on run made no fused call"
    )
