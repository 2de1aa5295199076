"""server-args-auto-enable beyond the contract every patch meets (tests/patcher/patches/test_contract.py):
where its findings are, every anchored function in one file, and generated variants of the
auto-enable block.

The variants (operand order, layout, other conditions in any
place, a nested enable, a body that also does something else) are widened exactly, or left
alone where the block also picks SM100-only kernels.
"""

from __future__ import annotations

from dataclasses import replace

import libcst as cst
import pytest
from hypothesis import HealthCheck
from hypothesis import strategies as st

from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan.planner import make_plan
from sm120patch.patcher.plan.registry import all_patches, by_id
from sm120patch.sglang.layout import OVERRIDES, SERVER_ARGS
from sm120patch.sglang.tree import from_directory
from tests.support.patch_checks import bare_context, sm_clause
from tests.support.properties import fast_and_slow
from tests.support.realtrees import installed_release, intended_changes
from tests.support.sglang_exec import auto_enable_turns_fusion_on

PATCH = by_id()["server-args-auto-enable"]


@pytest.mark.parametrize(
    ("name", "where"),
    [
        (
            "a hand edit that added the SM120 check as a second conjunct",
            "ServerArgs._handle_model_specific_adjustments",
        ),
        ("nothing turns fusion on under an SM check", "ServerArgs._handle_model_specific_adjustments"),
        ("overrides that also pick other backends are left alone", "_flashinfer_allreduce_fusion_auto_enable"),
        ("no parameter names the TP size", "_flashinfer_allreduce_fusion_auto_enable"),
    ],
    ids=["second conjunct by hand", "no SM check turns fusion on", "overrides that pick other backends", "no TP size"],
)
def test_findings_that_change_nothing_name_the_function_they_read(name: str, where: str) -> None:
    (example,) = [e for e in PATCH.examples if e.name == name]
    finding = PATCH.check(cst.parse_module(example.before), example.context())
    assert (finding.state, finding.where) == (example.state, where)


def test_every_anchored_function_in_the_file_is_widened_and_named() -> None:
    """A file holding both the method (up to 0.5.14) and the override function (0.5.15+), as a
    backport could: both auto-enables are widened, each naming the TP size by its own first
    parameter, and ``where`` names both, once each."""
    source = (
        "def _flashinfer_allreduce_fusion_auto_enable(view):\n"
        "    if get_platform().is_sm90 or get_platform().is_sm100:\n"
        "        return {'flashinfer_allreduce_fusion_backend': 'auto'}\n"
        "    return {}\n"
        "class ServerArgs:\n"
        "    def _handle_model_specific_adjustments(self):\n"
        "        if get_platform().is_sm90 or get_platform().is_sm100:\n"
        "            self.enable_flashinfer_allreduce_fusion = True\n"
    )
    module = cst.parse_module(source)
    finding = PATCH.check(module, bare_context(PATCH))
    assert finding.where == "_flashinfer_allreduce_fusion_auto_enable, ServerArgs._handle_model_specific_adjustments"
    assert finding.apply is not None
    function, method = source.split("class ServerArgs")
    assert finding.apply(module).code == function.replace(
        "get_platform().is_sm100:", "get_platform().is_sm100 or (get_platform().is_sm120 and view.tp_size == 2):"
    ) + "class ServerArgs" + method.replace(
        "get_platform().is_sm100:", "get_platform().is_sm100 or (get_platform().is_sm120 and self.tp_size == 2):"
    )


def adjustments(test: str) -> str:
    """``ServerArgs._handle_model_specific_adjustments`` turning fusion on under ``if <test>:``."""
    return (
        "class ServerArgs:\n"
        "    def _handle_model_specific_adjustments(self):\n"
        f"        if {test}:\n"
        "            self.enable_flashinfer_allreduce_fusion = True\n"
    )


LOOK_ALIKES = [
    "self.tp_size == 4",
    "self.tp_size != 2",
    "self.tp_size == '2'",
    "self.tp_size == 2.0",
    "self.tp_size == 2 == 2",
    "self.tp_size",
    "self.tp_rank == 2",
    "self.x.tp_size == 2",
    "f().tp_size == 2",
    "tp_size == 2",
]


@pytest.mark.parametrize("test", LOOK_ALIKES)
def test_only_the_tp_test_this_tool_writes_reads_as_the_tp2_form(test: str) -> None:
    """``(is_sm120 and <receiver>.tp_size == 2)`` is what ``--auto-enable-tp 2`` writes and the
    one conjunct read back as that form; a look-alike (another size, operator, type, field or
    receiver) is someone else's condition: the clause is not read as applied."""
    clause = "get_platform().is_sm90 or get_platform().is_sm100 or (get_platform().is_sm120 and {})"
    written = PATCH.check(cst.parse_module(adjustments(clause.format("self.tp_size == 2"))), bare_context(PATCH))
    assert written.state is State.APPLIED
    finding = PATCH.check(cst.parse_module(adjustments(clause.format(test))), bare_context(PATCH))
    assert finding.state is State.DRIFT, finding.detail


@pytest.mark.parametrize("term", ["get_platform().is_sm100", "get_platform().is_sm103", "foo()"])
def test_a_tp_test_beside_another_term_than_sm120_is_not_the_tp2_form(term: str) -> None:
    """The TP test this tool writes gates the SM120 term; beside another term it is someone
    else's condition, as in a fork that limited SM100 to TP 2."""
    source = adjustments(f"get_platform().is_sm90 or ({term} and self.tp_size == 2)")
    finding = PATCH.check(cst.parse_module(source), bare_context(PATCH))
    assert finding.state is State.DRIFT, finding.detail


@pytest.mark.parametrize(
    "test",
    [
        "not (get_platform().is_sm90 or get_platform().is_sm100)",
        "self.ok and not (get_platform().is_sm90 or get_platform().is_sm100)",
    ],
    ids=["negated", "negated beside another condition"],
)
def test_fusion_turned_on_where_the_sm_check_fails_is_not_widened(test: str) -> None:
    """``if not (<SM90> or <SM100>)`` turns fusion on for every other GPU: not the auto-enable
    this patch widens (adding SM120 there would turn it off on SM12x)."""
    finding = PATCH.check(cst.parse_module(adjustments(test)), bare_context(PATCH))
    assert finding.state is State.DRIFT and finding.apply is None, finding.detail


def test_a_check_negated_twice_is_read_as_the_check_and_widened() -> None:
    module = cst.parse_module(adjustments("not (not (get_platform().is_sm90 or get_platform().is_sm100))"))
    finding = PATCH.check(module, bare_context(PATCH))
    assert finding.state is State.PENDING and finding.apply is not None, finding.detail
    widened = finding.apply(module).code
    sm120 = "(get_platform().is_sm120 and self.tp_size == 2)"
    assert f"not (not (get_platform().is_sm90 or get_platform().is_sm100 or {sm120}))" in widened


# --- generated variants of the auto-enable block -----------------------------------------


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


def check_auto_enable_variant(case: tuple[str, str]) -> None:
    source, expected = case
    compile(source, "<variant>", "exec")
    ctx = bare_context(PATCH)
    module = cst.parse_module(source)
    finding = PATCH.check(module, ctx)
    if expected == "mixed":  # the block also picks SM100-only kernels: never widened
        assert finding.state is State.NOT_NEEDED and finding.apply is None
        return
    assert finding.state is State.PENDING, finding.detail
    patched = finding.apply(module).code
    assert intended_changes(source.encode(), patched.encode()) == ["or-term"]
    assert patched.count("(self.nnodes == 1 or is_sm100_supported())") == source.count(
        "(self.nnodes == 1 or is_sm100_supported())"
    )
    assert PATCH.check(cst.parse_module(patched), ctx).state is State.APPLIED
    assert patched.count(".tp_size == 2)") == 1
    # --auto-enable-tp any drops the TP conjunct; --auto-enable-tp 2 puts it back, byte for byte
    free = reshaped(patched, any_tp=True)
    assert ".tp_size == 2)" not in free and intended_changes(patched.encode(), free.encode()) == ["or-term"]
    assert reshaped(free, any_tp=False) == patched


def reshaped(source: str, any_tp: bool) -> str:
    """``source`` as an apply with ``--auto-enable-tp`` (any: True, 2: False) leaves it."""
    ctx = replace(bare_context(PATCH), auto_enable_any_tp=any_tp)
    module = cst.parse_module(source)
    finding = PATCH.check(module, ctx)
    assert finding.state is State.PENDING and finding.apply is not None, finding.detail
    result = finding.apply(module).code
    assert PATCH.check(cst.parse_module(result), ctx).state is State.APPLIED
    return result


(
    test_generated_auto_enable_blocks_are_widened_unless_they_also_pick_sm100_kernels,
    test_many_more_generated_auto_enable_blocks_are_widened_unless_they_also_pick_sm100_kernels,
) = fast_and_slow(
    check_auto_enable_variant, auto_enable_source(), fast=70, slow=200, suppress_health_check=[HealthCheck.too_slow]
)


def test_an_else_branch_that_turns_fusion_on_is_gated_by_the_ifs_around_it() -> None:
    """The ``else`` of an inner ``if`` runs under the outer SM test, so that test is widened."""
    source = (
        "def _flashinfer_allreduce_fusion_auto_enable(view):\n"
        "    if get_platform().is_sm90 or get_platform().is_sm100:\n"
        "        if view.nnodes > 1:\n"
        "            return {}\n"
        "        else:\n"
        "            return {'flashinfer_allreduce_fusion_backend': 'auto'}\n"
        "    return {}\n"
    )
    module = cst.parse_module(source)
    finding = PATCH.check(module, bare_context(PATCH))
    assert finding.state is State.PENDING and finding.apply is not None
    assert finding.apply(module).code == source.replace(
        "get_platform().is_sm100:", "get_platform().is_sm100 or (get_platform().is_sm120 and view.tp_size == 2):"
    )


# --- sglang's own auto-enable, from real releases, as this tool leaves it -----------------

TP_SIZES = (2, 4, 8)
GPUS = {"SM90": (9, 0), "SM100": (10, 0), "SM120": (12, 0)}
ERA_FILES = {"0.5.9": SERVER_ARGS, "0.5.14": SERVER_ARGS, "0.5.15": OVERRIDES, "0.5.23": OVERRIDES}


def fused_at(version: str, any_tp: bool | None) -> dict[str, list[int]]:
    """The TP sizes at which the release's own auto-enable turns fusion on for a model it lists,
    per GPU: as shipped (``any_tp`` False), or as ``apply`` (``--auto-enable-tp any``: True) leaves it."""
    package = installed_release(version) / "sglang"
    rel = ERA_FILES[version]
    source = (package / rel).read_bytes()
    if any_tp is not False:
        plan = make_plan(from_directory(package), list(all_patches()), change=True, any_tp=any_tp or None)
        (changed,) = [f for f in plan.files if f.rel == rel]
        assert changed.updated is not None
        source = changed.updated
    return {
        gpu: [tp for tp in TP_SIZES if auto_enable_turns_fusion_on(package, source, capability, tp)]
        for gpu, capability in GPUS.items()
    }


@pytest.mark.slow  # real sglang releases from the package index
@pytest.mark.parametrize("version", ERA_FILES)
def test_sglangs_own_auto_enable_admits_sm120_at_tp2_only_unless_asked_for_any_tp(version: str) -> None:
    """Executed from the release (tests/support/sglang_exec.py: only the GPU, the model and the
    server arguments are faked): SM90 and SM100 fuse at every TP, as shipped; SM120 at TP 2
    after a plain apply, at every TP after ``apply --auto-enable-tp any``."""
    every = list(TP_SIZES)
    assert fused_at(version, any_tp=False) == {"SM90": every, "SM100": every, "SM120": []}
    assert fused_at(version, any_tp=None) == {"SM90": every, "SM100": every, "SM120": [2]}
    assert fused_at(version, any_tp=True) == {"SM90": every, "SM100": every, "SM120": every}


def test_an_sm120_term_in_its_own_parentheses_is_limited_to_tp2_without_them() -> None:
    """The any-TP form as a hand edit may write it, ``(get_platform().is_sm120)``: limited to
    TP 2, the term's own parentheses give way to the conjunction's, and the code compiles."""
    limited = reshaped(
        adjustments("get_platform().is_sm90 or get_platform().is_sm100 or (get_platform().is_sm120)"), any_tp=False
    )
    compile(limited, "<limited>", "exec")
    assert "or (get_platform().is_sm120 and self.tp_size == 2):" in limited
