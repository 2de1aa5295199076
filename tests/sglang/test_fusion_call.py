"""bench mirrors how the installed sglang calls FlashInfer's fused allreduce."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from sm120patch.sglang.fusion_call import FUSION_FILE, REFERENCE_CALL, SglangCall, read_call

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


def test_the_whole_call_read_names_the_line_and_the_release(tmp_path: Path) -> None:
    package = package_with(tmp_path, LEGACY_SHAPE)
    values = {
        "max_token_num": 2048,
        "use_oneshot": None,
        "trigger_completion_at_end": False,
        "fp32_acc": False,
        "launch_with_pdl": True,
    }
    source = f"{FUSION_FILE}:2, flashinfer_allreduce_residual_rmsnorm)"
    assert read_call(package, "0.5.9") == SglangCall(values, f"sglang 0.5.9 ({source}", (), [])
    assert read_call(package, None) == SglangCall(values, f"the installed sglang ({source}", (), [])
    assert read_call(package, "") == SglangCall(values, f"the installed sglang ({source}", (), [])


@pytest.mark.parametrize("content", [None, b"def broken(:\n", b"x = 1\x00\n"])
def test_a_file_it_cannot_read_or_parse_mirrors_the_reference(tmp_path: Path, content: bytes | None) -> None:
    package = tmp_path / "sglang"
    path = package / FUSION_FILE
    if content is not None:
        path.parent.mkdir(parents=True)
        path.write_bytes(content)
    assert read_call(package, "0.5.9") == SglangCall(
        REFERENCE_CALL, f"sglang 0.5.23's call (the newest release read): {path} not readable", tuple(REFERENCE_CALL)
    )


def test_no_sglang_or_no_entry_point_is_said_whole(tmp_path: Path) -> None:
    fallback = "sglang 0.5.23's call (the newest release read)"
    assert read_call(None, "0.5.9") == SglangCall(
        REFERENCE_CALL,
        f"{fallback}: no sglang located (--python / --sglang-path)",
        tuple(REFERENCE_CALL),
        routes_allreduce=True,  # as 0.5.23, whose call is mirrored, does
    )
    package = package_with(tmp_path, "async def flashinfer_allreduce_residual_rmsnorm():\n    pass\n")
    assert read_call(package, None) == SglangCall(
        REFERENCE_CALL,
        f"{fallback}: the installed sglang has no flashinfer_allreduce_residual_rmsnorm() in {FUSION_FILE}",
        tuple(REFERENCE_CALL),
    )


def test_defaults_line_up_with_the_last_parameters_and_only_literals_count(tmp_path: Path) -> None:
    source = """
    class Layer:
        def flashinfer_allreduce_residual_rmsnorm(
            use_oneshot=True, /, trigger_completion_at_end=True, max_token_num=MAX_TOKENS, *, fp32_acc=None,
            launch_with_pdl,
        ):
            pass
    """
    call = read_call(package_with(tmp_path, source), "0.5.99")
    assert call == SglangCall(
        {
            "max_token_num": 2048,
            "use_oneshot": True,
            "trigger_completion_at_end": True,
            "fp32_acc": None,
            "launch_with_pdl": True,
        },
        f"sglang 0.5.99 ({FUSION_FILE}:3, flashinfer_allreduce_residual_rmsnorm)",
        ("max_token_num", "launch_with_pdl"),
    )


def test_some_parameters_without_defaults_leave_the_rest_in_line(tmp_path: Path) -> None:
    source = "def flashinfer_allreduce_residual_rmsnorm(fp32_acc, use_oneshot, max_token_num=16):\n    pass\n"
    call = read_call(package_with(tmp_path, source), "0.5.99")
    assert call.values == {**REFERENCE_CALL, "max_token_num": 16}
    assert call.defaulted == ("use_oneshot", "trigger_completion_at_end", "fp32_acc", "launch_with_pdl")


def test_the_call_keywords_come_from_flashinfers_call_the_first_literal_kept(tmp_path: Path) -> None:
    source = """
    def flashinfer_allreduce_residual_rmsnorm(x, max_token_num=2048):
        log(launch_with_pdl=False, fp32_acc=False)
        options = dict(fp32_acc=False)
        handlers[0](launch_with_pdl=False)
        allreduce_fusion(x, max_token_num=64, fp32_acc=flag, **extra)
        comm.trtllm_allreduce_fusion(launch_with_pdl=False, trigger_completion_at_end=True, fp32_acc=True)
        allreduce_fusion(launch_with_pdl=True, use_oneshot=False)
    """
    call = read_call(package_with(tmp_path, source), "0.5.99")
    assert call.values == {
        "max_token_num": 64,
        "use_oneshot": False,
        "trigger_completion_at_end": True,
        "fp32_acc": True,
        "launch_with_pdl": False,
    }
    assert call.defaulted == ()


def test_the_oneshot_note_is_added_after_the_notes_before(tmp_path: Path) -> None:
    base = SglangCall(dict(REFERENCE_CALL), "src", ("fp32_acc",), ["earlier"])
    assert base.for_world(16) == SglangCall(
        {**REFERENCE_CALL, "use_oneshot": True},
        "src",
        ("fp32_acc",),
        [
            "earlier",
            "use_oneshot=True: sglang passes None, but FlashInfer's oneshot table knows only TP 2, 4, 8 "
            "(KeyError at TP 16)",
        ],
    )
    for world in (2, 4, 8):
        assert base.for_world(world) is base
    explicit = SglangCall({**REFERENCE_CALL, "use_oneshot": False}, "src")
    assert explicit.for_world(16) is explicit


def test_the_call_for_a_world_keeps_whether_the_release_routes_plain_allreduces() -> None:
    call = read_call(None, None)
    assert call.routes_allreduce is True
    assert call.for_world(16).routes_allreduce is True  # the note added, nothing else lost
