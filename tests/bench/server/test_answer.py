"""The answer: per part, the fastest configuration whose answers agree, and its launch line."""

from __future__ import annotations

from sm120patch.bench.server.answer import Launch, answer, decide, launch
from sm120patch.bench.server.answers import Check, Status
from sm120patch.bench.server.configs import BY_NAME, CONFIGS
from sm120patch.bench.server.flags import Flags
from sm120patch.sglang.options import ENABLE, HATCH, PCIE_IPC_FLAG
from tests.bench.server.hand import FLAGS

SIZES = (1, 8)
AGREE = Check(Status.AGREES, 0.9999, "decode", 0, "agrees")
REF = Check(Status.REFERENCE, None, None, 0, "reference")
NAN = Check(Status.NAN, None, None, 4, "4 forwards gave NaN or inf logits: likely PDL")


def figures(**ms: float) -> dict[str, dict[int, list[float]]]:
    """Each configuration (``pcie_ipc`` for ``pcie-ipc``) at ``ms`` per step at every size, two runs."""
    return {
        name.replace("_", "-").replace("-plus-", "+"): {s: [value * s, value * s * 1.005] for s in SIZES}
        for name, value in ms.items()
    }


def test_the_fastest_that_agrees_wins_by_more_than_the_noise() -> None:
    part = decide("decode", figures(default=10.0, fusion=9.0, pcie_ipc=8.0), ["default", "fusion", "pcie-ipc"], SIZES)
    assert (part.config, part.vs_default_pct, part.winners) == ("pcie-ipc", -20.0, {1: "pcie-ipc", 8: "pcie-ipc"})
    assert part.figures == {"default": 1.0, "fusion": 0.9, "pcie-ipc": 0.8}
    within = decide("decode", figures(default=10.0, fusion=9.95), ["default", "fusion"], SIZES)
    assert (within.config, within.vs_default_pct) == ("default", 0.0)  # 0.5 % against ±1 %: sglang's default stands


def test_a_wrong_configuration_is_never_the_answer_however_fast() -> None:
    part = decide("decode", figures(default=10.0, fusion=5.0), ["default"], SIZES)
    assert (part.config, part.winners) == ("default", {1: "default", 8: "default"})


def test_a_configuration_missing_a_batch_size_is_left_out() -> None:
    found = figures(default=10.0, fusion=5.0, pcie_ipc=9.0)
    del found["fusion"][8]
    part = decide("decode", found, ["default", "fusion", "pcie-ipc"], SIZES)
    assert part.config == "pcie-ipc" and "fusion" not in part.figures
    assert decide("prefill", {"fusion": {1: [1.0]}}, ["fusion"], SIZES).config is None


def test_the_launch_line_of_each_configuration() -> None:
    assert launch(BY_NAME["fusion-limit"], FLAGS, 256) == Launch({}, FLAGS.on, "sm120patch apply --fuse-up-to 256")
    pcie = launch(BY_NAME["pcie-ipc"], FLAGS, None)
    assert pcie.text == f"`{PCIE_IPC_FLAG}=1 python -m sglang.launch_server ... {HATCH}`"
    limit = launch(BY_NAME["pcie-ipc+fusion-limit"], FLAGS, 512)
    assert limit.text == (
        f"`sm120patch apply --fuse-up-to 512`, then `{PCIE_IPC_FLAG}=1 python -m sglang.launch_server ... "
        f"{' '.join(FLAGS.on)}`"
    )


def test_where_fusion_loses_to_pcie_ipc_the_answer_says_revert() -> None:
    checks = {c.name: AGREE for c in CONFIGS} | {"default": REF}
    found = answer(
        CONFIGS,
        checks,
        figures(default=10.0, fusion=9.0, fusion_limit=9.1, pcie_ipc=8.0, pcie_ipc_plus_fusion=9.0),
        {},
        SIZES,
        FLAGS,
        256,
        4,
    )
    assert [p.part for p in found.parts] == ["decode"]  # no prefill measured
    assert found.sentence == (
        "decode at TP 4: pcie-ipc is fastest, 20.0 % faster than sglang's default (noise ±1.0 %): "
        f"{BY_NAME['pcie-ipc'].sentence}; launch with `{PCIE_IPC_FLAG}=1 python -m sglang.launch_server ... {HATCH}`"
        "; fusion loses to PCIe-IPC in decode (fusion, fusion-limit, pcie-ipc+fusion slower than pcie-ipc): "
        f"`sm120patch revert` is the right move (or keep the patches and launch with `{HATCH}`)"
    )
    no_hatch = answer(
        CONFIGS[:4], checks, figures(default=10.0, fusion=9.0, pcie_ipc=8.0), {}, SIZES, Flags((ENABLE,), ()), None, 2
    )
    assert no_hatch.sentence.endswith(f"(or keep the patches and this release has no {HATCH} (0.5.10+), so revert)")


def test_configurations_whose_answers_could_not_be_checked_are_named_and_not_the_answer() -> None:
    unchecked = Check(Status.UNCHECKED, None, None, 0, "no logits of sglang's default to compare with")
    found = answer(
        CONFIGS[:2], {"default": REF, "fusion": unchecked}, figures(default=10.0, fusion=5.0), {}, SIZES, FLAGS, None, 2
    )
    assert found.parts[0].config == "default"
    assert found.sentence.endswith("; not the answer, their answers could not be checked: fusion")


def test_per_part_the_limit_wins_prefill_and_wrong_ones_are_named() -> None:
    chosen = CONFIGS[:3]
    checks = {"default": REF, "fusion": NAN, "fusion-limit": AGREE}
    found = answer(
        chosen,
        checks,
        figures(default=10.0, fusion=8.0, fusion_limit=9.0),
        figures(default=100.0, fusion=120.0, fusion_limit=99.9),
        SIZES,
        FLAGS,
        256,
        2,
    )
    assert [(p.part, p.config) for p in found.parts] == [("decode", "fusion-limit"), ("prefill", "default")]
    assert found.wrong == ["fusion"]
    assert found.launches["fusion-limit"].apply == "sm120patch apply --fuse-up-to 256"
    assert found.sentence.endswith(
        "prefill at TP 2: sglang's default is fastest (or nothing beats it beyond ±1.0 %); never the answer, "
        "whatever its speed (wrong answers): fusion"
    )
