"""communicator-fusion-gate beyond the contract every patch meets (tests/patcher/patches/test_contract.py):
where its drift is, and generated variants of the gate code.

The variants (operand order, comments inside the condition, line
breaks and extra parentheses, extra conditions including an ``or`` that mixes an SM probe with
something else, which is not an SM clause, the SM clause anywhere in the chain, zero or two SM
clauses) are each patched exactly right, or refused as drift.
"""

from __future__ import annotations

import re

import libcst as cst
from hypothesis import HealthCheck
from hypothesis import strategies as st

from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan.registry import by_id
from tests.support.patch_checks import bare_context, sm_clause
from tests.support.properties import fast_and_slow
from tests.support.realtrees import intended_changes

PATCH = by_id()["communicator-fusion-gate"]


def test_a_gate_with_two_sm_clauses_is_reported_at_the_gate() -> None:
    """The drift names the gate function as where it is, which ``list`` and the JSON report show."""
    (example,) = [e for e in PATCH.examples if e.name == "the gate split into one test per generation"]
    finding = PATCH.check(cst.parse_module(example.before), example.context())
    assert (finding.state, finding.where) == (State.DRIFT, "apply_flashinfer_allreduce_fusion")


# --- generated variants of the gate -------------------------------------------------------

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


def check_gate_variant(case: tuple[str, int]) -> None:
    source, n_sm = case
    compile(source, "<variant>", "exec")
    ctx = bare_context(PATCH)
    module = cst.parse_module(source)
    finding = PATCH.check(module, ctx)
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
    again = PATCH.check(cst.parse_module(patched), ctx)
    assert again.state is State.APPLIED and again.apply is None
    # Everything outside the widened clause is byte-identical, comments included.
    assert re.sub(r"\s+or _is_sm120_supported", "", patched) == source
    assert patched.count("# a comment inside the condition") == source.count("# a comment inside the condition")
    assert "# trailing comment" in patched or "# trailing comment" not in source


(
    test_generated_gate_variants_are_widened_exactly_or_refused_as_drift,
    test_many_more_generated_gate_variants_are_widened_exactly_or_refused_as_drift,
) = fast_and_slow(check_gate_variant, gate_source(), fast=100, slow=300, suppress_health_check=[HealthCheck.too_slow])
