"""The shapes roles recognise (kit/role_shapes.py), one function each, on code written here:
where each one's edges are (a resolver's words about the allreduce however spelled, the batch
compared with a name, a switch read or turned on), and the rows a role find makes."""

from __future__ import annotations

import libcst as cst
import pytest

from sm120patch.patcher.kit import role_shapes
from sm120patch.patcher.kit.model import FOUND_BY_ROLE, Anchor, Kind, Releases
from sm120patch.patcher.plan import role_find


def function(source: str) -> cst.FunctionDef:
    [node] = [s for s in cst.parse_module(source).body if isinstance(s, cst.FunctionDef)]
    return node


def expression(source: str) -> cst.BaseExpression:
    return cst.parse_expression(source)


RESOLVER = """
def resolve(backend):
    if backend == "trtllm":
        if not (is_sm90_supported() or is_sm100_supported()):
            raise ValueError("{words} fusion needs SM90 or SM100")
    return backend
"""


@pytest.mark.parametrize("words", ["allreduce", "all_reduce", "all-reduce", "All Reduce", "ALL_REDUCE"])
def test_a_resolver_raises_about_the_allreduce_however_it_is_spelled(words: str) -> None:
    assert role_shapes.is_resolver(function(RESOLVER.replace("{words}", words)))


@pytest.mark.parametrize(
    "source",
    [
        RESOLVER.replace("{words}", "attention"),  # another backend's SM refusal
        RESOLVER.replace("{words}", "allreduce").replace('"trtllm"', '"flashinfer"'),  # names no fusion backend
        RESOLVER.replace("{words}", "allreduce").replace("raise ValueError(", "print("),  # refuses nothing
    ],
    ids=["attention", "no-trtllm", "no-raise"],
)
def test_what_is_not_the_resolver(source: str) -> None:
    assert not role_shapes.is_resolver(function(source))


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("batch_size <= FUSE_LIMIT", "FUSE_LIMIT"),
        ("x.shape[0] < LIMIT", "LIMIT"),
        ("0 < num_tokens <= MAX_TOKENS", "MAX_TOKENS"),  # a chain: the batch is the left of the second
        ("batch_size <= 2048", None),  # a number, not a name
        ("batch_size >= FUSE_LIMIT", None),  # not an upper bound
        ("world_size <= LIMIT", None),  # not the batch
        ("flag and other", None),
    ],
)
def test_the_limit_is_the_name_the_batch_is_bounded_by(source: str, name: str | None) -> None:
    assert role_shapes.limit_name(expression(source)) == name


@pytest.mark.parametrize(
    ("source", "reads"),
    [
        ("args.enable_flashinfer_allreduce_fusion", True),
        ("enable_flashinfer_allreduce_fusion", True),
        ("batch_size <= FUSE_LIMIT", True),
        ("args.enable_torch_compile", False),
        ("enable_torch_compile", False),
        ("batch_size > 0", False),
    ],
)
def test_a_switch_is_the_fusions_option_or_its_token_limit(source: str, reads: bool) -> None:
    assert role_shapes.reads_switch(expression(source)) is reads


GATE = """
def gate(batch_size):
    return (_is_sm90_supported or _is_sm100_supported) and {other}
"""


@pytest.mark.parametrize(
    ("other", "found"),
    [
        ("batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE", True),
        ("get_global_server_args().enable_flashinfer_allreduce_fusion", True),
        ("batch_size > 0", False),  # no switch beside the clause
    ],
)
def test_a_gate_holds_the_clause_beside_a_switch(other: str, found: bool) -> None:
    tests = list(role_shapes.gate_tests(function(GATE.replace("{other}", other))))
    assert bool(tests) is found
    assert role_shapes.is_gate(function(GATE.replace("{other}", other))) is found


def test_a_gate_after_an_early_return_that_tests_no_sm_clause_is_still_a_gate() -> None:
    source = """
def gate(batch_size):
    if batch_size == 0:
        return False
    return (_is_sm90_supported or _is_sm100_supported) and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE
"""
    [(_, clause)] = role_shapes.gate_tests(function(source))
    assert [t.arch for t in clause.terms] == ["sm90", "sm100"]
    assert role_shapes.is_gate(function(source))


def test_a_gate_that_turns_the_fusion_on_is_the_auto_enable_not_the_gate() -> None:
    source = """
def adjust(self, batch_size):
    if (is_sm90_supported() or is_sm100_supported()) and not self.enable_flashinfer_allreduce_fusion:
        self.enable_flashinfer_allreduce_fusion = True
"""
    assert role_shapes.is_auto_enable(function(source)) and not role_shapes.is_gate(function(source))
    local = source.replace("self.enable_flashinfer_allreduce_fusion = True", "enable = True")
    assert not role_shapes.is_auto_enable(function(local))  # a local name: nothing turned on
    keyed = """
def overrides():
    if is_sm90_supported() or is_sm100_supported():
        return {"flashinfer_allreduce_fusion_backend": "auto"}
    return {}
"""
    assert role_shapes.is_auto_enable(function(keyed))
    assert not role_shapes.is_auto_enable(function(keyed.replace('"flashinfer_allreduce', '"other')))


def test_a_role_finds_row_is_for_this_tree_and_says_what_it_found() -> None:
    assert role_find._row("srt/x.py", "gate", "the gate", Kind.ASSIGNMENT, "Cls") == Anchor(
        "srt/x.py", "gate", Releases("0"), cls="Cls", kind=Kind.ASSIGNMENT, found_by=FOUND_BY_ROLE, note="the gate"
    )
    assert (role_find._label("Cls", "m"), role_find._label(None, "f")) == ("Cls.m", "f")


@pytest.mark.parametrize(
    ("source", "holds"),
    [
        (b"def f():\n    a = 1\n    b = 2\n", True),
        (b"def f():\n    a = 1\n\ndef g():\n    b = 2\n", False),  # the words meet across functions only
        (b"a = 1\nb = 2\n", False),  # at module level
        (b"def f(:\n    a b\n", False),  # does not parse
        (b"def f():\n    a = 1\n", False),  # one word missing
        (b"class C:\n    def m(self):\n        a = 1\n        b = 2\n", True),
    ],
)
def test_words_count_only_where_one_function_holds_them_all(source: bytes, holds: bool) -> None:
    assert role_find._holds_words(source, [b"a = 1", b"b = 2"]) is holds
