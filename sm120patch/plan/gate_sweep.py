"""The sweep: every SM check on FlashInfer's allreduce-fusion path in the whole sglang package,
so that a gate the patches do not know (a new one, or one moved to a file they do not read)
is a warning, not a silent "all patches applied".

Each ``.py`` under the package is read; a byte-level pre-filter keeps only files that name an
SM term and the fusion (``fusion_path.SM_BYTES`` / ``FUSION_BYTES``), or sit in a module on
the path; of those, a module on the path is parsed whole, any other only where it defines a
function whose name is on the path (that definition alone), with the standard library's
parser (the patches' libcst costs ~6x as much, and the sweep never rewrites).

An *SM check* is a truth test, a returned, assigned or evaluated value that holds an SM term
of ``patchkit.sm_names``, a raw capability comparison (``get_device_capability() >= (9, 0)``,
``major == 10``) or a table keyed by the capability.  One is reported when it is on the path
(``fusion_path.ON_PATH``) and:

* it does not admit SM12x (no ``sm120``/``sm121``/``blackwell`` term; a raw comparison that
  singles other GPUs out, a table lookup),
* no patch owns it: in a file a patch will change, the sweep reads the file as apply leaves it
  (the owned clause then has its SM120 term); in a file that stays as it is, a pending patch
  owns the check that holds its evidence line inside its anchor function,
* and it is not one of ``fusion_path.KNOWN_GATES``.

A trusted tree (``plan.trust``) is not read again: ``apply`` leaves a record beside its
manifest (``sweep.json``): every directory's mtime (a file added, removed or replaced by
rename changes it), the sha256 of each file the pre-filter kept, and the checks it reported.
While the manifest it was made with is the one there and all of that still holds, verify
uses it; anything else sweeps again.
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from sm120patch.locate.tree import SglangTree
from sm120patch.patchkit.model import Kind, State
from sm120patch.patchkit.sm_names import FLAG_NAME, HELPER_NAME, PLATFORM_ATTR, PLATFORM_CALL, SM12X_ARCHS
from sm120patch.plan.fusion_path import FUSION_BYTES, KNOWN_GATES, ON_PATH, SM_BYTES, KnownGate
from sm120patch.plan.registry import by_id
from sm120patch.plan.types import Plan
from sm120patch.transaction.fsutil import sha256
from sm120patch.transaction.state import DIRNAME, Manifest, StateDir

RAW = "capability"  # the "architecture" of a raw capability comparison
_SKIP_DIRS = frozenset({DIRNAME, "__pycache__"})
_CAPABILITY_WORDS = ("capability", "major", "sm_version", "device_sm", "compute_cap")
_SM_WORDS = (*(b.decode() for b in SM_BYTES), *_CAPABILITY_WORDS)


@dataclass(frozen=True)
class UnknownCheck:
    """An SM check on the fused path that no patch owns and the known list does not name."""

    file: str  # relative to the sglang package dir
    line: int
    function: str  # "Class.method", "name", or "<module>"
    expression: str  # on one line

    def sentence(self) -> str:
        return f"an SM check this tool does not know: sglang/{self.file}:{self.line} {self.function}: {self.expression}"


@dataclass(frozen=True)
class _Check:
    line: int
    end_line: int
    function: str
    expression: str
    archs: frozenset[str]
    statement: str  # the source of the statement the check governs (known-list words)


_ON_PATH = re.compile("|".join(f"(?:{p.pattern.pattern})" for p in ON_PATH))  # one search, not one a row


def on_path(rel: str, function: str) -> bool:
    return _ON_PATH.search(f"{rel}::{function}") is not None


def _module_on_path(rel: str) -> bool:
    return on_path(rel, "")


# -- reading ---------------------------------------------------------------------------------


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, os.fstat(fd).st_size + 1)
    finally:
        os.close(fd)


def _walk(package_dir: Path) -> Iterator[tuple[str, str, bool]]:
    """(relative path, absolute path, is a directory) of every directory and ``.py`` below."""
    stack = [("", str(package_dir))]
    while stack:
        rel, path = stack.pop()
        yield rel, path, True
        try:
            entries = list(os.scandir(path))
        except OSError:  # unreadable: nothing in it that Python would import either
            continue
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in _SKIP_DIRS:
                    stack.append((child, entry.path))
            elif entry.name.endswith(".py"):
                yield child, entry.path, False


def prefiltered(rel: str, data: bytes) -> bool:
    """Whether ``data`` may hold an SM check on the path (bytes only, no parsing)."""
    return (any(b in data for b in FUSION_BYTES) or _module_on_path(rel)) and any(b in data for b in SM_BYTES)


@dataclass
class _Scan:
    dirs: dict[str, int]  # directory -> st_mtime_ns
    kept: dict[str, bytes]  # the files the pre-filter kept


class Prefetch:
    """``_scan`` in a helper thread, started before the planning it overlaps: reading ~70 MB
    of sglang waits on the kernel, not on the interpreter, while libcst loads and parses."""

    def __init__(self, tree: SglangTree) -> None:
        import threading  # here: a trusted tree's verify never starts one

        from sm120patch.probes import leave_ctrl_c_to_the_main_thread

        self._block_ctrl_c = leave_ctrl_c_to_the_main_thread
        self._scan: _Scan | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(tree,), name="sm120patch-sweep", daemon=True)
        self._thread.start()

    def _run(self, tree: SglangTree) -> None:
        self._block_ctrl_c()
        try:
            self._scan = _scan(tree)
        except BaseException as exc:  # raised again in the thread that asks
            self._error = exc

    def result(self) -> _Scan:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._scan is not None
        return self._scan


def prefetch(tree: SglangTree) -> Prefetch | None:
    """Start reading the package now where the sweep will have to (no record of apply's to
    go by); None where a record may spare it."""
    if StateDir(tree.package_dir).sweep_path.exists():
        return None
    return Prefetch(tree)


def _scan(tree: SglangTree) -> _Scan:
    scan = _Scan({}, {})
    for rel, path, is_dir in _walk(tree.package_dir):
        try:
            if is_dir:
                scan.dirs[rel] = os.stat(path).st_mtime_ns
                continue
            data = _read(path)
        except OSError:
            continue  # vanished or unreadable: nothing of sglang's that the import would load
        if prefiltered(rel, data):
            scan.kept[rel] = data
    return scan


# -- the checks in one file ------------------------------------------------------------------


def _arch(node: ast.AST) -> str | None:
    """The architecture an SM term of ``sm_names`` tests (the shapes ``sm_terms`` matches)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args and not node.keywords:
        match = HELPER_NAME.match(node.func.id)
        return match.group(1) if match else None
    if isinstance(node, ast.Name):
        match = FLAG_NAME.match(node.id)
        return match.group(1) if match else None
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == PLATFORM_CALL
        and not node.value.args
    ):
        match = PLATFORM_ATTR.match(node.attr)
        return match.group(1) if match else None
    return None


def _ints(node: ast.AST) -> list[Any] | None:
    """The value of an int, or a tuple/list/set of ints or of int tuples; None otherwise."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        if all(isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts):
            return [tuple(e.value for e in node.elts)]  # type: ignore[attr-defined]
        items = [_ints(e) for e in node.elts]
        if items and all(i is not None and len(i) == 1 for i in items):
            return [i[0] for i in items]  # type: ignore[index]
    return None


def _names_capability(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        name = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else None
        if name is not None and any(word in name.lower() for word in _CAPABILITY_WORDS):
            return True
    return False


def _raw_admits_sm12x(node: ast.Compare) -> bool | None:
    """None: not a raw capability comparison.  Else whether it admits SM12x: it names 12 (12,
    120, 121, (12, x)), or is a threshold (``>= (9, 0)``: SM12x is above every one sglang
    uses).  ``==``, ``!=``, ``in`` without 12 single out other GPUs: a gate."""
    operands = [node.left, *node.comparators]
    for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
        for probe, consts in ((left, right), (right, left)):
            values = _ints(consts)
            if values is None or not _names_capability(probe):
                continue
            flat = [v[0] if isinstance(v, tuple) and v else v for v in values]
            return any(v in (12, 120, 121) for v in flat) or isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE))
    return None


def _capability_lookup(node: ast.AST) -> bool:
    """``TABLE[get_device_capability()]`` or ``TABLE.get((get_device_capability(), tp))``: a
    table keyed by the GPU's capability, which admits only the GPUs it lists."""
    if isinstance(node, ast.Subscript):
        keys: list[ast.AST] = [node.slice]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        keys = list(node.args[:1])
    else:
        return False
    return any(
        isinstance(sub, ast.Call) and _called(sub) == "get_device_capability" for key in keys for sub in ast.walk(key)
    )


def _called(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _terms(node: ast.AST) -> tuple[frozenset[str], bool]:
    """The architectures the SM checks in ``node`` name, and whether any of them admits SM12x."""
    archs: set[str] = set()
    admits = False
    for sub in ast.walk(node):
        arch = _arch(sub)
        if arch is not None:
            archs.add(arch)
            admits |= arch in SM12X_ARCHS
        elif _capability_lookup(sub):
            archs.add(RAW)
        elif isinstance(sub, ast.Compare):
            raw = _raw_admits_sm12x(sub)
            if raw is not None:
                archs.add(RAW)
                admits |= raw
    return frozenset(archs), admits


class _Reader:
    def __init__(self, rel: str, data: bytes) -> None:
        self.rel = rel
        self.data = data
        self.starts = [0, *itertools.accumulate(len(line) for line in data.splitlines(keepends=True))]
        self.checks: list[_Check] = []

    def source(self, node: ast.AST) -> str:
        start = self.starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
        end = self.starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
        return self.data[start:end].decode("utf-8", "replace")

    def visit(self, body: list[ast.stmt], function: str, in_function: bool, within: str = "") -> None:
        """Every statement of ``body``; ``function`` is the qualified name so far (a class's
        name in its body), ``within`` the tests of the ``if``s around it."""
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{function}.{stmt.name}" if function else stmt.name
                is_function = in_function or not isinstance(stmt, ast.ClassDef)
                self.visit(stmt.body, name, is_function)
                continue
            for test, governs in self._tests(stmt, in_function):
                self._check(test, governs, function or "<module>", within)
            inner = f"{within} {self.source(stmt.test)}" if isinstance(stmt, (ast.If, ast.While)) else within
            for child in _blocks(stmt):
                self.visit(child, function, in_function, inner)

    def _tests(self, stmt: ast.stmt, in_function: bool) -> Iterator[tuple[ast.AST, ast.stmt]]:
        """The expressions of ``stmt`` that decide something, and what each governs."""
        if isinstance(stmt, (ast.If, ast.While, ast.Assert)):
            yield stmt.test, stmt
        elif isinstance(stmt, (ast.Return, ast.Expr)) and stmt.value is not None:
            yield stmt.value, stmt
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            flag = all(isinstance(t, ast.Name) and FLAG_NAME.match(t.id) for t in targets)
            if in_function or not flag:  # a module's ``_is_sm100_supported = ...`` defines the flag
                yield stmt.value, stmt

    def _check(self, test: ast.AST, governs: ast.stmt, function: str, within: str) -> None:
        text = self.source(test)
        if not any(word in text for word in _SM_WORDS):
            return  # the text first: most statements name no SM term
        archs, admits = _terms(test)
        if not archs or admits:
            return
        if isinstance(governs, (ast.If, ast.While)):  # its test and body, not its ``else``
            statement = " ".join(self.source(s) for s in [governs.test, *governs.body])
        else:
            statement = self.source(governs)
        line, end = test.lineno, test.end_lineno or test.lineno  # type: ignore[attr-defined]
        self.checks.append(_Check(line, end, function, " ".join(text.split()), archs, f"{within} {statement}"))


def _blocks(stmt: ast.stmt) -> Iterator[list[ast.stmt]]:
    for name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for handler in getattr(stmt, "handlers", ()):
        yield handler.body
    for case in getattr(stmt, "cases", ()):
        yield case.body


_DEFINITION = re.compile(rb"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+(\w+)", re.MULTILINE)


@dataclass(frozen=True)
class _Definition:
    qualname: str
    line: int  # of the ``def`` (1-based)
    indent: int
    is_function: bool
    within_function: bool


def _definitions(data: bytes) -> list[_Definition]:
    """Every ``def`` and ``class`` of a file, by its lines (no parsing), with its qualified name."""
    found: list[_Definition] = []
    stack: list[_Definition] = []
    line, last = 1, 0
    for match in _DEFINITION.finditer(data):
        line += data.count(b"\n", last, match.start())
        last = match.start()
        indent = len(match.group(1).expandtabs())
        while stack and stack[-1].indent >= indent:
            stack.pop()
        name = match.group(3).decode("ascii", "replace")
        qualname = ".".join([*(d.qualname.rsplit(".", 1)[-1] for d in stack), name])
        within = any(d.is_function for d in stack)
        definition = _Definition(qualname, line, indent, match.group(2) == b"def", within)
        found.append(definition)
        stack.append(definition)
    return found


def _block(lines: list[bytes], definition: _Definition) -> bytes:
    """The source of one definition: its line and what is indented under it (or continues it)."""
    end = definition.line
    while end < len(lines):
        text = lines[end]
        stripped = text.strip()
        code = stripped and not stripped.startswith((b"#", b")", b"]"))
        if code and len(text) - len(text.lstrip()) <= definition.indent:
            break
        end += 1
    return b"".join(lines[definition.line - 1 : end])


def _parts(rel: str, data: bytes) -> list[tuple[bytes, int, str, bool]]:
    """What of a file the sweep parses: (source, first line, qualified name around it, inside a
    function).  A module on the path whole; elsewhere each definition whose name is on the path."""
    if _module_on_path(rel):
        return [(data, 1, "", False)]
    import textwrap  # here: a trusted tree's verify parses nothing

    lines = data.splitlines(keepends=True)
    parts, covered = [], 0
    for definition in _definitions(data):
        if definition.line <= covered or not on_path(rel, definition.qualname):
            continue
        block = _block(lines, definition)
        covered = definition.line + block.count(b"\n") - 1
        outer = definition.qualname.rpartition(".")[0]
        dedented = textwrap.dedent(block.decode("utf-8", "replace")).encode()
        parts.append((dedented, definition.line, outer, definition.within_function))
    return parts


def checks_in(rel: str, data: bytes) -> list[_Check] | str:
    """The SM checks that do not admit SM12x in what of a file is on the path (``_parts``), or
    why the file cannot be read.  A part that does not parse alone (a string at column 0
    inside a function, say) means parsing the whole file."""
    checks: list[_Check] = []
    for source, first, outer, within_function in _parts(rel, data):
        try:
            module = ast.parse(source, filename=rel)
        except (SyntaxError, ValueError):
            return _whole(rel, data)
        reader = _Reader(rel, source)
        reader.visit(module.body, outer, within_function)
        checks += [replace(c, line=c.line + first - 1, end_line=c.end_line + first - 1) for c in reader.checks]
    return checks


def _whole(rel: str, data: bytes) -> list[_Check] | str:
    """Every SM check of the whole file that does not admit SM12x, or why it cannot be read."""
    try:
        module = ast.parse(data, filename=rel)
    except SyntaxError as exc:
        return f"sglang/{rel}:{exc.lineno} does not parse ({exc.msg}): not swept for SM checks"
    except ValueError as exc:  # null bytes
        return f"sglang/{rel} cannot be read as Python source ({exc}): not swept for SM checks"
    reader = _Reader(rel, data)
    reader.visit(module.body, "", False)
    return reader.checks


def _defines_on_path(rel: str, data: bytes) -> bool:
    """Whether the file is a module on the path or defines a function (or class) whose name is
    on it (bytes: a method's class is not needed, the patterns match a name's own words)."""
    return _module_on_path(rel) or any(
        on_path(rel, match.group(3).decode("ascii", "replace")) for match in _DEFINITION.finditer(data)
    )


# -- what the patches own, and the verdict ---------------------------------------------------


def _anchored(rel: str, function: str, patch_id: str) -> bool:
    patch = by_id().get(patch_id)
    if patch is None:
        return False
    return any(
        a.kind is Kind.FUNCTION and a.file == rel and function == (f"{a.cls}.{a.name}" if a.cls else a.name)
        for a in patch.anchors
    )


def _owner(rel: str, check: _Check, plan: Plan) -> str | None:
    """The pending patch whose evidence line is in ``check``, inside the patch's anchor."""
    for report in plan.reports:
        if report.file != rel or report.state is not State.PENDING:
            continue
        if any(check.line <= e.line <= check.end_line for e in report.evidence) and _anchored(
            rel, check.function, report.id
        ):
            return report.id
    return None


def _known(rel: str, check: _Check) -> KnownGate | None:
    return next((k for k in KNOWN_GATES if k.matches(rel, check.function, check.archs, check.statement)), None)


@dataclass(frozen=True)
class Verdict:
    """One SM check on the fused path that does not admit SM12x, and why it is (not) reported."""

    check: UnknownCheck
    owner: str | None  # the pending patch that will widen it
    known: KnownGate | None

    @property
    def reported(self) -> bool:
        return self.owner is None and self.known is None


@dataclass
class Sweep:
    unknown: list[UnknownCheck]
    unread: list[str]  # files that could not be parsed, as sentences
    recalled: bool = False  # read from the record apply left, not from the package
    dirs: tuple[str, ...] = ()  # the package's directories, as swept
    kept: tuple[str, ...] = ()  # the files the pre-filter kept

    @property
    def warnings(self) -> list[str]:
        return [c.sentence() for c in self.unknown] + self.unread


def verdicts(files: Mapping[str, bytes], plan: Plan) -> tuple[list[Verdict], list[str]]:
    """Each SM check on the path in the files the pre-filter kept, and the files that do not parse."""
    found: list[Verdict] = []
    unread: list[str] = []
    for rel in sorted(files):
        data = files[rel]
        if not _defines_on_path(rel, data):
            continue
        checks = checks_in(rel, data)
        if isinstance(checks, str):
            unread.append(checks)
            continue
        for check in checks:
            if on_path(rel, check.function):
                shown = UnknownCheck(rel, check.line, check.function, check.expression)
                found.append(Verdict(shown, _owner(rel, check, plan), _known(rel, check)))
    return found, unread


def judge_files(files: Mapping[str, bytes], plan: Plan) -> Sweep:
    """The sweep's verdict on the files the pre-filter kept."""
    found, unread = verdicts(files, plan)
    return Sweep([v.check for v in found if v.reported], unread)


def files_to_judge(tree: SglangTree, plan: Plan, read: Prefetch | None = None) -> tuple[dict[str, bytes], _Scan]:
    """The kept files of ``tree`` as ``plan`` leaves them: a file the plan changes is read as
    changed.  ``read``: the package as a ``Prefetch`` read it."""
    scan = read.result() if read is not None else _scan(tree)
    files = dict(scan.kept)
    for f in plan.files:
        if f.changed and f.updated is not None:
            if prefiltered(f.rel, f.updated):
                files[f.rel] = f.updated
            else:
                files.pop(f.rel, None)
    return files, scan


def sweep(tree: SglangTree, plan: Plan, read: Prefetch | None = None) -> Sweep:
    """Sweep ``tree`` as ``plan`` leaves it."""
    files, scan = files_to_judge(tree, plan, read)
    found = judge_files(files, plan)
    found.dirs, found.kept = tuple(scan.dirs), tuple(sorted(files))
    return found


# -- the record a trusted tree is judged by ----------------------------------------------------


def _seal(data: Mapping[str, Any]) -> str:
    return sha256(json.dumps({k: v for k, v in data.items() if k != "seal"}, sort_keys=True).encode())


def remember(tree: SglangTree, state: StateDir, manifest: Manifest, found: Sweep) -> None:
    """After apply: what the sweep found, and what tells the tree is still as it was swept.
    The directories and the kept files are read again, as the tree stands once written."""
    data: dict[str, Any] = {
        "manifest_seal": manifest.seal,
        "dirs": {rel: os.stat(tree.package_dir / rel).st_mtime_ns for rel in found.dirs},
        "files": {rel: sha256(_read(str(tree.package_dir / rel))) for rel in found.kept},
        "unknown": [asdict(c) for c in found.unknown],
        "unread": found.unread,
    }
    data["seal"] = _seal(data)
    state.write_json(state.sweep_path, data)


def recalled(tree: SglangTree, state: StateDir, manifest: Manifest | None) -> Sweep | None:
    """The recorded sweep of a trusted tree, or None when the tree has to be swept again."""
    if manifest is None:
        return None
    try:
        data = json.loads(state.sweep_path.read_bytes())
        if data.get("seal") != _seal(data) or data["manifest_seal"] != manifest.seal:
            return None
        for rel, mtime in data["dirs"].items():
            if os.stat(tree.package_dir / rel).st_mtime_ns != mtime:
                return None
        for rel, digest in data["files"].items():
            if sha256(_read(str(tree.package_dir / rel))) != digest:
                return None
        unknown = [UnknownCheck(**c) for c in data["unknown"]]
        return Sweep(unknown, list(data["unread"]), True, tuple(data["dirs"]), tuple(data["files"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def sweep_tree(
    tree: SglangTree, plan: Plan, manifest: Manifest | None, trusted: bool, read: Prefetch | None = None
) -> Sweep:
    """The sweep of a tree a command reads: recalled where the tree is trusted and unchanged;
    ``read``: the package as a ``Prefetch`` read it."""
    if plan.refusal:
        return Sweep([], [])
    if trusted:
        found = recalled(tree, StateDir(tree.package_dir), manifest)
        if found is not None:
            return found
    return sweep(tree, plan, read)
