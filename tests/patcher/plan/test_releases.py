"""What is known of releases: the FlashInfer each pins, and the warning when the fused path
still could not run (the one apply, verify and demo print)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from packaging.version import Version

from sm120patch.sglang import flashinfer, releases
from sm120patch.sglang.tree import from_directory
from tests.support.mini_sglang import FILES, FUSION, write_mini_sglang

EFFECT = "sglang 0.5.9 creates FlashInfer's workspace inside CUDA-graph capture with no fallback"


def test_pins_are_read_by_public_release() -> None:
    assert releases.pin_for("0.5.9") == "0.6.3"
    assert releases.pin_for("0.5.23+14.gdeadbee") == "0.7.2"  # a checkout past the tag: the tag's pin
    assert releases.pin_for("0.4.6-post1") == "0.2.3"  # spelled another way, the same release
    assert releases.pin_for("9.9.9") is None and releases.pin_for(None) is None
    assert releases.pin_for("not a version") is None
    # pin_for looks a release up by its normalized public version: every key must be one.
    assert [v for v in releases.ALL_RELEASES if Version(v).public != v] == []
    assert releases.FIRST_PINNING_SM12X == "0.5.18"


def test_an_installed_flashinfer_without_the_kernel_is_named_with_its_evidence(tmp_path: Path) -> None:
    facts = flashinfer.FlashInfer("0.6.16", tmp_path, (9, 10), False, "jit/comm.py: [9, 10]")
    warning = releases.flashinfer_warning(facts, "0.5.9", EFFECT)
    assert warning == (
        "FlashInfer 0.6.16 does not build the trtllm allreduce for SM12x (jit/comm.py: [9, 10]); the first that "
        f"does is 0.6.17 (flashinfer#3903). With fusion on, {EFFECT}. "
        "Upgrade: `pip install -U 'flashinfer-python>=0.6.17'`."
    )


def test_without_a_version_the_installed_one_is_still_named(tmp_path: Path) -> None:
    facts = flashinfer.FlashInfer(None, tmp_path, (9, 10), False, "src")
    warning = releases.flashinfer_warning(facts, "0.5.9")
    assert warning == (
        "the installed FlashInfer does not build the trtllm allreduce for SM12x (src); the first that does is "
        "0.6.17 (flashinfer#3903). With fusion on, FlashInfer's JIT raises 'No supported CUDA architectures found "
        "for major versions [9, 10]' on SM12x (sglang#15650). Upgrade: `pip install -U 'flashinfer-python>=0.6.17'`."
    )


@pytest.mark.parametrize("kernel", [True, None])
def test_an_installed_flashinfer_with_the_kernel_or_unknown_warns_nothing(tmp_path: Path, kernel: bool | None) -> None:
    facts = flashinfer.FlashInfer("0.6.18", tmp_path, None, kernel, "src")
    assert releases.flashinfer_warning(facts, "0.5.9", EFFECT) is None


def test_without_flashinfer_the_pin_decides() -> None:
    absent = flashinfer.inspect(None, None)
    assert absent.found is False and absent.source == "no flashinfer package found beside sglang"
    warning = releases.flashinfer_warning(absent, "0.5.9", EFFECT)
    assert warning is not None and warning.startswith(
        "FlashInfer is not installed here; sglang 0.5.9 pins 0.6.3, which has no SM12x allreduce kernel"
    )
    assert f"With fusion on, {EFFECT}." in warning
    assert releases.flashinfer_warning(absent, "0.5.18") is None  # pins 0.6.17
    assert releases.flashinfer_warning(absent, "9.9.9") is None  # no known pin: nothing to say


def test_inspect_keeps_what_it_was_given(tmp_path: Path) -> None:
    facts = flashinfer.inspect("0.6.16", None)
    assert (facts.version, facts.package_dir, facts.majors, facts.sm12x_kernel) == ("0.6.16", None, None, False)
    assert facts.source == "version 0.6.16 against 0.6.17 (flashinfer#3903); its code was not found"
    code = flashinfer.inspect("0.6.16", tmp_path)
    assert code.package_dir == tmp_path and code.version == "0.6.16"


def without_probe(files: dict[str, str]) -> dict[str, str]:
    """The miniature release as one from before 0.5.4: sglang.srt.utils has no is_sm120_supported."""
    common = "srt/utils/common.py"
    probe = "def is_sm120_supported():\n    return is_cuda() and _major() == 12\n\n\n"
    assert probe in files[common]
    return {**files, common: files[common].replace(probe, "")}


def test_a_release_with_the_probe_is_not_refused(tmp_path: Path) -> None:
    assert releases.refusal(from_directory(write_mini_sglang(tmp_path / "site"))) is None


def test_a_release_without_the_probe_is_refused_by_name(tmp_path: Path) -> None:
    tree = from_directory(write_mini_sglang(tmp_path / "site", "0.5.3", without_probe(FILES)))
    assert releases.refusal(tree) == (
        "sglang 0.5.3 has no SM12x probe (sglang.srt.utils.is_sm120_supported, added in 0.5.4), so its fusion "
        "gates cannot be widened without adding GPU detection to sglang. Upgrade to sglang >= 0.5.4."
    )


def test_a_release_without_fusion_is_refused_and_an_unknown_version_is_this_sglang(tmp_path: Path) -> None:
    files = {rel: text for rel, text in without_probe(FILES).items() if rel != FUSION}
    tree = from_directory(write_mini_sglang(tmp_path / "site", "0.4.8", files))
    assert releases.refusal(tree) == (
        "sglang 0.4.8 has no FlashInfer allreduce fusion (it arrived in 0.4.9): there is nothing to widen. "
        "The first release sm120patch supports is 0.5.4."
    )
    assert releases.refusal(dataclasses.replace(tree, version=None)) == (
        "this sglang has no FlashInfer allreduce fusion (it arrived in 0.4.9): there is nothing to widen. "
        "The first release sm120patch supports is 0.5.4."
    )


@pytest.mark.parametrize(
    ("flashinfer_version", "warned"), [("0.6.17", False), ("0.6.12", True)], ids=["0.6.17", "0.6.12"]
)
def test_the_release_code_is_read_only_for_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flashinfer_version: str, warned: bool
) -> None:
    """verify and apply read the fusion module with ``ast`` (startup_risk) only to say what a
    warning would mean: a FlashInfer with the kernel costs no parse."""
    from sm120patch.patcher.commands.kernel_blockers import fused_path_warnings
    from sm120patch.sglang import startup_risk

    read: list[bytes] = []
    monkeypatch.setattr(startup_risk, "missing_kernel_effect", read.append)
    tree = from_directory(write_mini_sglang(tmp_path / "site"))
    tree.__dict__["flashinfer_facts"] = flashinfer.inspect(flashinfer_version, None)
    assert bool(fused_path_warnings(tree)) is warned
    assert len(read) == int(warned)
