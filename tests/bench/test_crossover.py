"""The crossover bench names: the largest measured token count up to which fusion wins at
every point beyond the noise, from the H200 runs recorded in docs/bench and from synthetic rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm120patch.bench.saved import FLOOR, crossover_of
from sm120patch.bench.verdict import NOISE_PCT, Point, Reach, crossover
from sm120patch.errors import EnvironmentProblem

RECORDED = sorted((Path(__file__).parents[2] / "docs" / "bench").glob("tp2-h200*.json"))


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_the_recorded_h200_runs_cross_at_512_against_the_allreduce_alone(path: Path) -> None:
    """Their unfused side was plain torch, so fusion is held to the allreduce alone: it wins to
    512 tokens, is even at 1024 (+1 %) and loses at 2048 (137 vs 124 µs)."""
    data = json.loads(path.read_text())
    found = crossover_of(data)
    assert (found.reach, found.limit, found.next_tokens, found.against) == (Reach.UP_TO, 512, 1024, FLOOR)
    assert found.margin_pct is not None and found.margin_pct < -NOISE_PCT
    assert found.next_pct is not None and abs(found.next_pct) < NOISE_PCT
    assert "`sm120patch apply --fuse-up-to measured` sets sglang's fusion token limit to 512" in found.text


def test_against_sglangs_own_unfused_path_the_recorded_run_wins_everywhere() -> None:
    data = json.loads(RECORDED[0].read_text())
    data["baseline"] = {"source": "sglang", "indicative": False}
    found = crossover_of(data)
    assert (found.reach, found.tokens, found.limit) == (Reach.ALWAYS, 2048, None)
    assert "keep sglang's limit" in found.text


def points(*pairs: tuple[int, float], ok: bool = True) -> list[Point]:
    """Fused against 100 µs unfused: (tokens, fused µs)."""
    return [Point(tokens, fused, 100.0, ok) for tokens, fused in pairs]


def test_fusion_that_loses_at_the_smallest_size_never_wins() -> None:
    found = crossover(points((1, 99.0), (16, 50.0)))  # -1 %: within the noise
    assert (found.reach, found.limit, found.next_tokens) == (Reach.NEVER, None, 1)
    assert "keep fusion off" in found.text


def test_the_limit_is_the_end_of_the_first_run_of_wins_even_if_a_later_size_wins_again() -> None:
    found = crossover(points((64, 80.0), (1, 50.0), (256, 102.0), (1024, 70.0)))  # any order
    assert (found.reach, found.limit, found.next_tokens, round(found.next_pct or 0, 1)) == (Reach.UP_TO, 64, 256, 2.0)


def test_exactly_the_noise_counts_as_a_win_and_just_inside_does_not() -> None:
    assert crossover(points((1, 97.0), (2, 97.1))).limit == 1
    assert crossover(points((1, 60.0), (2, 50.0)), noise_pct=45.0).reach is Reach.NEVER  # -40 %: not beyond it


def test_a_wrong_fused_result_wins_nowhere() -> None:
    found = crossover([*points((1, 10.0)), *points((2048, 10.0), ok=False)])
    assert (found.reach, found.wrong) == (Reach.NEVER, True)
    assert "a fused result was wrong" in found.text


def test_rows_that_are_not_this_tools_are_said_in_one_sentence() -> None:
    with pytest.raises(EnvironmentProblem, match="not a bench result of this tool"):
        crossover_of({"rows": [{"tokens": 1}]})
