"""Small libcst lookups shared by the patches: functions, module-level names, layout."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import libcst as cst
import libcst.matchers as m
from libcst.helpers import get_full_name_for_node


def find_functions(
    module: cst.Module, names: Iterable[str], class_name: str | None = None
) -> list[cst.FunctionDef]:
    """Top-level functions (or methods of ``class_name``) called one of ``names``."""
    wanted = m.FunctionDef(name=m.Name(m.MatchIfTrue(lambda n: n in set(names))))
    if class_name is None:
        scope: Iterable[cst.CSTNode] = [module]
    else:
        scope = m.findall(module, m.ClassDef(name=m.Name(class_name)))
    found: list[cst.FunctionDef] = []
    for node in scope:
        found.extend(f for f in m.findall(node, wanted) if isinstance(f, cst.FunctionDef))
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
                targets = (
                    [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                )
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


class _Replacer(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.CSTNode]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        return self.replacements.get(id(original_node), updated_node)


def replace_all(module: cst.Module, pairs: Iterable[tuple[cst.CSTNode, cst.CSTNode]]) -> cst.Module:
    """Replace several nodes of ``module`` in one pass (``deep_replace`` loses the others'
    identity after the first replacement)."""
    result = module.visit(_Replacer({id(old): new for old, new in pairs}))
    assert isinstance(result, cst.Module)
    return result
