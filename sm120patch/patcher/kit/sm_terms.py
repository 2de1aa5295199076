"""Recognise, find and widen the SM-capability tests in sglang's fusion gates.

An *SM term* is one test of the GPU generation, in one of the spellings sglang has used
(``SPELLINGS``: a new spelling is one row there).  An *SM clause* is an SM term, or an
``or`` of SM terms only, standing as a conjunct of a boolean test
(``(_is_sm90_supported or _is_sm100_supported) and ...``).
``(self.nnodes == 1 or is_sm100_supported())`` is not an SM clause: it decides the
multi-node choice, not whether the GPU generation may fuse, and stays as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import libcst as cst

from sm120patch.patcher.kit.cst_helpers import code, walk, without_comment
from sm120patch.sglang.layout import SM120_FLAG, SM120_HELPER
from sm120patch.sglang.sm_names import FLAG_NAME, HELPER_NAME, PLATFORM_ATTR, PLATFORM_CALL, SM12X_ARCHS, SM120_ARCHS


@dataclass(frozen=True)
class Spelling:
    """One way sglang writes "is this GPU of generation X?"."""

    name: str
    example: str  # how it reads in sglang, for docs
    seen: str  # the releases where it was seen
    node_type: type[cst.CSTNode]  # the node it is
    read: Callable[[cst.CSTNode], str | None]  # the architecture ``node`` tests, if it is one
    sm120: Callable[[cst.BaseExpression], cst.BaseExpression]  # the SM120 term, same spelling
    binds: str | None  # a name the SM120 term needs bound that the SM100 one did not


def _read_helper(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.Call) and not node.args and isinstance(node.func, cst.Name):
        match = HELPER_NAME.match(node.func.value)
        return match.group(1) if match else None
    return None


def _read_flag(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.Name):
        match = FLAG_NAME.match(node.value)
        return match.group(1) if match else None
    return None


def _read_platform(node: cst.CSTNode) -> str | None:
    if (
        isinstance(node, cst.Attribute)
        and isinstance(node.value, cst.Call)
        and isinstance(node.value.func, cst.Name)
        and node.value.func.value == PLATFORM_CALL
        and not node.value.args
    ):
        match = PLATFORM_ATTR.match(node.attr.value)
        return match.group(1) if match else None
    return None


HELPER = Spelling(
    "helper call",
    "is_sm100_supported()",
    "0.5.4 - 0.5.18 (gates, auto-enable, resolver)",
    cst.Call,
    _read_helper,
    lambda template: cst.Call(func=cst.Name(SM120_HELPER)),
    SM120_HELPER,
)
FLAG = Spelling(
    "cached flag",
    "_is_sm100_supported",
    "0.4.9 - 0.5.23 (the fusion-gate module)",
    cst.Name,
    _read_flag,
    lambda template: cst.Name(SM120_FLAG),
    SM120_FLAG,
)
PLATFORM = Spelling(
    "platform attribute",
    "get_platform().is_sm100",
    "0.5.19 - 0.5.23",
    cst.Attribute,
    _read_platform,
    lambda template: template.with_changes(attr=cst.Name("is_sm120"), lpar=(), rpar=()),
    None,  # the same get_platform() the SM100 term calls
)
SPELLINGS: tuple[Spelling, ...] = (HELPER, FLAG, PLATFORM)


@dataclass(frozen=True)
class SmTerm:
    spelling: Spelling
    arch: str  # "sm90", "sm100", "sm120", "blackwell", ...
    node: cst.BaseExpression


_BY_NODE_TYPE: dict[type[cst.CSTNode], tuple[Spelling, ...]] = {}
for _spelling in SPELLINGS:
    _BY_NODE_TYPE[_spelling.node_type] = (*_BY_NODE_TYPE.get(_spelling.node_type, ()), _spelling)


def sm_term_of(node: cst.CSTNode) -> SmTerm | None:
    """The SM term ``node`` is, if it is one."""
    for spelling in _BY_NODE_TYPE.get(type(node), ()):
        arch = spelling.read(node)
        if arch is not None:
            assert isinstance(node, cst.BaseExpression)
            return SmTerm(spelling, arch, node)
    return None


def sm_terms_in(node: cst.CSTNode) -> list[SmTerm]:
    return [t for t in map(sm_term_of, walk(node)) if t is not None]


def first_sm_term(node: cst.CSTNode, spelling: Spelling) -> SmTerm | None:
    """The first SM term of ``spelling`` under ``node`` (the search stops there)."""
    for child in walk(node):
        if type(child) is spelling.node_type:
            term = sm_term_of(child)
            if term is not None and term.spelling is spelling:
                return term
    return None


def admits_sm12x(terms: Sequence[SmTerm]) -> bool:
    return any(t.arch in SM12X_ARCHS for t in terms)


def sm120_terms(terms: Sequence[SmTerm]) -> list[SmTerm]:
    """The terms that name SM120 itself (``sm120``, ``sm121``), not ``blackwell``."""
    return [t for t in terms if t.arch in SM120_ARCHS]


def names_sm120(terms: Sequence[SmTerm]) -> bool:
    return bool(sm120_terms(terms))


def or_operands(node: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """Operands of an ``a or b or c`` chain (grouping parentheses inside are kept)."""
    if not (isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.Or)):
        return None
    left = node.left
    head = or_operands(left) if not left.lpar else None
    return [*(head or [left]), node.right]


def clause_terms(node: cst.BaseExpression) -> list[SmTerm] | None:
    """The SM terms of an SM clause, or None when ``node`` is not an SM clause."""
    single = sm_term_of(node)
    if single is not None:
        return [single]
    operands = or_operands(node)
    if operands is None:
        return None
    terms = [sm_term_of(operand) for operand in operands]
    if any(t is None for t in terms):
        return None
    return terms  # type: ignore[return-value]


def conjuncts(node: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """Top-level operands of an ``and`` chain; ``(a and b) and c`` counts as three."""
    if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And):
        yield from conjuncts(node.left)
        yield from conjuncts(node.right)
    else:
        yield node


@dataclass(frozen=True)
class Clause:
    """An SM clause found in a boolean test."""

    node: cst.BaseExpression
    terms: tuple[SmTerm, ...]
    negated: bool  # found under ``not``: the test fails *for* the listed GPUs
    standalone: bool  # the whole test is this clause (no surrounding ``and``)


def clauses_in_test(test: cst.BaseExpression, negated: bool = False) -> list[Clause]:
    """SM clauses that are conjuncts of ``test`` (looking through ``not``)."""
    found: list[Clause] = []
    parts = list(conjuncts(test))
    for part in parts:
        if isinstance(part, cst.UnaryOperation) and isinstance(part.operator, cst.Not):
            found.extend(clauses_in_test(part.expression, not negated))
            continue
        terms = clause_terms(part)
        if terms is not None:
            found.append(Clause(part, tuple(terms), negated, standalone=len(parts) == 1))
    return found


def truth_tests(node: cst.CSTNode) -> Iterator[cst.BaseExpression]:
    """Expressions used as truth tests, or returned as a verdict, inside ``node``."""
    for child in walk(node):
        if isinstance(child, (cst.If, cst.While, cst.IfExp)):
            yield child.test
        elif isinstance(child, cst.Return) and child.value is not None:
            yield child.value
        elif isinstance(child, cst.Assert):
            yield child.test


def clauses_in(node: cst.CSTNode) -> list[Clause]:
    """Every SM clause in the truth tests and return values under ``node``."""
    return [c for test in truth_tests(node) for c in clauses_in_test(test)]


#: What the new SM120 term of a clause becomes (None: the term itself).
Shape = Callable[[Clause, cst.BaseExpression], cst.BaseExpression] | None


def template_term(terms: Sequence[SmTerm]) -> SmTerm:
    """The term a new SM120 term is modelled on: the SM100 one where there is one."""
    for term in terms:
        if term.arch == "sm100":
            return term
    return terms[-1]


def sm120_term(template: SmTerm) -> cst.BaseExpression:
    """The SM120 term in the same spelling as ``template`` (derived, never guessed)."""
    return template.spelling.sm120(template.node)


def widen(clause: Clause, shape: Shape = None) -> cst.BaseExpression:
    """``clause`` with ``or <SM120 term>`` appended, laid out like its last ``or``;
    ``shape``: what the new term becomes (server-args-auto-enable adds its TP conjunct).

    A bare term inside an ``and`` chain gets parentheses: ``a and t and b`` must become
    ``a and (t or t120) and b``, never ``a and t or t120 and b``.
    """
    term = sm120_term(template_term(clause.terms))
    if shape is not None:
        term = shape(clause, term)
    node = clause.node
    if isinstance(node, cst.BooleanOperation):
        last_or = node.operator
        operator = cst.Or(
            whitespace_before=without_comment(last_or.whitespace_before),
            whitespace_after=without_comment(last_or.whitespace_after),
        )
        return cst.BooleanOperation(
            left=node.with_changes(lpar=(), rpar=()),
            operator=operator,
            right=term,
            lpar=node.lpar,
            rpar=node.rpar,
        )
    widened = cst.BooleanOperation(left=node.with_changes(lpar=(), rpar=()), operator=cst.Or(), right=term)
    if node.lpar:
        return widened.with_changes(lpar=node.lpar, rpar=node.rpar)
    if clause.standalone:
        return widened
    return widened.with_changes(lpar=(cst.LeftParen(),), rpar=(cst.RightParen(),))


def describe(terms: Sequence[SmTerm]) -> str:
    return " or ".join(code(t.node) for t in terms)
