"""Generated variants of the gate code: each is patched exactly right, or refused as drift.

Variants: operand order, comments inside the condition, line breaks and extra parentheses,
extra conditions (including an ``or`` that mixes an SM probe with something else, which is
not an SM clause), the SM clause anywhere in the chain, and zero or two SM clauses.
"""

from __future__ import annotations

import libcst as cst
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sm120patch.patchkit.model import PatchContext, State
from sm120patch.plan.registry import by_id, provided_for
from tests.realtrees import intended_changes

PATCHES = by_id()


def context(patch_id: str) -> PatchContext:
    """No release around the code: sglang.srt.utils defines everything asked for."""
    return PatchContext(None, lambda module, name: True, provided_for(PATCHES[patch_id]))


OTHER_TERMS = [
    "_is_flashinfer_available",
    "batch_size > 0",
    "batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE",
    "not is_dp_attention_enabled()",
    "get_global_server_args().enable_flashinfer_allreduce_fusion",
    "(self_nnodes == 1 or _is_sm100_supported)",  # mixed: decides multi-node, not the GPU
    "(use_oneshot or batch_size < 128)",
]


@st.composite
def sm_clause(draw, names=("_is_sm90_supported", "_is_sm100_supported")) -> str:
    operands = list(draw(st.permutations(names)))
    if draw(st.booleans()):
        inner = "\n        or ".join(operands)
        clause = f"(\n        {inner}\n    )"
    else:
        clause = "(" + " or ".join(operands) + ")"
    if draw(st.booleans()):
        clause = f"({clause})"
    return clause


@st.composite
def gate_source(draw) -> tuple[str, int]:
    n_sm = draw(st.sampled_from([1, 1, 1, 0, 2]))
    terms = draw(st.lists(st.sampled_from(OTHER_TERMS), min_size=0, max_size=4))
    for _ in range(n_sm):
        terms.insert(draw(st.integers(0, len(terms))), draw(sm_clause()))
    if not terms:
        terms = ["_is_flashinfer_available"]
    lines = []
    for i, term in enumerate(terms):
        if draw(st.booleans()):
            lines.append("        # a comment inside the condition")
        lines.append(("        " if i == 0 else "        and ") + term.replace("\n", "\n    "))
    body = "\n".join(lines)
    if draw(st.booleans()):
        source = f"def apply_flashinfer_allreduce_fusion(batch_size: int):\n    return (\n{body}\n    )\n"
    else:
        source = (
            "def apply_flashinfer_allreduce_fusion(batch_size: int):\n"
            f"    if (\n{body}\n    ):  # trailing comment\n        return True\n    return False\n"
        )
    return source, n_sm


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gate_source())
def test_gate_variants_are_patched_exactly_or_refused(case: tuple[str, int]) -> None:
    source, n_sm = case
    compile(source, "<variant>", "exec")
    patch = PATCHES["communicator-fusion-gate"]
    ctx = context(patch.id)
    module = cst.parse_module(source)
    finding = patch.check(module, ctx)
    if n_sm != 1:
        assert finding.state is State.DRIFT and finding.apply is None
        assert f"found {n_sm}" in finding.detail
        return
    assert finding.state is State.PENDING, finding.detail
    patched = finding.apply(module).code
    compile(patched, "<patched>", "exec")
    assert intended_changes(source.encode(), patched.encode()) == ["or-term"]
    mixed = "(self_nnodes == 1 or _is_sm100_supported)"
    assert patched.count(mixed) == source.count(mixed)  # not an SM clause: never widened
    again = patch.check(cst.parse_module(patched), ctx)
    assert again.state is State.APPLIED and again.apply is None
    # Everything outside the widened clause is byte-identical, comments included.
    assert patched.count("# a comment inside the condition") == source.count("# a comment inside the condition")
    assert "# trailing comment" in patched or "# trailing comment" not in source


@st.composite
def auto_enable_source(draw) -> tuple[str, str]:
    """An auto-enable ``if``; the expected verdict depends on what its body does."""
    probes = ("is_sm90_supported()", "is_sm100_supported()")
    clause = draw(sm_clause(probes))
    terms = draw(
        st.lists(
            st.sampled_from(
                [
                    "not self.enable_flashinfer_allreduce_fusion",
                    "model_arch in ['DeepseekV3ForCausalLM']",
                    "(self.nnodes == 1 or is_sm100_supported())",
                    "self.tp_size > 1",
                    "not self.enable_dp_attention",
                ]
            ),
            max_size=4,
            unique=True,
        )
    )
    terms.insert(draw(st.integers(0, len(terms))), clause)
    test = "\n            and ".join(t.replace("\n", "\n        ") for t in terms)
    extra = draw(
        st.sampled_from(
            ["", "            logger.info('auto-enabled')\n", "            self.attention_backend = 'trtllm_mla'\n"]
        )
    )
    nested = draw(st.booleans())
    enable = (
        "            if not self.enable_dp_attention:\n                self.enable_flashinfer_allreduce_fusion = True\n"
        if nested
        else "            self.enable_flashinfer_allreduce_fusion = True\n"
    )
    source = (
        "from sglang.srt.utils import is_sm90_supported, is_sm100_supported, is_sm120_supported\n"
        "class ServerArgs:\n"
        "    def _handle_model_specific_adjustments(self):\n"
        f"        if (\n            {test}\n        ):\n{extra}{enable}"
    )
    expected = "mixed" if "attention_backend" in extra else "patch"
    return source, expected


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(auto_enable_source())
def test_auto_enable_variants(case: tuple[str, str]) -> None:
    source, expected = case
    compile(source, "<variant>", "exec")
    patch = PATCHES["server-args-auto-enable"]
    ctx = context(patch.id)
    module = cst.parse_module(source)
    finding = patch.check(module, ctx)
    if expected == "mixed":  # the block also picks SM100-only kernels: never widened
        assert finding.state is State.NOT_NEEDED and finding.apply is None
        return
    assert finding.state is State.PENDING, finding.detail
    patched = finding.apply(module).code
    assert intended_changes(source.encode(), patched.encode()) == ["or-term"]
    assert patched.count("(self.nnodes == 1 or is_sm100_supported())") == source.count(
        "(self.nnodes == 1 or is_sm100_supported())"
    )
    assert patch.check(cst.parse_module(patched), ctx).state is State.APPLIED
