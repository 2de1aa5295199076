"""The shapes a role recognises: what makes a function the fusion's gate, its resolver, its
auto-enable, whatever sglang calls it and wherever it keeps it.

Every shape starts from the fusion's own SM clause: an SM clause that names both SM90 and
SM100 (the two generations FlashInfer's trtllm fusion was built for).  sglang's deliberate
SM100-only checks (the mnnvl and cutedsl backends, ``fusion_path.KNOWN_GATES``) never name
SM90, so no role can take one of them for a target.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from sm120patch.patcher.kit.cst_helpers import code, walk
from sm120patch.patcher.kit.sm_terms import Clause, clauses_in_test, conjuncts, truth_tests
from sm120patch.sglang.fusion_path import SWITCH_NAMES

#: The generations the fusion's own SM clause names (each patch widens such a clause).
FUSION_ARCHS = frozenset({"sm90", "sm100"})
#: What a gate compares with the fusion token limit: the batch.
BATCH_WORDS = ("batch", "shape[0]", "num_tokens")


def fusion_clause(clause: Clause) -> bool:
    """An SM clause that names the generations the fusion was built for (SM90 and SM100)."""
    return {t.arch for t in clause.terms} >= FUSION_ARCHS


def reads_switch(node: cst.CSTNode) -> bool:
    """Whether ``node`` reads one of the fusion's switches: its enable option or backend
    (``args.enable_flashinfer_allreduce_fusion``, ``comm.flashinfer_allreduce_fusion_backend``)
    or a token limit a batch is compared with (``batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE``)."""
    for child in walk(node):
        if isinstance(child, cst.Attribute) and child.attr.value in SWITCH_NAMES:
            return True
        if isinstance(child, cst.Name) and child.value in SWITCH_NAMES:
            return True
    return limit_name(node) is not None


def limit_name(node: cst.CSTNode) -> str | None:
    """The name a batch is compared with under ``node`` (``batch_size <= LIMIT``), if any."""
    for child in walk(node):
        if not isinstance(child, cst.Comparison):
            continue
        left = child.left
        for target in child.comparisons:
            if (
                isinstance(target.operator, (cst.LessThanEqual, cst.LessThan))
                and isinstance(target.comparator, cst.Name)
                and any(word in code(left) for word in BATCH_WORDS)
            ):
                return target.comparator.value
            left = target.comparator
    return None


def _fusion_clauses(test: cst.BaseExpression, negated: bool) -> list[Clause]:
    return [c for c in clauses_in_test(test) if c.negated is negated and fusion_clause(c)]


def gate_tests(function: cst.FunctionDef) -> Iterator[tuple[cst.BaseExpression, Clause]]:
    """The truth tests of ``function`` in which the fusion's SM clause stands beside one of
    its switches, each with that clause: the shape of the runtime fusion gate."""
    for test in truth_tests(function):
        clauses = _fusion_clauses(test, negated=False)
        if len(clauses) != 1:
            continue
        others = [part for part in conjuncts(test) if part is not clauses[0].node]
        if any(reads_switch(part) for part in others):
            yield test, clauses[0]


def is_gate(function: cst.FunctionDef) -> bool:
    """The runtime gate: a truth test holds the fusion's SM clause and one of its switches,
    and the function neither raises (a resolver refuses; a gate only answers) nor turns the
    fusion on (the auto-enable also tests the backend option beside its SM clause)."""
    return any(True for _ in gate_tests(function)) and not raises(function) and not _turns_on(function)


def sm_flag_read(function: cst.FunctionDef) -> str | None:
    """The SM100 flag the gate's clause reads (``_is_sm100_supported``), if it reads flags."""
    for _, clause in gate_tests(function):
        for term in clause.terms:
            if term.arch == "sm100" and isinstance(term.node, cst.Name):
                return term.node.value
    return None


def limit_read(function: cst.FunctionDef) -> str | None:
    """The token limit the gate compares the batch with (``FUSE_ALLREDUCE_MAX_BATCH_SIZE``)."""
    for test, _ in gate_tests(function):
        name = limit_name(test)
        if name is not None:
            return name
    return None


def raises(node: cst.CSTNode) -> bool:
    """Whether a ``raise`` stands anywhere under ``node``."""
    return any(isinstance(child, cst.Raise) for child in walk(node))


def is_resolver(function: cst.FunctionDef) -> bool:
    """The backend resolver: an ``if not (<SM90> or <SM100>):`` that raises about the
    allreduce fusion, in a function that names a fusion backend (``"trtllm"``); the
    attention backends' own SM refusals name trtllm too, never the allreduce."""
    guards = [
        node
        for node in walk(function)
        if isinstance(node, cst.If)
        and raises(node.body)
        and "allreduce" in code(node.body).lower().replace("_", "").replace("-", "").replace(" ", "")
        and _fusion_clauses(node.test, negated=True)
    ]
    return bool(guards) and any(
        isinstance(child, cst.SimpleString) and "trtllm" in child.value for child in walk(function)
    )


def is_auto_enable(function: cst.FunctionDef) -> bool:
    """The model auto-enable: under an ``if`` that holds the fusion's SM clause, the fusion
    is turned on (a switch assigned, or returned as a key: ``{"flashinfer_allreduce_fusion_backend": "auto"}``)."""
    for node in walk(function):
        if isinstance(node, cst.If) and _fusion_clauses(node.test, negated=False) and _turns_on(node.body):
            return True
    return False


def _turns_on(body: cst.CSTNode) -> bool:
    for child in walk(body):
        if isinstance(child, cst.Assign) and any(
            isinstance(t.target, cst.Attribute) and t.target.attr.value in SWITCH_NAMES for t in child.targets
        ):
            return True
        if (
            isinstance(child, cst.DictElement)
            and isinstance(child.key, cst.SimpleString)
            and child.key.evaluated_value in SWITCH_NAMES
        ):
            return True
    return False


def calls(function: cst.FunctionDef, name: str) -> bool:
    """Whether ``function`` calls ``name`` (``x.name(...)`` or ``name(...)``)."""
    for child in walk(function):
        if isinstance(child, cst.Call):
            func = child.func
            if (isinstance(func, cst.Attribute) and func.attr.value == name) or (
                isinstance(func, cst.Name) and func.value == name
            ):
                return True
    return False
