"""bench mirrors how the installed sglang calls FlashInfer's fused allreduce."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from sm120patch.bench.mirror import FUSION_FILE, REFERENCE_CALL, read_call

# The two shapes the releases have, written here in miniature (not sglang's code).
LEGACY_SHAPE = """
def flashinfer_allreduce_residual_rmsnorm(
    input_tensor, residual, weight, eps=1e-6, max_token_num=2048, use_oneshot=None,
    trigger_completion_at_end=False, fp32_acc=False,
):
    _flashinfer_comm.trtllm_allreduce_fusion(
        allreduce_in=input_tensor, launch_with_pdl=True, use_oneshot=use_oneshot, fp32_acc=fp32_acc,
    )
"""
UNIFIED_SHAPE = """
def flashinfer_allreduce_residual_rmsnorm(
    input_tensor, residual, weight, eps=1e-6, max_token_num=4096, use_oneshot=None,
    trigger_completion_at_end=True, fp32_acc=True, use_attn_tp_group=True,
):
    kwargs = dict(input=input_tensor, pattern=1, launch_with_pdl=False, use_oneshot=use_oneshot)
    kwargs["fp32_acc"] = fp32_acc
    _flashinfer_comm.allreduce_fusion(**kwargs)
"""


def package_with(tmp_path: Path, source: str) -> Path:
    package = tmp_path / "sglang"
    path = package / FUSION_FILE
    path.parent.mkdir(parents=True)
    path.write_text(textwrap.dedent(source))
    return package


def test_legacy_shape(tmp_path: Path) -> None:
    call = read_call(package_with(tmp_path, LEGACY_SHAPE), "0.5.9")
    assert call.values == {
        "max_token_num": 2048,
        "use_oneshot": None,
        "trigger_completion_at_end": False,
        "fp32_acc": False,
        "launch_with_pdl": True,
    }
    assert call.defaulted == ()
    assert call.source.startswith(f"sglang 0.5.9 ({FUSION_FILE}:2, flashinfer_allreduce_residual_rmsnorm)")


def test_unified_shape_reads_the_kwargs_dict(tmp_path: Path) -> None:
    call = read_call(package_with(tmp_path, UNIFIED_SHAPE), "0.5.99")
    assert call.values["launch_with_pdl"] is False  # the literal in the dict, not the reference's True
    assert (call.values["max_token_num"], call.values["trigger_completion_at_end"]) == (4096, True)


def test_a_value_not_found_keeps_the_reference_and_says_so(tmp_path: Path) -> None:
    source = "def flashinfer_allreduce_residual_rmsnorm(x, fp32_acc=False):\n    pass\n"
    call = read_call(package_with(tmp_path, source), "0.5.99")
    assert call.values["fp32_acc"] is False
    assert set(call.defaulted) == set(REFERENCE_CALL) - {"fp32_acc"}


def test_no_sglang_or_no_entry_point_mirrors_the_reference(tmp_path: Path) -> None:
    none = read_call(None, None)
    assert none.values == REFERENCE_CALL and "no sglang located" in none.source
    moved = read_call(package_with(tmp_path, "def other():\n    pass\n"), "0.6.0")
    assert moved.values == REFERENCE_CALL
    assert "sglang 0.6.0 has no flashinfer_allreduce_residual_rmsnorm()" in moved.source


def test_use_oneshot_is_explicit_where_flashinfer_has_no_table() -> None:
    call = read_call(None, None)
    assert call.for_world(4) is call
    six = call.for_world(16)
    assert six.values["use_oneshot"] is True
    assert "KeyError at TP 16" in six.notes[-1]
    assert call.values["use_oneshot"] is None  # the original is left alone


@pytest.mark.slow
@pytest.mark.parametrize(("version", "fp32_acc"), [("0.5.9", False), ("0.5.13", False), ("0.5.23", True)])
def test_real_releases(release, version: str, fp32_acc: bool) -> None:
    call = read_call(release(version), version)
    assert call.defaulted == ()
    assert call.values == dict(
        max_token_num=2048, use_oneshot=None, trigger_completion_at_end=False, fp32_acc=fp32_acc, launch_with_pdl=True
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("version", "routes"), [("0.5.13", False), ("0.5.17", False), ("0.5.18", True), ("0.5.23", True)]
)
def test_which_releases_route_plain_allreduces_to_flashinfer_with_fusion_on(
    release, version: str, routes: bool
) -> None:
    """0.5.18 added ``flashinfer_allreduce`` (kAllReduce for the attention-TP and MoE groups)."""
    assert read_call(release(version), version).routes_allreduce is routes
