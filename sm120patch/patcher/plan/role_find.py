"""Role finding: where no known layout matches, each patch's target found by what it does.

The anchor rows are tried first and stay the record of every release.  A patch whose rows
found nothing it knows (drift, or "nothing here" where its row expects a change) is looked
for by its ``Role`` (``kit/model.py``, written beside each patch; the shapes are
``kit/role_shapes.py``):

* a function role reads only the modules whose text holds every word of the role, parses
  those, and keeps the functions the role's shape matches; exactly one is the target;
* a role that ``follows`` another patch takes the name that patch's target reads (the SM
  flag, the token limit) and follows it through ``from ... import`` to the module that binds
  it; the import goes wherever the flags are bound.

What a find gives is a row like any other (``Anchor(found_by="role")``): the patch's own
``check`` then runs on it, so a role find makes exactly the change a known row would.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import libcst as cst
from libcst.helpers import get_full_name_for_node

from sm120patch.patcher.kit.cst_helpers import (
    bound_name,
    find_functions,
    from_module_name,
    import_froms,
    imported_names,
    module_assignments,
)
from sm120patch.patcher.kit.model import FOUND_BY_ROLE, Anchor, Kind, Patch, Releases, Role, State, known_rows
from sm120patch.patcher.transaction.state_dir import DIRNAME
from sm120patch.sglang.layout import files_keeping
from sm120patch.sglang.tree import SglangTree

_SKIP_DIRS = frozenset({DIRNAME, "__pycache__"})
_HOPS = 4  # re-exports followed before giving up (sglang re-exports once, at most)


@dataclass(frozen=True)
class Located:
    """Where one patch's target stands in this tree, as its role found it."""

    rows: tuple[Anchor, ...]  # what its check looks through here
    where: str  # "file:function" (or "file: name"), as the report says it
    #: Followed from a target its known rows found into a file the layout table names for this
    #: patch's place: a known layout (sglang.layout.KEPT), not a role find.
    known: bool = False

    @property
    def file(self) -> str:
        return self.rows[0].file


class Package:
    """The sglang package's modules, each read and parsed at most once per plan."""

    def __init__(self, tree: SglangTree) -> None:
        self.tree = tree
        self._text: dict[str, bytes | None] = {}
        self._parsed: dict[str, cst.Module | None] = {}

    @cached_property
    def modules(self) -> tuple[str, ...]:
        found: list[str] = []
        root = self.tree.package_dir
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            rel = os.path.relpath(folder, root)
            found.extend(os.path.normpath(os.path.join(rel, f)) for f in sorted(files) if f.endswith(".py"))
        return tuple(found)

    def text(self, rel: str) -> bytes | None:
        if rel not in self._text:
            try:
                self._text[rel] = (self.tree.package_dir / rel).read_bytes()
            except OSError:
                self._text[rel] = None
        return self._text[rel]

    def parsed(self, rel: str, data: bytes) -> cst.Module | None:
        """The module this package already parsed from exactly ``data``, else None: the plan
        that follows a role find reads its file once, not twice."""
        return self._parsed.get(rel) if self._text.get(rel) == data else None

    def parse(self, rel: str) -> cst.Module | None:
        if rel not in self._parsed:
            data = self.text(rel)
            try:
                self._parsed[rel] = cst.parse_module(data) if data is not None else None
            except (cst.ParserSyntaxError, UnicodeDecodeError, ValueError):
                self._parsed[rel] = None
        return self._parsed[rel]

    def module_file(self, dotted: str, importer: str) -> str | None:
        """The file of module ``dotted`` as ``importer`` names it (absolute or relative)."""
        if dotted.startswith("."):
            level = len(dotted) - len(dotted.lstrip("."))
            base = importer.split("/")[:-level]
            parts = base + [p for p in dotted.lstrip(".").split(".") if p]
        else:
            parts = dotted.split(".")
            if parts[0] != "sglang":
                return None
            parts = parts[1:]
        for rel in ("/".join(parts) + ".py", "/".join([*parts, "__init__.py"])):
            if self.text(rel) is not None:
                return rel
        return None


def _holds_words(data: bytes, words: Sequence[bytes]) -> bool:
    """Whether a function of the module holds every one of ``words`` in its own lines: the
    standard library's parser, about a tenth of libcst's cost, spares libcst every module
    where the words only meet across functions."""
    if not all(w in data for w in words):
        return False
    try:
        parsed = ast.parse(data)
    except (SyntaxError, ValueError):
        return False
    lines = data.splitlines()
    functions = [n for n in ast.walk(parsed) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for node in functions:
        text = b"\n".join(lines[node.lineno - 1 : node.end_lineno])
        if all(w in text for w in words):
            return True
    return False


def search(package: Package, patch: Patch) -> list[tuple[str, str | None, str]]:
    """Every function the package holds that does what ``patch``'s role says: (file, class,
    name), in the package's order."""
    role = patch.role
    assert role is not None
    assert role.matches is not None
    words = [w.encode() for w in role.words]
    hits: list[tuple[str, str | None, str]] = []
    for rel in package.modules:
        data = package.text(rel)
        if data is None or not _holds_words(data, words):
            continue
        module = package.parse(rel)
        if module is None:
            continue
        for cls, function in _functions(module):
            if role.matches(function):
                hits.append((rel, cls, function.name.value))
    return hits


def _functions(module: cst.Module) -> list[tuple[str | None, cst.FunctionDef]]:
    found: list[tuple[str | None, cst.FunctionDef]] = []
    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef):
            found.append((None, stmt))
        elif isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock):
            found.extend((stmt.name.value, s) for s in stmt.body.body if isinstance(s, cst.FunctionDef))
    return found


def binding_module(package: Package, rel: str, name: str) -> str | None:
    """The module that binds ``name`` at module level, starting from ``rel`` and following
    ``from X import name`` (``as`` included) to where it is assigned."""
    for _ in range(_HOPS):
        module = package.parse(rel)
        if module is None:
            return None
        if module_assignments(module, name):
            return rel
        source = next(
            (
                (from_module_name(imp), get_full_name_for_node(alias.name) or name)
                for imp in import_froms(module)
                for alias in imported_names(imp)
                if bound_name(alias) == name
            ),
            None,
        )
        if source is None:
            return None
        dotted, name = source
        nxt = package.module_file(dotted, rel)
        if nxt is None:
            return None
        rel = nxt
    return None


def function_node(package: Package, row: Anchor) -> cst.FunctionDef | None:
    module = package.parse(row.file)
    if module is None:
        return None
    found = find_functions(module, [row.name], row.cls)
    return found[0] if len(found) == 1 else None


def _label(cls: str | None, name: str) -> str:
    return f"{cls}.{name}" if cls else name


def _known(patch: Patch, rel: str, cls: str | None, name: str) -> bool:
    return any(a.file == rel and a.name == name and a.cls == cls for a in known_rows(patch.anchors))


def calls_for_role(patch: Patch, state: State, version: object) -> bool:
    """Whether ``patch``'s finding by its rows asks for a role find: drift, or nothing to
    change where its row for this release expects a change (the target went elsewhere)."""
    if patch.role is None:
        return False
    if state is State.DRIFT:
        return True
    if state is not State.NOT_NEEDED or version is None:
        return False
    row = next((a for a in known_rows(patch.anchors) if str(version) in a.seen), None)
    return row is not None and row.expect is State.PENDING


def locate(
    package: Package,
    patches: Iterable[Patch],
    asks: Mapping[str, State],
    leaders: Mapping[str, Anchor],
    version: object,
) -> tuple[dict[str, Located], dict[str, str]]:
    """Role finds for ``patches``: ``asks`` holds each patch's state by its rows,
    ``leaders`` the row each patch's target was found through (for the roles that follow
    it).  Returns the patches found by role, and why others could not be (a sentence)."""
    found: dict[str, Located] = {}
    why: dict[str, str] = {}
    for patch, role in _leaders_first(patches):
        if role.follows is None:
            if not calls_for_role(patch, asks.get(patch.id, State.APPLIED), version):
                continue
            hits = search(package, patch)
            if len(hits) > 1:
                shown = ", ".join(f"{rel}:{_label(cls, name)}" for rel, cls, name in hits)
                why[patch.id] = f"{len(hits)} functions do what {role.what} does ({shown}); expected one"
                continue
            if not hits:
                why[patch.id] = f"no function in the package is {role.what}"
                continue
            rel, cls, name = hits[0]
            if _known(patch, rel, cls, name):
                continue  # the rows found it: what they said stands
            found[patch.id] = Located((_row(rel, name, role.what, cls=cls),), f"{rel}:{_label(cls, name)}")
            continue
        leader = found.get(role.follows)
        lead = leader.rows[0] if leader else leaders.get(role.follows)
        if lead is None or (leader is None and not calls_for_role(patch, asks.get(patch.id, State.APPLIED), version)):
            continue
        located = _follow(package, patch, lead)
        if located is None:
            if leader is not None:
                why[patch.id] = f"{role.what}: not found from {leader.where}"
            continue
        if all(_known(patch, r.file, r.cls, r.name) for r in located.rows):
            continue
        if leader is None and located.file in files_keeping(patch.place):
            located = replace(located, known=True)
        found[patch.id] = located
    return found, why


def _leaders_first(patches: Iterable[Patch]) -> list[tuple[Patch, Role]]:
    """The patches with a role, and their role, each after the one its role follows."""
    pending = [(p, p.role) for p in patches if p.role is not None]
    ordered: list[tuple[Patch, Role]] = []
    while pending:
        done = {p.id for p, _ in ordered}
        ready = [(p, r) for p, r in pending if r.follows is None or r.follows in done]
        ordered.extend(ready or pending)  # a leader without a role (or a cycle) leads nothing
        pending = [pair for pair in pending if pair not in ordered]
    return ordered


def _follow(package: Package, patch: Patch, lead: Anchor) -> Located | None:
    """``patch``'s rows where the target of ``lead`` leads: the module binding the name
    that target reads, or (``reads`` None) the leader's own file."""
    role = patch.role
    assert role is not None
    if role.reads is None:
        names = {(a.name, a.kind, a.cls): a for a in known_rows(patch.anchors)}
        rows = tuple(_row(lead.file, name, role.what, kind, cls) for name, kind, cls in names)
        return Located(rows, lead.file) if rows else None
    function = function_node(package, lead)
    if function is None:
        return None
    name = role.reads(function)
    if name is None:
        return None
    rel = binding_module(package, lead.file, name)
    if rel is None:
        return None
    return Located((_row(rel, name, role.what, role.kind),), f"{rel}: {name}")


def _row(file: str, name: str, what: str, kind: Kind = Kind.FUNCTION, cls: str | None = None) -> Anchor:
    """A row made for this tree by a role find (seen: this tree only, so any release)."""
    return Anchor(file, name, Releases("0"), cls=cls, kind=kind, found_by=FOUND_BY_ROLE, note=what)
