"""The answer at its edges (bench/server/answer): a part with nothing measured keeps its name,
one run each is judged against the single-run noise, a lead exactly the noise does not win,
a default with wrong answers leaves the answer to the fastest that agrees (even at 0 %), the
figures' rounding, no "fusion loses" line without a fused configuration that agrees, and
several wrong or unchecked configurations listed by name."""

from __future__ import annotations

from sm120patch.bench.server.answer import answer, decide
from sm120patch.bench.server.answers import Check, Status
from sm120patch.bench.server.configs import BY_NAME
from sm120patch.bench.server.verdict import SINGLE_RUN_PCT
from tests.bench.server.hand import FLAGS
from tests.bench.server.test_answer import AGREE, NAN, REF, SIZES, figures

UNCHECKED = Check(Status.UNCHECKED, None, None, 0, "no logits of sglang's default to compare with")


def test_a_part_with_nothing_measured_keeps_its_name() -> None:
    part = decide("prefill", {}, ["default"], SIZES)
    assert (part.part, part.config, part.noise_pct) == ("prefill", None, SINGLE_RUN_PCT)


def test_no_configuration_that_agrees_is_no_answer_and_no_winner() -> None:
    """The default's answers wrong, every other configuration wrong or unchecked: measured, but
    nothing eligible. No answer, no winner at any size, the single-run noise (it once raised)."""
    part = decide("decode", {"default": {1: [1.0]}, "fusion": {1: [0.5]}}, [], (1,))
    assert (part.config, part.vs_default_pct, part.noise_pct, part.winners) == (None, None, SINGLE_RUN_PCT, {})
    assert part.figures == {"default": 1.0, "fusion": 0.5}
    chosen = [BY_NAME["default"], BY_NAME["fusion"]]
    said = answer(
        chosen, {"default": NAN, "fusion": UNCHECKED}, figures(default=10.0, fusion=9.0), {}, SIZES, FLAGS, None, 2
    )
    assert [p.config for p in said.parts] == [None] * len(said.parts)
    assert "no configuration whose answers agree was measured in every run" in said.sentence


def test_one_run_each_is_judged_against_the_single_run_noise() -> None:
    part = decide("decode", {"default": {1: [10.0]}, "fusion": {1: [9.0]}}, ["default", "fusion"], (1,))
    assert (part.config, part.noise_pct) == ("fusion", SINGLE_RUN_PCT)


def test_a_lead_of_exactly_the_noise_leaves_sglangs_default() -> None:
    """The default's runs spread 50 % (6, 8, 10 ms); fusion is 50 % faster: not beyond the noise."""
    part = decide("decode", {"default": {1: [6.0, 8.0, 10.0]}, "fusion": {1: [4.0, 4.0]}}, ["default", "fusion"], (1,))
    assert (part.config, part.noise_pct, part.figures["fusion"]) == ("default", 50.0, 0.5)


def test_a_default_with_wrong_answers_leaves_the_answer_to_the_fastest_that_agrees() -> None:
    within = decide("decode", figures(default=10.0, fusion=9.95), ["fusion"], SIZES)
    assert within.config == "fusion"
    chosen = [BY_NAME["default"], BY_NAME["fusion"]]
    even = answer(
        chosen, {"default": NAN, "fusion": AGREE}, figures(default=10.0, fusion=10.0), {}, SIZES, FLAGS, None, 2
    )
    assert (even.parts[0].config, even.parts[0].vs_default_pct) == ("fusion", 0.0)
    assert "decode at TP 2: fusion is fastest, 0.0 % faster than sglang's default" in even.sentence


def test_the_lead_is_rounded_to_hundredths_of_a_percent_and_the_figures_to_four_places() -> None:
    part = decide("decode", figures(default=10.0, fusion=8.7654), ["default", "fusion"], SIZES)
    assert (part.vs_default_pct, part.figures) == (-12.35, {"default": 1.0, "fusion": 0.8765})


def test_pcie_ipc_fastest_without_a_fused_configuration_that_agrees_says_nothing_of_fusion() -> None:
    chosen = [BY_NAME["default"], BY_NAME["fusion"], BY_NAME["pcie-ipc"]]
    checks = {"default": REF, "fusion": NAN, "pcie-ipc": AGREE}
    found = answer(chosen, checks, figures(default=10.0, fusion=9.0, pcie_ipc=8.0), {}, SIZES, FLAGS, None, 4)
    assert found.parts[0].config == "pcie-ipc" and "fusion loses" not in found.sentence


def test_several_wrong_or_unchecked_configurations_are_listed_by_name() -> None:
    names = ["default", "fusion", "fusion-limit", "pcie-ipc", "pcie-ipc+fusion"]
    checks = {"default": REF, "fusion": NAN, "fusion-limit": NAN, "pcie-ipc": UNCHECKED, "pcie-ipc+fusion": UNCHECKED}
    found = answer([BY_NAME[n] for n in names], checks, figures(default=10.0), {}, SIZES, FLAGS, 256, 2)
    assert found.wrong == ["fusion", "fusion-limit"]
    assert "(wrong answers): fusion, fusion-limit;" in found.sentence
    assert found.sentence.endswith("could not be checked: pcie-ipc, pcie-ipc+fusion")
