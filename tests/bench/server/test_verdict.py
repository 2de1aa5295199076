"""Off against on, per batch size: the noise of the repeats, the kind, the advice's flags."""

from __future__ import annotations

import pytest

from sm120patch.bench.server.flags import BACKEND, ENABLE, HATCH, choose
from sm120patch.bench.server.verdict import NOISE_FLOOR_PCT, SINGLE_RUN_PCT, Compare, Kind, Row, judge

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
