"""cst_helpers' lookups: which functions, assignments and imports run at import time, which
names a statement binds or reads, and replacing nodes by identity (parsed snippets only)."""

from __future__ import annotations

import itertools

import libcst as cst

from sm120patch.patcher.kit.cst_helpers import (
    ancestry,
    binds,
    binds_at_import,
    bound_name,
    code,
    find_functions,
    from_module_name,
    import_froms,
    imported_names,
    iter_children,
    module_assignments,
    module_statements,
    names_bound,
    names_read,
    replace_all,
    scoped_paths,
    search_paths,
    walk,
)

FUNCTIONS = """\
def apply(top): pass
class Communicator:
    def apply(self, method): pass
    def other(self): pass
    class Inner:
        def apply(self, inner): pass
class Short: pass
if X:
    def apply(guarded): pass
def outer():
    def apply(nested): pass
"""


def params(functions: list[cst.FunctionDef]) -> list[str]:
    return [f.params.params[-1].name.value for f in functions]


def test_find_functions_at_import_time_and_in_classes() -> None:
    module = cst.parse_module(FUNCTIONS)
    assert params(find_functions(module, ["apply"])) == ["top", "method", "inner", "guarded"]
    assert params(find_functions(module, ["apply"], "Communicator")) == ["method"]
    assert params(find_functions(module, ["apply"], "Inner")) == ["inner"]
    assert params(find_functions(module, iter(["other", "apply"]), "Communicator")) == ["method", "self"]
    assert find_functions(module, ["missing"]) == []
    assert find_functions(module, ["apply"], "Short") == []


BRANCHES = """\
if A:
    a = 1
elif B:
    b = 1
else:
    c = 1
try:
    d = 1
except E:
    e = 1
except F:
    e2 = 1
else:
    f = 1
finally:
    g = 1
def h():
    i = 1
with X:
    j = 1
while Y:
    k = 1
if Z:
    if W:
        m = 1
try:
    n = 1
finally:
    o = 1
"""


def test_module_statements_walk_if_and_try_branches_in_source_order() -> None:
    module = cst.parse_module(BRANCHES)
    simple = [code(s) for s in module_statements(module) if isinstance(s, cst.SimpleStatementLine)]
    assert simple == [
        "a = 1",
        "b = 1",
        "c = 1",
        "d = 1",
        "e = 1",
        "e2 = 1",
        "f = 1",
        "g = 1",
        "m = 1",
        "n = 1",
        "o = 1",
    ]
    kinds = [type(s).__name__ for s in module_statements(module) if not isinstance(s, cst.SimpleStatementLine)]
    assert kinds == [
        "If", "If", "Else", "Try", "ExceptHandler", "ExceptHandler", "Else", "Finally",
        "FunctionDef", "With", "While", "If", "If", "Try", "Finally",
    ]  # fmt: skip


def test_module_assignments_of_one_name() -> None:
    module = cst.parse_module(
        "name = 1\n"
        "x = 2; name = 3; name = 4\n"
        "name: int = 5\n"
        "a = name = 6\n"
        "name += 7\n"
        "x.name = 8\n"
        "name, b = 9, 10\n"
        "other = name\n"
        "if X:\n    name = 11\n"
        "def f():\n    name = 12\n"
    )
    lines = module_assignments(module, "name")
    assert [code(line) for line in lines] == [
        "name = 1",
        "x = 2; name = 3; name = 4",
        "name: int = 5",
        "a = name = 6",
        "name = 11",
    ]
    assert module_assignments(module, "missing") == []


def test_imports_their_sources_and_the_names_they_bind() -> None:
    module = cst.parse_module(
        "import os; from a.b import c, d as e\n"
        "from . import f\n"
        "from ..g import *\n"
        "if X:\n    from h import i\n"
        "def f():\n    from j import k\n"
    )
    froms = list(import_froms(module))
    assert [from_module_name(node) for node in froms] == ["a.b", ".", "..g", "h"]
    assert [[bound_name(a) for a in imported_names(node)] for node in froms] == [["c", "e"], ["f"], [], ["i"]]


def test_binds_at_import() -> None:
    module = cst.parse_module(
        "from a import b as bound, unbound as other\n"
        "flag = 1\n"
        "def fn(): pass\n"
        "class Klass: pass\n"
        "def outer():\n    inner = 1\n"
        "if X:\n    guarded = 2\n"
    )
    for name in ("bound", "flag", "fn", "Klass", "guarded"):
        assert binds_at_import(module, name), name
    for name in ("b", "unbound", "a", "inner", "outer.inner", "missing"):
        assert not binds_at_import(module, name), name
    assert binds_at_import(module, "outer")


def test_code_is_one_line() -> None:
    assert code(cst.parse_expression("f(a,\n    b)  ")) == "f(a, b)"
    assert code(cst.parse_statement("if x:\n    y = 1\n")) == "if x: y = 1"


def test_iter_children_yields_code_not_layout() -> None:
    call = cst.parse_expression("f(x, y=1)")
    assert isinstance(call, cst.Call)
    assert [type(c).__name__ for c in iter_children(call)] == ["Name", "Arg", "Arg"]
    attribute = cst.parse_expression("(a).b")
    assert [code(c) for c in iter_children(attribute)] == ["(a)", "b"]
    assert [code(n) for n in walk(cst.parse_expression("a + b * c")) if isinstance(n, cst.Name)] == ["a", "b", "c"]


SCOPED = """\
x = 1
def f():
    return g(a) + b
y = a
"""


def test_search_paths_from_the_root_down() -> None:
    module = cst.parse_module(SCOPED)
    function = module.body[1]
    assert isinstance(function, cst.FunctionDef)
    names = [n for n in walk(function) if isinstance(n, cst.Name) and n.value == "a"]
    [a] = names
    remaining = {id(a), 12345}
    paths = search_paths(module, remaining)
    assert list(paths) == [id(a)] and remaining == {12345}
    path = paths[id(a)]
    assert path[0] is module and path[1] is function and path[-1] is a
    assert all(child in list(iter_children(parent)) for parent, child in itertools.pairwise(path))
    assert search_paths(module, {id(a)}, statements_only=True) == {}
    assert search_paths(module, {id(function)}, statements_only=True)[id(function)] == [module, function]
    assert search_paths(module, set()) == {}


def test_scoped_paths_are_the_same_paths_found_faster() -> None:
    module = cst.parse_module(SCOPED)
    function = module.body[1]
    targets = {id(n) for n in walk(module) if isinstance(n, cst.Name) and n.value == "a"}
    assert len(targets) == 2
    plain = scoped_paths(module, targets, ())
    assert set(plain) == targets
    stranger = cst.parse_module("z = 0\n").body[0]  # a scope that is not in this module
    assert scoped_paths(module, targets, [function]) == plain
    assert scoped_paths(module, targets, [stranger, function]) == plain
    assert [[type(n).__name__ for n in p] for p in scoped_paths(module, targets, [function]).values()] == [
        [type(n).__name__ for n in p] for p in plain.values()
    ]


def test_replace_all_rebuilds_only_the_ancestors() -> None:
    module = cst.parse_module("x = 1\ndef f():\n    return a\ny = b\n")
    function, last = module.body[1], module.body[2]
    a = next(n for n in walk(function) if isinstance(n, cst.Name) and n.value == "a")
    b = next(n for n in walk(last) if isinstance(n, cst.Name) and n.value == "b")
    result = replace_all(module, [(a, cst.Name("A")), (b, cst.Name("B"))], scopes=[function])
    assert result.code == "x = 1\ndef f():\n    return A\ny = B\n"
    assert result.body[0] is module.body[0]  # untouched: the same node
    assert module.code == "x = 1\ndef f():\n    return a\ny = b\n"  # the original stays as it was


def test_replace_all_flattens_one_statement_into_several() -> None:
    module = cst.parse_module("x = 1\ny = 2\nz = 3\n")
    middle = module.body[1]
    two = cst.FlattenSentinel([cst.parse_statement("y1 = 2\n"), cst.parse_statement("y2 = 2\n")])
    assert replace_all(module, [(middle, two)]).code == "x = 1\ny1 = 2\ny2 = 2\nz = 3\n"
    assert replace_all(module, []) is module


def test_ancestry() -> None:
    module = cst.parse_module("def f():\n    return a\n")
    a = next(n for n in walk(module) if isinstance(n, cst.Name) and n.value == "a")
    path = ancestry(module, a)
    assert path[0] is module and path[-1] is a and len(path) == 6
    assert [type(n).__name__ for n in path] == [
        "Module", "FunctionDef", "IndentedBlock", "SimpleStatementLine", "Return", "Name",
    ]  # fmt: skip
    assert ancestry(module, module) == [module]
    assert ancestry(module, cst.Name("a")) == []


def statement(source: str) -> cst.CSTNode:
    line = cst.parse_statement(source)
    return line.body[0] if isinstance(line, cst.SimpleStatementLine) else line


def test_binds_names_assignment_targets_only() -> None:
    assert binds(statement("a, (b, *c) = x\n")) == {"a", "b", "c"}
    assert binds(statement("[d, e] = x\n")) == {"d", "e"}
    assert binds(statement("f = g = x\n")) == {"f", "g"}
    assert binds(statement("h: int = 1\n")) == {"h"}
    assert binds(statement("i += 1\n")) == {"i"}
    assert binds(statement("for j, k in x:\n    pass\n")) == {"j", "k"}
    assert binds(statement("x.a = 1\n")) == set()
    assert binds(statement("x[a] = 1\n")) == set()
    assert binds(statement("f(x)\n")) == set()


def test_names_bound_anywhere_below() -> None:
    function = cst.parse_statement("def f():\n    a = 1\n    if x:\n        b += [c for c in y]\n    d.e = 2\n")
    assert names_bound(function) == {"a", "b", "c"}


def test_names_read() -> None:
    assert names_read(statement("a = b.c\n")) == {"b"}
    assert names_read(statement("x += y\n")) == {"x", "y"}
    assert names_read(statement("z = f(key=v)\n")) == {"f", "v"}
    assert names_read(statement("p: T = q\n")) == {"T", "q"}
    assert names_read(statement("for i in items:\n    use(i)\n")) == {"items", "use", "i"}
    line = statement("r = s + t\n")
    assert isinstance(line, cst.Assign)
    assert isinstance(line.value, cst.BinaryOperation)
    assert names_read(line, exclude=[line.value.right]) == {"s"}
