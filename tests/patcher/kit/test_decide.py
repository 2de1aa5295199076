"""decide: the state of a gate's SM clauses, the change when pending, and the names it needs."""

from __future__ import annotations

import libcst as cst

from sm120patch.patcher.kit.cst_helpers import code, find_functions
from sm120patch.patcher.kit.decide import (
    anchored_names,
    decide,
    find_anchored,
    find_assigned,
    helper_import,
    label,
    searched,
    sought,
    unbound,
    unbound_sm120,
)
from sm120patch.patcher.kit.imports import ImportSite, insert_after
from sm120patch.patcher.kit.model import Anchor, Finding, Kind, PatchContext, Releases, State
from sm120patch.patcher.kit.sm_terms import clause_terms, clauses_in


def context(provided: frozenset[str] = frozenset(), undefined: tuple[str, ...] = ()) -> PatchContext:
    return PatchContext(None, lambda module, name: name not in undefined, provided)


def decide_gate(source: str, ctx: PatchContext | None = None) -> tuple[cst.Module, Finding]:
    """``decide`` on the clauses of the function ``gate`` in ``source``."""
    module = cst.parse_module(source)
    (function,) = find_functions(module, ["gate"])
    clauses = clauses_in(function)
    finding = decide(module, ctx or context(), clauses, "gate", [c.node for c in clauses], [function])
    return module, finding


def located(module: cst.Module, finding: Finding) -> tuple[str, list[str], list[cst.CSTNode]]:
    """Where ``finding`` points (as ``decide_gate`` passed it): the name, the evidence as
    code, and the functions it scopes."""
    return finding.where, [code(node) for node in finding.evidence], list(finding.scopes)


def gate_of(module: cst.Module) -> list[cst.CSTNode]:
    return list(find_functions(module, ["gate"]))


def applied(module: cst.Module, finding: Finding) -> str:
    assert finding.apply is not None
    return finding.apply(module).code


FLAG_PROVIDED = context(provided=frozenset({"_is_sm120_supported"}))  # by communicator-flag


def test_a_clause_without_sm12x_is_pending_and_widened() -> None:
    source = "def gate(n):\n    return (_is_sm90_supported or _is_sm100_supported) and n > 0\n"
    module, finding = decide_gate(source, FLAG_PROVIDED)
    assert finding.state is State.PENDING
    assert finding.detail == "gate: will widen (_is_sm90_supported or _is_sm100_supported) with _is_sm120_supported"
    assert located(module, finding) == (
        "gate",
        ["(_is_sm90_supported or _is_sm100_supported)"],
        gate_of(module),
    )
    assert applied(module, finding) == (
        "def gate(n):\n    return (_is_sm90_supported or _is_sm100_supported or _is_sm120_supported) and n > 0\n"
    )
    # Without the flag bound (here or by a required patch) the widened gate would not import.
    _, finding = decide_gate(source)
    assert finding == Finding(
        State.DRIFT, "gate: the SM120 term would need _is_sm120_supported, which nothing binds", "gate"
    )


def test_a_helper_call_imports_the_sm120_helper_beside_the_sm100_one() -> None:
    source = "from sglang.srt.utils import is_sm100_supported\ndef gate():\n    return is_sm100_supported()\n"
    module, finding = decide_gate(source)
    assert finding.state is State.PENDING
    assert finding.detail == (
        "gate: will widen is_sm100_supported() with is_sm120_supported() and import is_sm120_supported"
        " from sglang.srt.utils"
    )
    assert located(module, finding) == ("gate", ["is_sm100_supported()"], gate_of(module))
    assert applied(module, finding) == (
        "from sglang.srt.utils import is_sm100_supported, is_sm120_supported\n"
        "def gate():\n    return is_sm100_supported() or is_sm120_supported()\n"
    )
    # A patch this one requires imports it already: no second import.
    module, finding = decide_gate(source, context(provided=frozenset({"is_sm120_supported"})))
    assert finding.state is State.PENDING
    assert finding.detail == "gate: will widen is_sm100_supported() with is_sm120_supported()"
    assert applied(module, finding).startswith("from sglang.srt.utils import is_sm100_supported\n")


def test_a_helper_that_cannot_be_imported_is_drift() -> None:
    _, finding = decide_gate("def gate():\n    return is_sm100_supported()\n")
    assert finding == Finding(
        State.DRIFT,
        "gate tests is_sm100_supported(), but no module-level `from sglang.srt.utils import ..., is_sm100_supported`"
        " to add is_sm120_supported to",
        "gate",
    )
    source = "from sglang.srt.utils import is_sm100_supported\ndef gate():\n    return is_sm100_supported()\n"
    _, finding = decide_gate(source, context(undefined=("is_sm120_supported",)))
    assert finding == Finding(
        State.DRIFT,
        "gate tests is_sm100_supported(), but sglang.srt.utils does not define is_sm120_supported in this sglang"
        " (it arrives in 0.5.4)",
        "gate",
    )


def test_a_named_sm120_term_is_applied_only_where_its_name_is_bound() -> None:
    gate = "def gate():\n    return _is_sm100_supported or _is_sm120_supported\n"
    module, finding = decide_gate("_is_sm120_supported = True\n" + gate)
    assert finding.state is State.APPLIED
    assert finding.detail == "gate: _is_sm100_supported or _is_sm120_supported"
    assert located(module, finding) == ("gate", ["_is_sm100_supported or _is_sm120_supported"], gate_of(module))
    _, finding = decide_gate(gate, context(provided=frozenset({"_is_sm120_supported"})))
    assert finding.state is State.APPLIED
    module, finding = decide_gate(gate)  # a hand edit that added the term but not the flag
    assert finding.state is State.DRIFT
    assert finding.detail == "gate uses _is_sm120_supported but the module never binds it (a hand edit?)"
    assert finding.apply is None
    assert located(module, finding) == ("gate", ["_is_sm100_supported or _is_sm120_supported"], [])
    # Both the helper and the flag added by hand, neither bound: both are named.
    _, finding = decide_gate("def gate():\n    return is_sm120_supported() or _is_sm120_supported\n")
    assert finding.detail == (
        "gate uses _is_sm120_supported, is_sm120_supported but the module never binds it (a hand edit?)"
    )


def test_blackwell_is_not_needed_and_the_platform_spelling_needs_no_name() -> None:
    module, finding = decide_gate("def gate():\n    return _is_sm100_supported or _is_blackwell\n")
    assert finding.state is State.NOT_NEEDED
    assert finding.detail == "gate already admits SM12x: _is_sm100_supported or _is_blackwell"
    assert located(module, finding) == ("gate", ["_is_sm100_supported or _is_blackwell"], gate_of(module))
    assert finding.apply is None
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


def test_every_clause_and_every_new_term_is_named_once_in_the_message() -> None:
    source = (
        "def gate(n):\n    if _is_sm100_supported and n:\n        return 1\n"
        "    if _is_sm90_supported or _is_sm100_supported:\n        return 2\n"
        "    return get_platform().is_sm100\n"
    )
    module, finding = decide_gate(source, FLAG_PROVIDED)
    assert finding.state is State.PENDING
    assert finding.detail == (
        "gate: will widen _is_sm100_supported; _is_sm90_supported or _is_sm100_supported; get_platform().is_sm100"
        " with _is_sm120_supported, get_platform().is_sm120"
    )
    assert located(module, finding) == (
        "gate",
        ["_is_sm100_supported", "_is_sm90_supported or _is_sm100_supported", "get_platform().is_sm100"],
        gate_of(module),
    )


def test_applied_and_not_needed_list_every_clause() -> None:
    source = (
        "def gate(n):\n    if _is_sm100_supported or _is_sm120_supported:\n        return 1\n"
        "    return get_platform().is_sm120\n"
    )
    module, finding = decide_gate(source, FLAG_PROVIDED)
    assert finding.state is State.APPLIED
    assert finding.detail == "gate: _is_sm100_supported or _is_sm120_supported; get_platform().is_sm120"
    assert located(module, finding)[2] == gate_of(module)
    source = "def gate(n):\n    if _is_blackwell:\n        return 1\n    return get_platform().is_blackwell\n"
    module, finding = decide_gate(source)
    assert finding.state is State.NOT_NEEDED
    assert finding.detail == "gate already admits SM12x: _is_blackwell; get_platform().is_blackwell"
    assert located(module, finding) == ("gate", ["_is_blackwell", "get_platform().is_blackwell"], gate_of(module))


def test_helper_import_without_an_anchor_goes_where_isort_would() -> None:
    module = cst.parse_module("from sglang.srt.utils import is_cuda, is_sm90_supported\n")
    site = helper_import(module, context(), None)
    assert isinstance(site, ImportSite)
    assert code(insert_after(site, "is_sm120_supported")) == (
        "from sglang.srt.utils import is_cuda, is_sm120_supported, is_sm90_supported"
    )
    assert helper_import(cst.parse_module("import os\n"), context(), None) == (
        "no module-level `from sglang.srt.utils import ...` to add is_sm120_supported to"
    )


def test_find_anchored_with_a_class_finds_only_the_method() -> None:
    module = cst.parse_module("def gate():\n    pass\nclass C:\n    def gate(self):\n        pass\n")
    method = Anchor("a.py", "gate", Releases("0.5.4"), cls="C")
    found = find_anchored(module, [method])
    assert len(found) == 1
    anchor, function = found[0]
    assert anchor is method and code(function).startswith("def gate(self):")


def test_label_and_searched_name_the_anchors() -> None:
    function = Anchor("a.py", "gate", Releases("0.5.4"))
    method = Anchor("b.py", "gate", Releases("0.5.9", "0.5.12"), cls="C")
    flag = Anchor("c.py", "_is_sm100_supported", Releases("0.4.9"), kind=Kind.ASSIGNMENT)
    assert (label(function), label(method)) == ("gate", "C.gate")
    assert searched([function, method, flag]) == (
        "function gate (seen in 0.5.4 - now); method C.gate (seen in 0.5.9 - 0.5.12); "
        "`_is_sm100_supported = ...` (seen in 0.4.9 - now)"
    )


def test_find_assigned_returns_each_line_once_with_its_first_anchor() -> None:
    module = cst.parse_module(
        "_is_sm100_supported = a\nif x:\n    _is_sm100 = _is_sm100_supported = b\ndef f():\n    _is_sm100 = c\n"
    )
    flag = Anchor("a.py", "_is_sm100_supported", Releases("0.5.4"), kind=Kind.ASSIGNMENT)
    renamed = Anchor("a.py", "_is_sm100", Releases("0.5.24"), kind=Kind.ASSIGNMENT)
    function = Anchor("a.py", "_is_sm100", Releases("0.5.4"))
    found = find_assigned(module, [flag, renamed, function])
    assert [(anchor, code(line)) for anchor, line in found] == [
        (flag, "_is_sm100_supported = a"),
        (flag, "_is_sm100 = _is_sm100_supported = b"),  # once, with its first anchor; f's body is not searched
    ]
    assert anchored_names([flag, function, renamed, flag], Kind.ASSIGNMENT) == ["_is_sm100_supported", "_is_sm100"]


def test_sought_names_each_target_once_over_the_releases_of_its_rows() -> None:
    rows = [
        Anchor("a.py", "f", Releases("0.5.19")),
        Anchor("a.py", "f", Releases("0.5.14", "0.5.18")),
        Anchor("a.py", "f", Releases("0.5.11", "0.5.13.post1")),
    ]
    assert sought(rows) == "function f (seen in 0.5.11 - now)"
    renamed = [Anchor("a.py", "g", Releases("0.5.24")), Anchor("a.py", "f", Releases("0.5.9", "0.5.23")), *rows[1:]]
    assert sought(renamed) == "function g (seen in 0.5.24 - now) or function f (seen in 0.5.9 - 0.5.23)"


def test_sought_orders_releases_as_versions_not_as_text() -> None:
    """0.5.23 is after 0.5.9 although "0.5.23" sorts before "0.5.9" as text: the span ends there."""
    rows = [
        Anchor("a.py", "f", Releases("0.5.10", "0.5.23")),
        Anchor("a.py", "f", Releases("0.5.4", "0.5.9")),
    ]
    assert sought(rows) == "function f (seen in 0.5.4 - 0.5.23)"


#: A role find saw the SM flags bound in ``sglang.srt.flags``, not in the gate's own module.
FLAGS_ELSEWHERE = PatchContext(
    None, lambda module, name: True, bound_elsewhere={"_is_sm120_supported": "sglang.srt.flags"}
)


def test_a_flag_bound_in_another_module_is_imported_beside_its_sm100_twin() -> None:
    """A role find saw the flags bound in ``sglang.srt.flags`` (``bound_elsewhere``): the gate's
    module imports ``_is_sm100_supported`` from there by name, so ``_is_sm120_supported`` goes
    beside it."""
    source = (
        "from sglang.srt.flags import _is_sm90_supported, _is_sm100_supported\n\n"
        "def gate(n):\n    return (_is_sm90_supported or _is_sm100_supported) and n > 0\n"
    )
    module, finding = decide_gate(source, FLAGS_ELSEWHERE)
    assert finding.state is State.PENDING
    assert applied(module, finding) == (
        "from sglang.srt.flags import _is_sm90_supported, _is_sm100_supported, _is_sm120_supported\n\n"
        "def gate(n):\n    return (_is_sm90_supported or _is_sm100_supported or _is_sm120_supported) and n > 0\n"
    )


def test_a_flag_bound_elsewhere_but_not_imported_by_name_here_is_drift() -> None:
    source = (
        "from sglang.srt.other import _is_sm90_supported, _is_sm100_supported\n\n"
        "def gate(n):\n    return (_is_sm90_supported or _is_sm100_supported) and n > 0\n"
    )
    finding = decide_gate(source, FLAGS_ELSEWHERE)[1]
    assert finding.state is State.DRIFT and "_is_sm120_supported, which nothing binds" in finding.detail


def test_a_flag_bound_elsewhere_is_not_imported_beside_another_name_from_that_module() -> None:
    """The gate's module imports ``_is_cuda`` from ``sglang.srt.flags`` but its SM100 flag from
    another module: that import is not its twin's, so the SM120 flag has nowhere to go."""
    source = (
        "from sglang.srt.flags import _is_cuda\n"
        "from sglang.srt.other import _is_sm90_supported, _is_sm100_supported\n\n"
        "def gate(n):\n    return _is_cuda and (_is_sm90_supported or _is_sm100_supported) and n > 0\n"
    )
    finding = decide_gate(source, FLAGS_ELSEWHERE)[1]
    assert finding.state is State.DRIFT and "_is_sm120_supported, which nothing binds" in finding.detail
