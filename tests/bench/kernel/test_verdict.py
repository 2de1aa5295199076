"""bench's verdict: from rows to advice (pure)."""

from __future__ import annotations

import pytest

from sm120patch.bench.kernel.verdict import NOISE_PCT, Compare, Kind, Point, Verdict, judge


def rows(*pairs: tuple[int, float], unfused: float = 100.0) -> list[Point]:
    """Points at ``unfused`` µs unfused and the given fused µs."""
    return [Point(tokens, fused, unfused, True) for tokens, fused in pairs]


def test_faster_everywhere_pays_and_names_the_range() -> None:
    verdict = judge(rows((1, 50.0), (16, 60.0), (2048, 90.0)), tp=2)
    assert verdict.kind is Kind.PAYS
    assert verdict.advice == "fusion pays here at TP 2: 10 % to 50 % faster at 1 to 2048 tokens: leave it on"
    assert verdict.crossover is None


def test_a_win_above_tp2_points_at_the_auto_enable_at_any_tp() -> None:
    """The patched auto-enable waits for TP 2 by default: where fusion wins at a larger TP,
    the verdict names the apply that lets sglang turn it on there by itself."""
    assert judge(rows((1, 50.0), (2048, 90.0)), tp=4).advice == (
        "fusion pays here at TP 4: 10 % to 50 % faster at 1 to 2048 tokens: leave it on; "
        "`sm120patch apply --auto-enable-tp any` lets sglang turn it on by itself at TP 4"
    )
    assert "--auto-enable-tp" not in judge(rows((1, 50.0)), tp=2).advice


def test_slower_everywhere_costs_and_says_how_to_keep_it_off() -> None:
    verdict = judge(rows((1, 120.0), (64, 140.0)), tp=8, keep_off="`--off`")
    assert verdict.kind is Kind.COSTS
    assert verdict.advice == "fusion is slower at TP 8 (20 % to 40 % at 1 to 64 tokens): keep it off (`--off`)"


def test_faster_then_slower_gives_the_crossover() -> None:
    verdict = judge(rows((1, 50.0), (16, 70.0), (64, 101.0), (128, 130.0), (2048, 150.0)), tp=8)
    assert verdict.kind is Kind.MIXED
    assert verdict.crossover == 128  # 64 tokens is within the noise: the first slower size is 128
    assert "faster below 128 tokens and slower from 128 tokens at TP 8" in verdict.advice
    assert "--enforce-disable-flashinfer-allreduce-fusion" in verdict.advice


def test_slower_then_faster_is_the_other_crossover() -> None:
    verdict = judge(rows((1, 130.0), (16, 120.0), (512, 80.0)), tp=4)
    assert (verdict.kind, verdict.crossover) == (Kind.MIXED, 512)
    assert verdict.advice.startswith("fusion is slower below 512 tokens and faster from 512 tokens at TP 4")


def test_interleaved_sizes_have_no_crossover() -> None:
    verdict = judge(rows((1, 50.0), (16, 150.0), (64, 50.0), (128, 150.0)), tp=4)
    assert (verdict.kind, verdict.crossover) == (Kind.MIXED, None)
    assert "faster at 1, 64 tokens and slower at 16, 128 tokens" in verdict.advice


def test_within_the_noise_everywhere_is_even() -> None:
    verdict = judge(rows((1, 100.0 + NOISE_PCT - 0.1), (8, 100.0 - NOISE_PCT + 0.1)), tp=2)
    assert verdict.kind is Kind.EVEN


@pytest.mark.parametrize(
    ("fused", "expected"),
    [(100.0 - NOISE_PCT, Compare.FASTER), (100.0 + NOISE_PCT, Compare.SLOWER), (100.0, Compare.EVEN)],
)
def test_the_noise_band_edges(fused: float, expected: Compare) -> None:
    assert Point(1, fused, 100.0, True).compare is expected


def test_a_wrong_result_outranks_every_timing() -> None:
    points = [Point(1, 10.0, 100.0, False), Point(16, 10.0, 100.0, True), Point(8, 10.0, 100.0, False)]
    verdict = judge(points, tp=2)
    assert verdict.kind is Kind.WRONG
    assert verdict.advice.startswith(
        "the fused kernel gave wrong results at 1, 8 tokens on these GPUs: keep fusion off"
    )


def test_order_of_the_rows_does_not_matter() -> None:
    ordered = rows((1, 50.0), (16, 70.0), (128, 130.0))
    assert judge(list(reversed(ordered)), tp=8) == judge(ordered, tp=8)


def test_every_advice_is_one_whole_sentence_with_how_to_keep_fusion_off() -> None:
    off = "`sm120patch revert`, then `sm120patch apply --skip server-args-auto-enable`"
    assert judge(rows((1, 50.0), (128, 130.0)), tp=8, keep_off=off).advice == (
        "fusion is faster below 128 tokens and slower from 128 tokens at TP 8: it pays for decode-sized batches; "
        f"keep it off ({off}) where batches of 128+ tokens dominate"
    )
    assert judge(rows((1, 130.0), (512, 80.0)), tp=4, keep_off=off).advice == (
        "fusion is slower below 512 tokens and faster from 512 tokens at TP 4: small decode batches lose; "
        f"keep it off ({off}) for latency-bound serving"
    )
    assert judge(rows((1, 50.0), (16, 150.0), (64, 50.0)), tp=4, keep_off=off).advice == (
        "fusion is faster at 1, 64 tokens and slower at 16 tokens at TP 4: no clear crossover; measure your "
        "workload end to end before keeping it"
    )
    assert judge(rows((1, 100.0), (8, 101.0)), tp=2).advice == (
        "fusion makes no measurable difference at TP 2 (within ±3 % at every size): either way"
    )
    assert judge([Point(16, 10.0, 100.0, False)], tp=2).advice == (
        "the fused kernel gave wrong results at 16 tokens on these GPUs: keep fusion off "
        "(`--enforce-disable-flashinfer-allreduce-fusion` / `sm120patch revert`, then "
        "`sm120patch apply --skip server-args-auto-enable`) "
        "and upgrade FlashInfer"
    )


def test_no_rows_at_all_make_no_difference() -> None:
    assert judge([], tp=2) == Verdict(Kind.EVEN, judge(rows((1, 100.0)), tp=2).advice, None)


@pytest.mark.parametrize(
    ("pairs", "says"),
    [
        (((1, 50.0),), "50 % faster at 1 token:"),
        (((2, 50.0),), "50 % faster at 2 tokens:"),
        (((1, 50.0), (2, 50.4)), "50 % faster at 1 to 2 tokens:"),
        (((1, 50.0), (2, 49.6)), "50 % faster at 1 to 2 tokens:"),
        (((1, 50.0), (2, 51.0)), "49 % to 50 % faster at 1 to 2 tokens:"),
    ],
)
def test_one_size_is_one_token_count_and_one_rounded_percentage(
    pairs: tuple[tuple[int, float], ...], says: str
) -> None:
    assert says in judge(rows(*pairs), tp=2).advice


def test_an_indicative_verdict_says_why_before_the_advice() -> None:
    plain = judge(rows((1, 50.0)), tp=2)
    assert plain.text == plain.advice == "fusion pays here at TP 2: 50 % faster at 1 token: leave it on"
    flagged = judge(rows((1, 50.0)), tp=2, indicative=["stand-in norm", "eager mode"])
    assert flagged == Verdict(Kind.PAYS, plain.advice, None, ("stand-in norm", "eager mode"))
    assert flagged.text == f"indicative only (stand-in norm; eager mode): {plain.advice}"


@pytest.mark.parametrize(
    ("pairs", "crossover"),
    [
        (((1, 50.0), (16, 100.0), (64, 150.0)), 64),  # even sizes between the two runs belong to neither
        (((1, 100.0), (16, 50.0), (64, 150.0)), 64),  # the lower run may start even
        (((1, 50.0), (16, 150.0), (64, 100.0)), 16),  # and the upper one may end even
        (((1, 150.0), (16, 100.0), (64, 50.0)), 64),
        (((1, 50.0), (2, 50.0), (16, 150.0), (64, 150.0)), 16),
        (((1, 150.0), (2, 150.0), (16, 50.0), (64, 50.0)), 16),
    ],
)
def test_the_crossover_is_the_first_size_of_the_upper_run(pairs: tuple[tuple[int, float], ...], crossover: int) -> None:
    assert judge(rows(*pairs), tp=2).crossover == crossover


@pytest.mark.parametrize(
    "pairs",
    [
        ((1, 50.0), (16, 150.0), (64, 50.0)),
        ((1, 150.0), (16, 50.0), (64, 150.0)),
        ((1, 50.0), (16, 150.0), (64, 100.0), (128, 50.0)),
    ],
)
def test_sizes_that_interleave_have_no_crossover(pairs: tuple[tuple[int, float], ...]) -> None:
    verdict = judge(rows(*pairs), tp=2)
    assert (verdict.kind, verdict.crossover) == (Kind.MIXED, None)
    assert verdict.advice.endswith("no clear crossover; measure your workload end to end before keeping it")


def test_the_delta_is_fused_against_unfused() -> None:
    assert Point(1, 75.0, 100.0, True).delta_pct == -25.0
    assert Point(1, 150.0, 100.0, True).delta_pct == 50.0
