"""Each configuration's answers against sglang's default: NaN, a disagreeing vector, the
threshold and its calibration from two default runs."""

from __future__ import annotations

import math

import pytest

from sm120patch.bench.server import answers
from sm120patch.bench.server.answers import COSINE_MIN, SELF_MARGIN, Status, check, compare, cosine, threshold
from sm120patch.bench.server.configs import BY_NAME
from sm120patch.bench.server.counter import Logits
from tests.bench.server.hand import logits_record

AGREES = logits_record([1.0, 2.0, 3.0, 4.0])
NEAR = logits_record([1.0, 2.0, 3.0, 4.01])  # bf16-sized noise
OTHER = logits_record([4.0, -3.0, 2.0, -1.0])  # a disagreeing vector: an unwritten buffer's
WITH_NAN = logits_record([1.0, None, 3.0, 4.0], nonfinite=3)


def test_cosine() -> None:
    assert cosine([1.0, 0.0], [2.0, 0.0]) == pytest.approx(1.0)
    assert cosine([1.0, 0.0], [0.0, 1.0]) == pytest.approx(0.0)
    assert cosine([1.0, 0.0], [-1.0, 0.0]) == pytest.approx(-1.0)
    for a, b in (([1.0], [1.0, 2.0]), ([], []), ([0.0, 0.0], [1.0, 1.0]), ([None, 1.0], [1.0, 1.0])):
        assert cosine(a, b) is None


def test_decode_is_compared_where_both_decoded_the_same_tokens_else_the_extend() -> None:
    assert compare(NEAR, AGREES) == (pytest.approx(cosine([1, 2, 3, 4.01], [1, 2, 3, 4])), "decode")
    other_tokens = logits_record([1.0, 2.0, 3.0, 4.0], decode_ids=[7, 7])
    assert compare(other_tokens, AGREES)[1] == "extend"
    assert compare(Logits(), AGREES) == (None, None)


def test_the_default_is_the_reference_unless_its_logits_are_not_finite() -> None:
    assert check(BY_NAME["default"], [AGREES], AGREES, COSINE_MIN).status is Status.REFERENCE
    assert check(BY_NAME["default"], [WITH_NAN], AGREES, COSINE_MIN).status is Status.NAN


def test_nan_in_a_fused_run_is_wrong_and_names_pdl_early_completion() -> None:
    found = check(BY_NAME["fusion"], [AGREES, WITH_NAN], AGREES, COSINE_MIN)
    assert (found.status, found.nonfinite, found.eligible) == (Status.NAN, 3, False)
    assert found.why.startswith("3 forwards gave NaN or inf logits: likely FlashInfer's fused kernel signalling")
    assert "trigger_completion_at_end=False" in found.why and "one-shot" in found.why


def test_a_disagreeing_vector_is_wrong() -> None:
    found = check(BY_NAME["pcie-ipc+fusion"], [AGREES, OTHER], AGREES, COSINE_MIN)
    assert found.status is Status.DISAGREES and found.status.wrong and found.step == "decode"
    assert found.cosine == pytest.approx(cosine([4, -3, 2, -1], [1, 2, 3, 4]))
    assert found.why.startswith(f"its first decode's logits disagree with sglang's default (cosine {found.cosine:.4f}")
    pcie = check(BY_NAME["pcie-ipc"], [OTHER], AGREES, COSINE_MIN)
    assert pcie.why.endswith(
        "likely sglang's PCIe-IPC allreduce on this host (its peer copies, or a size it does not fit)"
    )


def test_agreement_within_noise() -> None:
    found = check(BY_NAME["fusion"], [NEAR, AGREES], AGREES, COSINE_MIN)
    assert (found.status, found.eligible) == (Status.AGREES, True)
    assert found.why == f"agrees with sglang's default (cosine {found.cosine:.4f} >= {COSINE_MIN:.4f})"


def test_nothing_to_compare_is_unchecked_and_not_the_answer() -> None:
    assert check(BY_NAME["fusion"], [AGREES], None, COSINE_MIN).status is Status.UNCHECKED
    found = check(BY_NAME["fusion"], [AGREES, Logits()], AGREES, COSINE_MIN)
    assert (found.status, found.eligible) == (Status.UNCHECKED, False)


def test_the_threshold_is_lowered_to_the_defaults_own_agreement_less_a_margin() -> None:
    assert threshold(None) == COSINE_MIN
    assert threshold(1.0) == COSINE_MIN  # never stricter than the calibrated constant
    assert threshold(0.9) == pytest.approx(0.9 - SELF_MARGIN)
    assert answers.self_agreement([AGREES]) is None
    assert answers.self_agreement([AGREES, NEAR]) == pytest.approx(cosine([1, 2, 3, 4.01], [1, 2, 3, 4]))
    assert answers.self_agreement([AGREES, Logits()]) is None
    assert math.isclose(answers.self_agreement([AGREES, AGREES]) or 0, 1.0)
