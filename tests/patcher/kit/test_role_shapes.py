"""The shapes roles match: each takes its own target, and none takes another's or a
deliberate SM100-only check (the known list stays authoritative)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from sm120patch.patcher.kit.role_shapes import (
    calls,
    is_auto_enable,
    is_gate,
    is_resolver,
    limit_read,
    sm_flag_read,
)

GATE = """
def ar_norm_fusion_enabled(batch_size: int):
    return (
        (_is_sm90_supported or _is_sm100_supported)
        and not is_dp_attention_enabled()
        and get_exec().comm.flashinfer_allreduce_fusion_backend is not None
        and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE
    )
"""
METHOD_GATE = """
def _gather(self, hidden_states):
    if (_is_sm100_supported or _is_sm90_supported) and get_global_server_args().enable_flashinfer_allreduce_fusion:
        pass
"""
RESOLVER = """
def _pick_backend(backend):
    if not (get_platform().is_sm90 or get_platform().is_sm100):
        raise ValueError("FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs.")
    return "trtllm"
"""
ATTENTION_REFUSAL = """
def check_attention(backend):
    if not (is_sm90_supported() or is_sm100_supported()):
        raise ValueError("trtllm_mha needs SM90 or SM100")
    return "trtllm"
"""
AUTO_ENABLE = """
def _auto(view):
    if (
        view.flashinfer_allreduce_fusion_backend is None
        and (get_platform().is_sm90 or get_platform().is_sm100)
        and view.tp_size > 1
    ):
        return {"flashinfer_allreduce_fusion_backend": "auto"}
    return {}
"""
OLD_AUTO_ENABLE = """
def _handle(self):
    if model_arch in ARCHS and (is_sm90_supported() or is_sm100_supported()) and self.nnodes == 1:
        self.enable_flashinfer_allreduce_fusion = True
"""
SM100_ONLY = """
def _mnnvl(backend):
    if get_platform().is_sm100 and get_exec().comm.flashinfer_allreduce_fusion_backend == "mnnvl":
        return "mnnvl"
"""
PREFLIGHT = """
def _sizes(world_size):
    err, gran = cuda_driver.cuMulticastGetGranularity(prop, flags)
    return gran
"""


def function(source: str) -> cst.FunctionDef:
    (node,) = cst.parse_module(textwrap.dedent(source)).body
    assert isinstance(node, cst.FunctionDef)
    return node


@pytest.mark.parametrize(
    ("source", "gate", "resolver", "auto_enable"),
    [
        (GATE, True, False, False),
        (METHOD_GATE, True, False, False),
        (RESOLVER, False, True, False),
        (ATTENTION_REFUSAL, False, False, False),  # an attention backend's own refusal
        (AUTO_ENABLE, False, False, True),  # tests the backend beside its SM clause, but sets it
        (OLD_AUTO_ENABLE, False, False, True),
        (SM100_ONLY, False, False, False),  # deliberate SM100-only: never a target
        (PREFLIGHT, False, False, False),
    ],
    ids=[
        "gate",
        "method gate",
        "resolver",
        "attention refusal",
        "auto-enable",
        "0.5.8 auto-enable",
        "sm100 only",
        "preflight",
    ],
)
def test_each_shape_takes_its_own_target_and_no_other(
    source: str, gate: bool, resolver: bool, auto_enable: bool
) -> None:
    node = function(source)
    assert (is_gate(node), is_resolver(node), is_auto_enable(node)) == (gate, resolver, auto_enable)


def test_the_gate_leads_to_its_flags_and_its_limit() -> None:
    assert (sm_flag_read(function(GATE)), limit_read(function(GATE))) == (
        "_is_sm100_supported",
        "FUSE_ALLREDUCE_MAX_BATCH_SIZE",
    )
    assert (sm_flag_read(function(METHOD_GATE)), limit_read(function(METHOD_GATE))) == ("_is_sm100_supported", None)
    inline = GATE.replace(
        "(_is_sm90_supported or _is_sm100_supported)", "(get_platform().is_sm90 or get_platform().is_sm100)"
    )
    assert sm_flag_read(function(inline)) is None  # no cached flags to follow


def test_the_preflight_is_the_function_that_queries_multicast() -> None:
    assert calls(function(PREFLIGHT), "cuMulticastGetGranularity")
    assert not calls(function(GATE), "cuMulticastGetGranularity")
