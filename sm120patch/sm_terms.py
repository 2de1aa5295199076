"""Recognise, find and widen the SM-capability terms that sglang's fusion gates test.

sglang spells "is this GPU Hopper / datacenter Blackwell" three ways, depending on the
release, and every patch has to read all three:

* a helper call            ``is_sm100_supported()``        (0.5.4 - 0.5.18)
* a cached module flag     ``_is_sm100_supported``          (communicator / add_norm)
* a platform attribute     ``get_platform().is_sm100``      (0.5.19+)

A *probe* is one such term.  An *SM clause* is a probe, or an ``or`` of probes only, that
stands as a conjunct of a boolean test (``(_is_sm90_supported or _is_sm100_supported) and
...``).  ``(self.nnodes == 1 or is_sm100_supported())`` is not an SM clause: it decides the
multi-node choice, not whether the GPU generation may fuse, and must stay as it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum

import libcst as cst

from sm120patch.cst_helpers import walk


class Flavor(str, Enum):
    CALL = "call"
    FLAG = "flag"
    PLATFORM = "platform"


#: Probe architectures that already admit SM12x (12.0 and 12.1).
SM12X_ARCHS = frozenset({"sm120", "sm121", "blackwell"})

_CALL_NAME = re.compile(r"^is_(sm\d+|blackwell)(?:_supported)?$")
_FLAG_NAME = re.compile(r"^_is_(sm\d+|blackwell)(?:_supported)?$")
_PLATFORM_ATTR = re.compile(r"^is_(sm\d+|blackwell)$")


@dataclass(frozen=True)
class Probe:
    flavor: Flavor
    arch: str  # "sm90", "sm100", "sm120", "blackwell", ...
    node: cst.BaseExpression


def probe_of(node: cst.CSTNode) -> Probe | None:
    """The probe ``node`` is, if it is one."""
    if isinstance(node, cst.Call) and not node.args and isinstance(node.func, cst.Name):
        match = _CALL_NAME.match(node.func.value)
        if match:
            return Probe(Flavor.CALL, match.group(1), node)
    if isinstance(node, cst.Name):
        match = _FLAG_NAME.match(node.value)
        if match:
            return Probe(Flavor.FLAG, match.group(1), node)
    if (
        isinstance(node, cst.Attribute)
        and isinstance(node.value, cst.Call)
        and isinstance(node.value.func, cst.Name)
        and node.value.func.value == "get_platform"
        and not node.value.args
    ):
        match = _PLATFORM_ATTR.match(node.attr.value)
        if match:
            return Probe(Flavor.PLATFORM, match.group(1), node)
    return None


def _or_operands(node: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """Operands of an ``a or b or c`` chain (grouping parentheses inside are kept)."""
    if not (isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.Or)):
        return None
    left = node.left
    head = _or_operands(left) if not left.lpar else None
    return [*(head or [left]), node.right]


def clause_probes(node: cst.BaseExpression) -> list[Probe] | None:
    """The probes of an SM clause, or None when ``node`` is not an SM clause."""
    single = probe_of(node)
    if single is not None:
        return [single]
    operands = _or_operands(node)
    if operands is None:
        return None
    probes = [probe_of(operand) for operand in operands]
    if any(p is None for p in probes):
        return None
    return probes  # type: ignore[return-value]


def admits_sm12x(probes: Sequence[Probe]) -> bool:
    return any(p.arch in SM12X_ARCHS for p in probes)


def has_sm120_term(probes: Sequence[Probe]) -> bool:
    return any(p.arch in ("sm120", "sm121") for p in probes)


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
    probes: tuple[Probe, ...]
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
        probes = clause_probes(part)
        if probes is not None:
            found.append(Clause(part, tuple(probes), negated, standalone=len(parts) == 1))
    return found


def boolean_roots(node: cst.CSTNode) -> Iterator[cst.BaseExpression]:
    """Expressions used as truth tests or returned as a verdict inside ``node``."""
    for child in walk(node):
        if isinstance(child, (cst.If, cst.While)):
            yield child.test
        elif isinstance(child, cst.IfExp):
            yield child.test
        elif isinstance(child, cst.Return) and child.value is not None:
            yield child.value
        elif isinstance(child, cst.Assert):
            yield child.test


def clauses_in(node: cst.CSTNode) -> list[Clause]:
    """Every SM clause in the truth tests and return values under ``node``."""
    return [c for root in boolean_roots(node) for c in clauses_in_test(root)]


def sm120_term(template: Probe) -> cst.BaseExpression:
    """The SM120 probe in the same spelling as ``template`` (derived, never guessed)."""
    if template.flavor is Flavor.CALL:
        return cst.Call(func=cst.Name("is_sm120_supported"))
    if template.flavor is Flavor.FLAG:
        return cst.Name("_is_sm120_supported")
    assert isinstance(template.node, cst.Attribute)
    return template.node.with_changes(attr=cst.Name("is_sm120"), lpar=(), rpar=())


def template_probe(probes: Sequence[Probe]) -> Probe:
    """The probe a new SM120 term is modelled on: the SM100 one where there is one."""
    for probe in probes:
        if probe.arch == "sm100":
            return probe
    return probes[-1]


def _plain(ws: cst.BaseParenthesizableWhitespace) -> cst.BaseParenthesizableWhitespace:
    """Whitespace with its comment and blank lines dropped, so copying it never copies a comment."""
    if isinstance(ws, cst.ParenthesizedWhitespace):
        return ws.with_changes(
            first_line=cst.TrailingWhitespace(newline=ws.first_line.newline),
            empty_lines=(),
        )
    return ws


def widen(clause: Clause) -> cst.BaseExpression:
    """``clause`` with ``or <SM120 term>`` appended, laid out like its last ``or``."""
    term = sm120_term(template_probe(clause.probes))
    node = clause.node
    if isinstance(node, cst.BooleanOperation):
        last_or = node.operator
        operator = cst.Or(
            whitespace_before=_plain(last_or.whitespace_before),
            whitespace_after=_plain(last_or.whitespace_after),
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


def describe(probes: Sequence[Probe]) -> str:
    return " or ".join(cst.Module([]).code_for_node(p.node) for p in probes)
