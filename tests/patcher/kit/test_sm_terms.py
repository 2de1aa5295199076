"""sm_terms: which expressions are SM terms and SM clauses, and how a clause is widened."""

from __future__ import annotations

import libcst as cst
import pytest

from sm120patch.patcher.kit.cst_helpers import code
from sm120patch.patcher.kit.sm_terms import (
    FLAG,
    HELPER,
    PLATFORM,
    admits_sm12x,
    clause_terms,
    clauses_in,
    clauses_in_test,
    first_sm_term,
    names_sm120,
    sm120_term,
    sm120_terms,
    sm_term_of,
    template_term,
    widen,
)


def expr(text: str) -> cst.BaseExpression:
    return cst.parse_expression(text)


@pytest.mark.parametrize(
    ("text", "spelling", "arch"),
    [
        ("is_sm100_supported()", HELPER, "sm100"),
        ("is_sm90_supported()", HELPER, "sm90"),
        ("is_blackwell()", HELPER, "blackwell"),
        ("_is_sm100_supported", FLAG, "sm100"),
        ("_is_sm120_supported", FLAG, "sm120"),
        ("_is_blackwell", FLAG, "blackwell"),
        ("get_platform().is_sm100", PLATFORM, "sm100"),
        ("get_platform().is_sm121", PLATFORM, "sm121"),
    ],
    ids=[
        "is_sm100_supported()",
        "is_sm90_supported()",
        "is_blackwell()",
        "_is_sm100_supported",
        "_is_sm120_supported",
        "_is_blackwell",
        "get_platform().is_sm100",
        "get_platform().is_sm121",
    ],
)
def test_each_spelling_is_read_with_its_architecture(text: str, spelling, arch: str) -> None:
    term = sm_term_of(expr(text))
    assert term is not None
    assert term.spelling is spelling
    assert term.arch == arch


@pytest.mark.parametrize(
    "text",
    [
        "is_sm100_supported(0)",  # a helper call takes no arguments
        "is_sm100_supported",  # the helper itself, not called
        "_is_sm100_supported()",  # a flag is not called
        "platform.is_sm100",  # not get_platform()
        "get_platform(0).is_sm100",
        "get_platform().is_sm100_supported",
        "_is_cuda",
        "self._is_sm100_supported",
    ],
)
def test_look_alikes_are_not_sm_terms(text: str) -> None:
    assert sm_term_of(expr(text)) is None


def test_an_or_of_sm_terms_is_a_clause_but_a_mixed_or_is_not() -> None:
    terms = clause_terms(expr("_is_sm90_supported or _is_sm100_supported or is_sm120_supported()"))
    assert terms is not None
    assert [t.arch for t in terms] == ["sm90", "sm100", "sm120"]
    assert clause_terms(expr("nnodes == 1 or _is_sm100_supported")) is None
    assert clause_terms(expr("_is_sm90_supported and _is_sm100_supported")) is None


def test_clauses_are_the_conjuncts_of_a_test_looking_through_not() -> None:
    (clause,) = clauses_in_test(expr("enabled and (_is_sm90_supported or _is_sm100_supported) and n > 0"))
    assert code(clause.node) == "(_is_sm90_supported or _is_sm100_supported)"
    assert not clause.negated
    assert not clause.standalone
    (negated,) = clauses_in_test(expr("not (_is_sm90_supported or _is_sm100_supported) and n > 0"))
    assert negated.negated
    (alone,) = clauses_in_test(expr("_is_sm100_supported"))
    assert alone.standalone
    # The multi-node choice is not an SM clause: it stays as it is.
    assert clauses_in_test(expr("(nnodes == 1 or is_sm100_supported()) and enabled")) == []


def test_clauses_in_finds_ifs_returns_and_asserts() -> None:
    module = cst.parse_module(
        "def f():\n"
        "    if _is_sm90_supported:\n"
        "        pass\n"
        "    assert get_platform().is_sm100\n"
        "    x = _is_sm100_supported\n"  # an assignment is not a truth test
        "    return is_sm100_supported() and y\n"
    )
    assert [c.terms[0].arch for c in clauses_in(module)] == ["sm90", "sm100", "sm100"]


def test_blackwell_admits_sm12x_without_naming_sm120() -> None:
    blackwell = clause_terms(expr("_is_sm100_supported or _is_blackwell"))
    sm120 = clause_terms(expr("_is_sm100_supported or _is_sm120_supported"))
    hopper = clause_terms(expr("_is_sm90_supported or _is_sm100_supported"))
    assert blackwell is not None and sm120 is not None and hopper is not None
    assert admits_sm12x(blackwell) and not names_sm120(blackwell) and sm120_terms(blackwell) == []
    assert admits_sm12x(sm120) and names_sm120(sm120) and [t.arch for t in sm120_terms(sm120)] == ["sm120"]
    assert not admits_sm12x(hopper) and not names_sm120(hopper)


def test_the_new_term_copies_the_sm100_term_spelling() -> None:
    terms = clause_terms(expr("get_platform().is_sm100 or get_platform().is_sm90"))
    assert terms is not None
    assert template_term(terms).arch == "sm100"  # not the last one
    assert code(sm120_term(template_term(terms))) == "get_platform().is_sm120"
    helper = clause_terms(expr("is_sm90_supported() or is_blackwell()"))
    assert helper is not None
    assert template_term(helper).arch == "blackwell"  # no SM100 term: the last one
    assert code(sm120_term(template_term(helper))) == "is_sm120_supported()"
    flag = clause_terms(expr("_is_sm100_supported"))
    assert flag is not None
    assert code(sm120_term(flag[0])) == "_is_sm120_supported"


def widened(test: str) -> str:
    node = expr(test)
    (clause,) = clauses_in_test(node)
    return code(node.deep_replace(clause.node, widen(clause)))


@pytest.mark.parametrize(
    ("test", "after"),
    [
        (
            "_is_sm90_supported or _is_sm100_supported",
            "_is_sm90_supported or _is_sm100_supported or _is_sm120_supported",
        ),
        ("_is_sm100_supported", "_is_sm100_supported or _is_sm120_supported"),
        # A bare term inside an `and` chain needs parentheses, or `or` would bind the rest.
        ("a and _is_sm100_supported and b", "a and (_is_sm100_supported or _is_sm120_supported) and b"),
        ("a and (is_sm100_supported()) and b", "a and (is_sm100_supported() or is_sm120_supported()) and b"),
        ("(get_platform().is_sm100) and b", "(get_platform().is_sm100 or get_platform().is_sm120) and b"),
    ],
    ids=["or chain", "one flag", "and chain", "parenthesized helper", "platform attribute"],
)
def test_widen_appends_the_sm120_term_and_keeps_precedence(test: str, after: str) -> None:
    assert widened(test) == after
    compile(after, "<widened>", "eval")


def test_widen_follows_the_layout_of_the_last_or_without_copying_its_comment() -> None:
    source = "x = (\n    _is_sm90_supported  # hopper\n    or _is_sm100_supported\n)\n"
    module = cst.parse_module(source)
    (clause,) = clauses_in_test(module.body[0].body[0].value)
    result = module.deep_replace(clause.node, widen(clause)).code
    assert result == (
        "x = (\n    _is_sm90_supported  # hopper\n    or _is_sm100_supported\n    or _is_sm120_supported\n)\n"
    )
    assert result.count("# hopper") == 1


def test_first_sm_term_stops_at_the_first_of_that_spelling() -> None:
    module = cst.parse_module("a = is_sm90_supported()\nb = get_platform().is_sm100\nc = get_platform().is_sm90\n")
    platform = first_sm_term(module, PLATFORM)
    assert platform is not None and platform.arch == "sm100"
    assert first_sm_term(module, FLAG) is None


def test_a_parenthesised_or_chain_is_one_operand_and_its_own_clause() -> None:
    """``(a or b) or c``: the parenthesised group is not flattened into the outer chain, so the
    outer chain is no SM clause (its first operand is no SM term); the group is its own clause."""
    outer = cst.parse_expression("(is_sm90_supported() or is_sm100_supported()) or is_blackwell()")
    assert isinstance(outer, cst.BooleanOperation)
    assert clause_terms(outer) is None
    assert clause_terms(outer.left) is not None and len(clause_terms(outer.left) or []) == 2


def test_widen_keeps_a_line_break_after_the_last_or() -> None:
    source = "x = (\n    _is_sm90_supported or\n    _is_sm100_supported\n)\n"
    module = cst.parse_module(source)
    (clause,) = clauses_in_test(module.body[0].body[0].value)
    assert module.deep_replace(clause.node, widen(clause)).code == (
        "x = (\n    _is_sm90_supported or\n    _is_sm100_supported or\n    _is_sm120_supported\n)\n"
    )
