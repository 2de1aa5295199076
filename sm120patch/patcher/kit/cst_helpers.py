"""Small libcst lookups shared by the patches: functions, module-level names, layout."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from functools import cache

import libcst as cst
from libcst.helpers import get_full_name_for_node


def find_functions(module: cst.Module, names: Iterable[str], class_name: str | None = None) -> list[cst.FunctionDef]:
    """Functions called one of ``names``: at import-time level or as methods of classes
    (of ``class_name`` only, if given).  Function bodies are not searched."""
    wanted = set(names)
    found: list[cst.FunctionDef] = []

    def scan(statements: Iterable[cst.CSTNode], in_class: str | None) -> None:
        for stmt in statements:
            if isinstance(stmt, cst.FunctionDef):
                if stmt.name.value in wanted and (class_name is None or in_class == class_name):
                    found.append(stmt)
            elif isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock):
                scan(stmt.body.body, stmt.name.value)

    scan(module_statements(module), None)
    return found


def module_statements(module: cst.Module) -> Iterator[cst.CSTNode]:
    """Statements that run at import time: top level, and inside top-level if/try/else."""

    def walk(body: Iterable[cst.CSTNode]) -> Iterator[cst.CSTNode]:
        for stmt in body:
            yield stmt
            if isinstance(stmt, (cst.If, cst.Try, cst.Else, cst.ExceptHandler, cst.Finally)):
                yield from walk(stmt.body.body)
                extra: list[cst.CSTNode] = []
                if isinstance(stmt, cst.If) and stmt.orelse is not None:
                    extra.append(stmt.orelse)
                if isinstance(stmt, cst.Try):
                    extra.extend(stmt.handlers)
                    extra.extend(s for s in (stmt.orelse, stmt.finalbody) if s is not None)
                yield from walk(extra)

    yield from walk(module.body)


def module_assignments(module: cst.Module, name: str) -> list[cst.SimpleStatementLine]:
    """Module-level statement lines that assign ``name`` (``name = ...``)."""
    lines = []
    for stmt in module_statements(module):
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, (cst.Assign, cst.AnnAssign)):
                targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                if any(isinstance(t, cst.Name) and t.value == name for t in targets):
                    lines.append(stmt)
                    break
    return lines


def import_froms(module: cst.Module) -> Iterator[cst.ImportFrom]:
    for stmt in module_statements(module):
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.ImportFrom):
                    yield small


def from_module_name(node: cst.ImportFrom) -> str:
    """Dotted source of ``from X import ...`` (relative dots kept)."""
    dots = "." * len(node.relative)
    return dots + (get_full_name_for_node(node.module) or "" if node.module else "")


def imported_names(node: cst.ImportFrom) -> list[cst.ImportAlias]:
    return [] if isinstance(node.names, cst.ImportStar) else list(node.names)


def bound_name(alias: cst.ImportAlias) -> str:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return get_full_name_for_node(alias.name) or ""


def binds_at_import(module: cst.Module, name: str) -> bool:
    """Whether ``name`` is bound when the module is imported (import, def or assignment)."""
    for imp in import_froms(module):
        if any(bound_name(a) == name for a in imported_names(imp)):
            return True
    if module_assignments(module, name):
        return True
    return any(
        isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value == name
        for stmt in module_statements(module)
    )


def code(node: cst.CSTNode) -> str:
    """Source text of ``node`` on one line, for messages."""
    return " ".join(cst.Module([]).code_for_node(node).split())


def without_comment(ws: cst.BaseParenthesizableWhitespace) -> cst.BaseParenthesizableWhitespace:
    """Whitespace with its comment and blank lines dropped, so that copying a separator
    (before a new ``or`` term, after a new import name) never copies a comment."""
    if isinstance(ws, cst.ParenthesizedWhitespace):
        return ws.with_changes(first_line=cst.TrailingWhitespace(newline=ws.first_line.newline), empty_lines=())
    return ws


@cache
def _node_fields(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(kind))


#: Fields that hold layout only (whitespace, comments, brackets, separators): never code.
FORMAT_FIELDS = frozenset(
    {
        "colon", "comma", "comment", "dot", "empty_lines", "equal", "first_colon", "first_line",
        "footer", "header", "last_line", "lbrace", "lbracket", "leading_lines", "leading_whitespace",
        "lines_after_decorators", "lpar", "newline", "rbrace", "rbracket", "relative", "rpar",
        "second_colon", "semicolon", "separator", "trailing_comma", "trailing_whitespace",
    }
)  # fmt: skip


@cache
def _code_fields(kind: type) -> tuple[str, ...]:
    return tuple(name for name in _node_fields(kind) if name not in FORMAT_FIELDS and not name.startswith("whitespace"))


def iter_children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Direct children that hold code (layout-only fields skipped), read from the dataclass
    fields: much cheaper than libcst's ``.children``, which also yields every whitespace."""
    for name in _code_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, cst.CSTNode):
                    yield item


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and every code node below it, depth first, in source order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(list(iter_children(current))))


_STATEMENT_LEVEL = (cst.Module, cst.BaseCompoundStatement, cst.BaseSuite, cst.Else, cst.ExceptHandler, cst.Finally)


def search_paths(root: cst.CSTNode, remaining: set[int], statements_only: bool = False) -> dict[int, list[cst.CSTNode]]:
    """Paths from ``root`` down to the nodes whose ids are in ``remaining`` (which loses the
    ones found).  Depth first, stopping once none remain; ``statements_only`` descends
    through statements and suites alone, never into expressions (a cheap way to a function)."""
    parent: dict[int, cst.CSTNode] = {}
    paths: dict[int, list[cst.CSTNode]] = {}
    stack: list[cst.CSTNode] = [root]
    while stack and remaining:
        node = stack.pop()
        if id(node) in remaining:
            remaining.discard(id(node))
            path = [node]
            while id(path[-1]) in parent:
                path.append(parent[id(path[-1])])
            paths[id(node)] = path[::-1]
            continue
        if statements_only and not isinstance(node, _STATEMENT_LEVEL):
            continue
        children = list(iter_children(node))
        for child in children:
            parent[id(child)] = node
        stack.extend(reversed(children))
    return paths


def scoped_paths(root: cst.CSTNode, targets: set[int], scopes: Sequence[cst.CSTNode]) -> dict[int, list[cst.CSTNode]]:
    """Paths from ``root`` to the targets.  Targets inside a ``scope`` (a function) are
    searched for there, the scope itself reached through statements alone; the rest by one
    search of the whole tree that stops once all are found."""
    remaining = set(targets)
    paths: dict[int, list[cst.CSTNode]] = {}
    for scope in scopes:
        to_scope = search_paths(root, {id(scope)}, statements_only=True).get(id(scope))
        if to_scope is not None:
            inside = search_paths(scope, remaining)
            paths.update({ident: [*to_scope[:-1], *path] for ident, path in inside.items()})
    paths.update(search_paths(root, remaining))
    return paths


def replace_all(
    module: cst.Module,
    pairs: Iterable[tuple[cst.CSTNode, cst.CSTNode | cst.FlattenSentinel]],
    scopes: Sequence[cst.CSTNode] = (),
) -> cst.Module:
    """Replace nodes of ``module`` (matched by identity) in one pass.

    Only the ancestors of a replaced node are rebuilt; every other subtree keeps its
    identity and is not even visited past the last target.  (libcst's ``deep_replace``
    rebuilds the whole tree on each call: a full visit per patch on a 7000-line file.)
    """
    replacements = {id(old): new for old, new in pairs}
    on_path = {id(node) for path in scoped_paths(module, set(replacements), scopes).values() for node in path}

    def rebuild(node: cst.CSTNode) -> cst.CSTNode | cst.FlattenSentinel:
        if id(node) in replacements:
            return replacements[id(node)]
        changes: dict[str, object] = {}
        for name in _node_fields(type(node)):
            value = getattr(node, name)
            if isinstance(value, cst.CSTNode):
                if id(value) in on_path:
                    changes[name] = rebuild(value)
            elif isinstance(value, (list, tuple)) and any(id(item) in on_path for item in value):
                items: list[object] = []
                for item in value:
                    new_item = rebuild(item) if id(item) in on_path else item
                    if isinstance(new_item, cst.FlattenSentinel):
                        items.extend(new_item.nodes)
                    else:
                        items.append(new_item)
                changes[name] = type(value)(items)
        return node.with_changes(**changes) if changes else node

    result = rebuild(module)
    assert isinstance(result, cst.Module)
    return result


def ancestry(root: cst.CSTNode, target: cst.CSTNode) -> list[cst.CSTNode]:
    """The nodes from ``root`` down to ``target`` (both included), or [] if it is not there."""
    stack: list[tuple[cst.CSTNode, list[cst.CSTNode]]] = [(root, [root])]
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        stack.extend((child, [*path, child]) for child in iter_children(node))
    return []


def _binding_names(target: cst.BaseExpression) -> Iterator[cst.Name]:
    """The names an assignment target binds (``a``, ``a, b``, ``a, *b``); ``x.a = `` binds
    none.  A starred element's ``value`` is its name, so ``*b`` needs no case of its own."""
    if isinstance(target, cst.Name):
        yield target
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from _binding_names(element.value)


def _targets(node: cst.CSTNode) -> list[cst.BaseExpression]:
    if isinstance(node, cst.Assign):
        return [t.target for t in node.targets]
    if isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor)):
        return [node.target]
    return []


def binds(node: cst.CSTNode) -> set[str]:
    """Names ``node`` itself assigns (plain, tuple, annotated, augmented, ``for`` targets)."""
    return {n.value for t in _targets(node) for n in _binding_names(t)}


def names_bound(node: cst.CSTNode) -> set[str]:
    """Names assigned anywhere under ``node``."""
    return {name for child in walk(node) for name in binds(child)}


def names_read(node: cst.CSTNode, exclude: Iterable[cst.CSTNode] = ()) -> set[str]:
    """Names read under ``node`` (outside the ``exclude`` subtrees): every ``Name`` except
    pure assignment targets, attribute members (``x.name``) and keyword-argument names (a
    safe over-approximation of "uses x")."""
    pruned = {id(n) for n in exclude}
    nodes: list[cst.CSTNode] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if id(current) in pruned:
            continue
        nodes.append(current)
        stack.extend(iter_children(current))
    skip: set[int] = set()
    for child in nodes:
        if not isinstance(child, cst.AugAssign):  # ``x += 1`` reads x too
            skip.update(id(n) for t in _targets(child) for n in _binding_names(t))
        if isinstance(child, cst.Attribute):
            skip.add(id(child.attr))
        elif isinstance(child, cst.Arg) and child.keyword is not None:
            skip.add(id(child.keyword))
    return {c.value for c in nodes if isinstance(c, cst.Name) and id(c) not in skip}
