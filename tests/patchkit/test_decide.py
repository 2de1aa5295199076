"""decide: the state of a gate's SM clauses, the change when pending, and the names it needs."""

from __future__ import annotations

import libcst as cst

from sm120patch.patchkit.cst_helpers import find_functions
from sm120patch.patchkit.decide import decide, find_anchored, unbound, unbound_sm120
from sm120patch.patchkit.model import Anchor, Finding, PatchContext, Releases, State
from sm120patch.patchkit.sm_terms import clause_terms, clauses_in


def context(provided: frozenset[str] = frozenset(), undefined: tuple[str, ...] = ()) -> PatchContext:
    return PatchContext(None, lambda module, name: name not in undefined, provided)


def decide_gate(source: str, ctx: PatchContext | None = None) -> tuple[cst.Module, Finding]:
    """``decide`` on the clauses of the function ``gate`` in ``source``."""
    module = cst.parse_module(source)
    (function,) = find_functions(module, ["gate"])
    clauses = clauses_in(function)
    finding = decide(module, ctx or context(), clauses, "gate", [c.node for c in clauses], [function])
    return module, finding


def applied(module: cst.Module, finding: Finding) -> str:
    assert finding.apply is not None
    return finding.apply(module).code


FLAG_PROVIDED = context(provided=frozenset({"_is_sm120_supported"}))  # by communicator-flag


def test_a_clause_without_sm12x_is_pending_and_widened() -> None:
    source = "def gate(n):\n    return (_is_sm90_supported or _is_sm100_supported) and n > 0\n"
    module, finding = decide_gate(source, FLAG_PROVIDED)
    assert finding.state is State.PENDING
    assert "will widen (_is_sm90_supported or _is_sm100_supported) with _is_sm120_supported" in finding.detail
    assert applied(module, finding) == (
        "def gate(n):\n    return (_is_sm90_supported or _is_sm100_supported or _is_sm120_supported) and n > 0\n"
    )
    # Without the flag bound (here or by a required patch) the widened gate would not import.
    _, finding = decide_gate(source)
    assert finding.state is State.DRIFT
    assert finding.detail == "gate: the SM120 term would need _is_sm120_supported, which nothing binds"


def test_a_helper_call_imports_the_sm120_helper_beside_the_sm100_one() -> None:
    source = "from sglang.srt.utils import is_sm100_supported\ndef gate():\n    return is_sm100_supported()\n"
    module, finding = decide_gate(source)
    assert finding.state is State.PENDING
    assert finding.detail.endswith("and import is_sm120_supported from sglang.srt.utils")
    assert applied(module, finding) == (
        "from sglang.srt.utils import is_sm100_supported, is_sm120_supported\n"
        "def gate():\n    return is_sm100_supported() or is_sm120_supported()\n"
    )
    # A patch this one requires imports it already: no second import.
    module, finding = decide_gate(source, context(provided=frozenset({"is_sm120_supported"})))
    assert finding.state is State.PENDING
    assert "import" not in finding.detail
    assert applied(module, finding).startswith("from sglang.srt.utils import is_sm100_supported\n")


def test_a_helper_that_cannot_be_imported_is_drift() -> None:
    _, finding = decide_gate("def gate():\n    return is_sm100_supported()\n")
    assert finding.state is State.DRIFT
    assert "no module-level `from sglang.srt.utils import ..., is_sm100_supported`" in finding.detail
    source = "from sglang.srt.utils import is_sm100_supported\ndef gate():\n    return is_sm100_supported()\n"
    _, finding = decide_gate(source, context(undefined=("is_sm120_supported",)))
    assert finding.state is State.DRIFT
    assert "does not define is_sm120_supported" in finding.detail


def test_a_named_sm120_term_is_applied_only_where_its_name_is_bound() -> None:
    gate = "def gate():\n    return _is_sm100_supported or _is_sm120_supported\n"
    _, finding = decide_gate("_is_sm120_supported = True\n" + gate)
    assert finding.state is State.APPLIED
    assert finding.detail == "gate: _is_sm100_supported or _is_sm120_supported"
    _, finding = decide_gate(gate, context(provided=frozenset({"_is_sm120_supported"})))
    assert finding.state is State.APPLIED
    _, finding = decide_gate(gate)  # a hand edit that added the term but not the flag
    assert finding.state is State.DRIFT
    assert finding.detail == "gate uses _is_sm120_supported but the module never binds it (a hand edit?)"
    assert finding.apply is None


def test_blackwell_is_not_needed_and_the_platform_spelling_needs_no_name() -> None:
    _, finding = decide_gate("def gate():\n    return _is_sm100_supported or _is_blackwell\n")
    assert finding.state is State.NOT_NEEDED
    assert "already admits SM12x: _is_sm100_supported or _is_blackwell" in finding.detail
    _, finding = decide_gate("def gate():\n    return get_platform().is_sm100 or get_platform().is_sm120\n")
    assert finding.state is State.APPLIED


def test_every_clause_is_widened_in_one_change() -> None:
    source = "def gate(n):\n    if _is_sm100_supported and n:\n        return 1\n    return _is_sm90_supported\n"
    module, finding = decide_gate(source, FLAG_PROVIDED)
    assert finding.state is State.PENDING
    assert applied(module, finding) == (
        "def gate(n):\n    if (_is_sm100_supported or _is_sm120_supported) and n:\n        return 1\n"
        "    return _is_sm90_supported or _is_sm120_supported\n"
    )


def test_unbound_names_only_what_the_sm120_terms_need() -> None:
    module = cst.parse_module("from sglang.srt.utils import is_sm120_supported\n")
    terms = clause_terms(cst.parse_expression("is_sm120_supported() or _is_sm120_supported or get_platform().is_sm120"))
    assert terms is not None
    assert unbound(module, context(), terms) == ["_is_sm120_supported"]
    assert unbound(module, context(provided=frozenset({"_is_sm120_supported"})), terms) == []
    # unbound_sm120 looks at the SM120 terms only: an SM100 flag is not its business.
    sm100 = clause_terms(cst.parse_expression("_is_sm100_supported"))
    assert sm100 is not None
    assert unbound_sm120(module, context(), sm100, "f", []) is None
    drift = unbound_sm120(module, context(), terms, "f", [terms[0].node])
    assert drift is not None
    assert drift.state is State.DRIFT and drift.where == "f" and list(drift.evidence) == [terms[0].node]


def test_find_anchored_returns_each_function_once_with_its_first_anchor() -> None:
    module = cst.parse_module("def gate():\n    pass\nclass C:\n    def gate(self):\n        pass\n")
    first = Anchor("a.py", "gate", Releases("0.5.4"))
    again = Anchor("b.py", "gate", Releases("0.5.9"))
    method = Anchor("a.py", "gate", Releases("0.5.4"), cls="C")
    found = find_anchored(module, [first, again, method])
    assert [(anchor, function.name.value) for anchor, function in found] == [(first, "gate"), (first, "gate")]
    assert len({id(function) for _, function in found}) == 2  # the function and the method
