"""The crossover bench names: the largest measured token count up to which fusion wins at
every point beyond the noise, from the H200 runs recorded in docs/bench and from synthetic rows."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from sm120patch.bench.kernel.saved import SGLANGS, STAND_INS, crossover_json, crossover_of
from sm120patch.bench.kernel.verdict import Point, Reach, crossover
from sm120patch.errors import EnvironmentProblem

RECORDED = sorted((Path(__file__).parents[3] / "docs" / "bench").glob("tp2-h200*.json"))


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
def test_a_recorded_run_against_stand_ins_is_indicative_and_agrees_with_its_verdict(path: Path) -> None:
    """The recorded H200 runs' unfused side was plain torch (stand-ins): the crossover is taken
    against that same side as the verdict ("fusion pays … leave it on"), so it keeps sglang's
    limit too, and says it is only indicative in its text and JSON."""
    data = json.loads(path.read_text())
    found = crossover_of(data)
    assert (found.reach, found.limit, found.against) == (Reach.ALWAYS, None, STAND_INS)
    assert data["verdict"]["kind"] == "pays"
    assert found.indicative and found.text.startswith("indicative only (")
    assert crossover_json(found)["indicative"] is True


def test_a_run_against_sglangs_own_unfused_path_is_not_indicative() -> None:
    data = json.loads(RECORDED[0].read_text())
    data["baseline"] = {"source": "sglang", "indicative": False}
    found = crossover_of(data)
    assert (found.reach, found.tokens, found.limit, found.against) == (Reach.ALWAYS, 2048, None, SGLANGS)
    assert not found.indicative and found.text.startswith("crossover: none measured")
    assert "keep sglang's limit" in found.text


def test_a_crossover_against_stand_ins_does_not_offer_the_limit_to_apply() -> None:
    found = replace(crossover(points((1, 50.0), (2048, 120.0))), indicative=("stand-ins",))
    assert found.limit == 1 and "beyond the fixed ±3 % threshold" in found.text  # a threshold, not the spread
    assert found.text.startswith("indicative only (stand-ins): crossover: fusion wins at every size up to 1 tokens")
    assert found.text.endswith("`sm120patch apply --fuse-up-to measured` refuses it: measure where sglang imports")


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
