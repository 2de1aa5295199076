"""Each answer check's every field (bench/server/answers.check): the forwards with a NaN or inf
counted (none outside the NaN check), the cosine kept where some runs could be compared, a
cosine exactly at the threshold agreeing, the reason each sentence leads with, and the likely
cause named; the extend compared where one run has no decode, the default's runs each against
its first."""

from __future__ import annotations

import pytest

from sm120patch.bench.server import answers
from sm120patch.bench.server.answers import COSINE_MIN, Status, check, compare, cosine
from sm120patch.bench.server.configs import BY_NAME
from sm120patch.bench.server.counter import Logits
from tests.bench.server.hand import logits_record

HEAD = [1.0, 2.0, 3.0, 4.0]
AGREES = logits_record(HEAD)
NEAR = logits_record([1.0, 2.0, 3.0, 4.01])
OTHER = logits_record([4.0, -3.0, 2.0, -1.0])


def test_the_reference_and_the_unchecked_count_no_bad_forward_and_say_why() -> None:
    ref = check(BY_NAME["default"], [AGREES], AGREES, COSINE_MIN)
    assert (ref.status, ref.cosine, ref.step, ref.nonfinite) == (Status.REFERENCE, None, None, 0)
    assert ref.why.startswith("sglang's default") and ref.why.endswith("checked against")
    alone = check(BY_NAME["fusion"], [AGREES], None, COSINE_MIN)
    assert (alone.status, alone.cosine, alone.step, alone.nonfinite) == (Status.UNCHECKED, None, None, 0)
    assert alone.why.startswith("no logits of sglang's default") and alone.why.endswith("compare with")


def test_some_runs_not_compared_keep_the_lowest_cosine_of_the_others() -> None:
    found = check(BY_NAME["fusion"], [AGREES, Logits()], AGREES, COSINE_MIN)
    assert (found.status, found.cosine, found.step, found.nonfinite) == (
        Status.UNCHECKED,
        pytest.approx(1.0),
        None,
        0,
    )
    assert found.why.startswith("its logits could not be compared") and found.why.endswith("or other inputs)")
    none = check(BY_NAME["fusion"], [Logits()], AGREES, COSINE_MIN)
    assert (none.status, none.cosine) == (Status.UNCHECKED, None)


def test_a_cosine_exactly_at_the_threshold_agrees_and_neither_verdict_counts_a_bad_forward() -> None:
    limit = compare(NEAR, AGREES)[0]
    assert limit is not None
    at = check(BY_NAME["fusion"], [NEAR], AGREES, limit)
    assert (at.status, at.cosine, at.nonfinite) == (Status.AGREES, limit, 0)
    wrong = check(BY_NAME["fusion"], [OTHER], AGREES, COSINE_MIN)
    assert (wrong.status, wrong.nonfinite) == (Status.DISAGREES, 0)


@pytest.mark.parametrize(("nonfinite", "forwards"), [(1, "1 forward gave"), (2, "2 forwards gave")])
def test_the_bad_forwards_are_counted_in_the_sentence(nonfinite: int, forwards: str) -> None:
    found = check(BY_NAME["fusion"], [logits_record(HEAD, nonfinite=nonfinite)], AGREES, COSINE_MIN)
    assert found.nonfinite == nonfinite and found.why.startswith(f"{forwards} NaN or inf logits: ")


def test_the_likely_cause_names_the_mechanism_and_the_issue_or_sglangs_own_path() -> None:
    fused = check(BY_NAME["fusion"], [OTHER], AGREES, COSINE_MIN).why
    assert "sglang calls it with PDL and trigger_completion_at_end=False" in fused
    assert "lets the next kernel read an unwritten buffer, vllm#45448)" in fused
    assert fused.endswith("where the fused path ran one-shot (small batches)")
    default = check(BY_NAME["default"], [logits_record(HEAD, nonfinite=2)], AGREES, COSINE_MIN).why
    assert default.endswith(": sglang's own unfused path")


def test_a_run_without_a_decode_is_compared_at_its_extend() -> None:
    extend_only = Logits(20, 0, {"extend": AGREES.first["extend"]})
    assert compare(extend_only, NEAR) == (pytest.approx(cosine(HEAD, [1.0, 2.0, 3.0, 4.01])), "extend")


def test_the_defaults_runs_are_each_compared_with_its_first() -> None:
    assert answers.self_agreement([AGREES, OTHER]) == pytest.approx(cosine([4.0, -3.0, 2.0, -1.0], HEAD))
    assert answers.self_agreement([AGREES, OTHER, AGREES]) == pytest.approx(cosine([4.0, -3.0, 2.0, -1.0], HEAD))
