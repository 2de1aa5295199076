"""The fusion options of a release, as they are passed and as they are said to a person."""

from __future__ import annotations

from sm120patch.bench.server.flags import Flags, choose
from sm120patch.sglang.options import BACKEND, BACKEND_VALUE, ENABLE, HATCH


def test_the_option_names_are_sglangs() -> None:
    assert (BACKEND, ENABLE, HATCH, BACKEND_VALUE) == (
        "--flashinfer-allreduce-fusion-backend",
        "--enable-flashinfer-allreduce-fusion",
        "--enforce-disable-flashinfer-allreduce-fusion",
        "trtllm",
    )


def test_a_release_with_the_backend_and_the_hatch_is_said_with_both() -> None:
    flags = choose({BACKEND, ENABLE, HATCH, "--tp-size"})
    assert flags == Flags((BACKEND, "trtllm"), (HATCH,))
    assert flags.on_text == "--flashinfer-allreduce-fusion-backend trtllm"
    assert flags.off_text == "--enforce-disable-flashinfer-allreduce-fusion"
    assert flags.keep_on == "launch with `--flashinfer-allreduce-fusion-backend trtllm`"
    assert flags.keep_off == "launch with `--enforce-disable-flashinfer-allreduce-fusion`"


def test_a_release_without_the_hatch_keeps_fusion_off_by_leaving_the_flag_out() -> None:
    flags = choose({ENABLE})
    assert flags == Flags((ENABLE,), ())
    assert flags.on_text == "--enable-flashinfer-allreduce-fusion"
    assert flags.off_text == ("no fusion option (this release has no --enforce-disable-flashinfer-allreduce-fusion)")
    assert flags.keep_on == "launch with `--enable-flashinfer-allreduce-fusion`"
    assert flags.keep_off == (
        "launch without `--enable-flashinfer-allreduce-fusion` (and `sm120patch revert`, then "
        "`sm120patch apply --skip server-args-auto-enable`)"
    )


def test_the_backend_wins_over_the_deprecated_flag_and_the_hatch_alone_is_no_fusion() -> None:
    assert choose({BACKEND}) == Flags((BACKEND, BACKEND_VALUE), ())
    assert choose({ENABLE, HATCH}) == Flags((ENABLE,), (HATCH,))
    assert choose({HATCH, "--enable-flashinfer-allreduce"}) is None
