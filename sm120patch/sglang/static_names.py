"""Answer "does ``sglang.x.y`` define name N?" from source, without importing sglang.

Importing sglang pulls in torch and CUDA; a patch tool must work on a host where that is
slow or impossible.  ``ast`` reads the module, follows ``from ... import *`` chains (how
``sglang.srt.utils`` re-exports ``utils/common.py``) and honours a literal ``__all__``.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

from sm120patch.errors import EnvironmentProblem, NotAsAsked


def module_file(package_dir: Path, dotted: str) -> Path | None:
    """Source file of ``dotted`` (``sglang.srt.utils``) inside the package at ``package_dir``."""
    parts = dotted.split(".")
    if parts[0] != package_dir.name:
        return None
    base = package_dir.joinpath(*parts[1:])
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=256)
def _parse(path: Path, mtime_ns: int) -> ast.Module:
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise EnvironmentProblem(f"{path}: cannot read ({exc.strerror})", code="unreadable") from exc
    try:
        return ast.parse(source, str(path))
    except SyntaxError as exc:
        raise NotAsAsked(
            f"{path}:{exc.lineno}: does not parse ({exc.msg}); sglang's own module is damaged "
            "or was edited by hand, so what it defines cannot be told",
            code="drift",
        ) from exc
    except ValueError as exc:  # null bytes
        raise NotAsAsked(f"{path}: cannot be read as Python source ({exc})", code="drift") from exc


def _import_time_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for stmt in body:
        out.append(stmt)
        if isinstance(stmt, ast.If):
            out += _import_time_statements(stmt.body) + _import_time_statements(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            out += _import_time_statements(stmt.body + stmt.orelse + stmt.finalbody)
            for handler in stmt.handlers:
                out += _import_time_statements(handler.body)
    return out


def _resolve_relative(dotted_here: str, is_package: bool, level: int, module: str | None) -> str:
    parts = dotted_here.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([module] if module else []))


_STAR_IMPORT = re.compile(r"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+\*", re.M)


@lru_cache(maxsize=256)
def _text(path: Path, mtime_ns: int) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise EnvironmentProblem(f"{path}: cannot read ({exc.strerror})", code="unreadable") from exc


def defines(package_dir: Path, dotted: str, name: str, _seen: frozenset[str] = frozenset()) -> bool:
    """Whether importing ``dotted`` binds ``name`` (statically, following star imports).

    A "yes" can come from the text alone (a ``def`` or assignment of ``name`` at column 0,
    here or behind a star import); every other answer comes from parsing."""
    if dotted in _seen:
        return False
    path = module_file(package_dir, dotted)
    if path is None:
        return False
    mtime = path.stat().st_mtime_ns
    text = _text(path, mtime)
    escaped = re.escape(name)
    if re.search(rf"^(?:(?:async[ \t]+)?def|class)[ \t]+{escaped}\b|^{escaped}[ \t]*(?::[^=\n]*)?=(?!=)", text, re.M):
        return True
    if name not in text:  # not bound here: only a star import can bring it
        is_package = path.name == "__init__.py"
        for match in _STAR_IMPORT.finditer(text):
            module = match.group(1)
            level = len(module) - len(module.lstrip("."))
            source = _resolve_relative(dotted, is_package, level, module.lstrip(".") or None) if level else module
            target = module_file(package_dir, source)
            if target is not None and _exports(target, name) and defines(package_dir, source, name, _seen | {dotted}):
                return True
    # No quick yes: parse, so that a "no" is never the guess of a file that does not parse.
    tree = _parse(path, mtime)
    statements = _import_time_statements(tree.body)
    for stmt in statements:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name:
            return True
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            return True
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
            return True
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                if alias.name != "*" and (alias.asname or alias.name.split(".")[0]) == name:
                    return True
    is_package = path.name == "__init__.py"
    for stmt in statements:
        if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
            source = (
                _resolve_relative(dotted, is_package, stmt.level, stmt.module) if stmt.level else (stmt.module or "")
            )
            target = module_file(package_dir, source)
            if target is not None and _exports(target, name) and defines(package_dir, source, name, _seen | {dotted}):
                return True
    return False


def _exports(path: Path, name: str) -> bool:
    """A star import takes ``name`` unless it is private or left out of a literal ``__all__``."""
    if name.startswith("_"):
        return False
    if "__all__" not in _text(path, path.stat().st_mtime_ns):
        return True
    tree = _parse(path, path.stat().st_mtime_ns)
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets):
            try:
                return name in ast.literal_eval(stmt.value)
            except ValueError:
                return True
    return True
