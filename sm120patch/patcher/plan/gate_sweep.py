"""The sweep: every SM check on FlashInfer's allreduce-fusion path in the whole sglang package,
so that a gate the patches do not know (a new one, or one moved to a file they do not read)
is a warning, not a silent "all patches applied".

Each ``.py`` under the package is read; a byte-level pre-filter keeps only files that name an
SM term and the fusion (``fusion_path.SM_BYTES`` / ``FUSION_BYTES``), or sit in a module on
the path; of those, a module on the path is parsed whole, any other only where it defines a
function whose name is on the path (that definition alone), with the standard library's
parser (the patches' libcst costs ~6x as much, and the sweep never rewrites).

An *SM check* is a truth test, a returned, assigned or evaluated value that holds an SM term
of ``sglang/sm_names.py``, a raw capability comparison (``get_device_capability() >= (9, 0)``,
``major == 10``) or a table keyed by the capability.  One is reported when it is on the path
(``fusion_path.ON_PATH``) and:

* it does not admit SM12x (no ``sm120``/``sm121``/``blackwell`` term; a raw comparison that
  singles other GPUs out, a table lookup),
* no patch owns it: in a file a patch will change, the sweep reads the file as apply leaves it
  (the owned clause then has its SM120 term); in a file that stays as it is, a pending patch
  owns the check that holds its evidence line inside its anchor function, and so does a patch
  left out as asked (``--only`` / ``--skip``: ``Plan.skipped``; ``plan/left_out.py`` names
  it as that patch),
* and it is not one of ``fusion_path.KNOWN_GATES``.

A trusted tree (``plan.trust``) is not read again: ``apply`` leaves a record beside its
manifest (``sweep.json``): every directory's inode and ctime (a file added, removed or replaced by
rename changes it), every ``.py``'s inode and ctime (an edit in place changes them, even
one that keeps the mtime), the sha256 of each file the pre-filter kept, and the checks it reported.
While the manifest it was made with is the one there and all of that still holds, verify
uses it; anything else sweeps again.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import json
import operator
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from sm120patch.errors import coded
from sm120patch.patcher.kit.model import Kind, State
from sm120patch.patcher.plan.registry import by_id
from sm120patch.patcher.plan.types import Plan
from sm120patch.patcher.transaction.fsutil import sha256
from sm120patch.patcher.transaction.state_dir import DIRNAME, Manifest, StateDir
from sm120patch.sglang.fusion_path import FUSION_BYTES, KNOWN_GATES, ON_PATH, SM_BYTES, KnownGate
from sm120patch.sglang.sm_names import FLAG_NAME, HELPER_NAME, PLATFORM_ATTR, PLATFORM_CALL, SM12X_ARCHS
from sm120patch.sglang.tree import SglangTree

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
        return coded(
            "unknown-sm-check",
            f"an SM check this tool does not know: sglang/{self.file}:{self.line} {self.function}: {self.expression}",
        )


@dataclass(frozen=True)
class _Check:
    line: int
    end_line: int
    function: str
    expression: str
    archs: frozenset[str]
    statement: str  # the source of the statement the check governs (known-list words)


_ON_PATH = re.compile("|".join(f"(?:{p.pattern.pattern})" for p in ON_PATH))  # one search, not one a row


_CAMEL_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z]+")
#: Words a CamelCase name splits that sglang's snake_case names keep as one.
_ONE_WORD = (("all_reduce", "allreduce"), ("flash_infer", "flashinfer"), ("rms_norm", "rmsnorm"))


def _snake(function: str) -> str:
    """``FlashInferAllReduceFusion.run`` as ``flashinfer_allreduce_fusion.run``: a class is
    on the path by its name's words, as a function is."""
    names = []
    for name in function.split("."):
        snake = name
        if name != name.lower():
            snake = "_".join(word.lower() for word in _CAMEL_WORD.findall(name))
            for split, whole in _ONE_WORD:
                snake = snake.replace(split, whole)
        names.append(snake)
    return ".".join(names)


def on_path(rel: str, function: str) -> bool:
    """Whether a check in ``function`` of module ``rel`` is on the path; a CamelCase class by its
    words where they name the allreduce (``FlashInferAttnBackend`` is attention's)."""
    if _ON_PATH.search(f"{rel}::{function}") is not None:
        return True
    if function == function.lower():
        return False
    snake = _snake(function)
    return "allreduce" in snake and _ON_PATH.search(f"{rel}::{snake}") is not None


def _module_on_path(rel: str) -> bool:
    return on_path(rel, "")


# -- reading ---------------------------------------------------------------------------------


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, os.fstat(fd).st_size + 1)
    finally:
        os.close(fd)


def _walk(package_dir: Path, problems: list[str]) -> Iterator[tuple[str, str, bool]]:
    """(relative path, absolute path, is a directory) of every directory and ``.py`` below.
    What cannot be swept goes to ``problems``, as sentences: a directory that cannot be
    listed, a link to a directory outside the package (Python imports through it; the sweep
    does not leave the package).  A link to a directory of the package is swept there."""
    stack = [("", str(package_dir))]
    inside = os.path.realpath(package_dir) + os.sep
    while stack:
        rel, path = stack.pop()
        yield rel, path, True
        try:
            entries = list(os.scandir(path))
        except FileNotFoundError:
            continue  # removed meanwhile
        except OSError as exc:
            problems.append(f"sglang/{rel or '.'} cannot be listed ({exc.strerror}): not swept for SM checks")
            continue
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            if entry.name in _SKIP_DIRS:
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append((child, entry.path))
            elif entry.is_symlink() and entry.is_dir():
                if not os.path.realpath(entry.path).startswith(inside):
                    problems.append(
                        f"sglang/{child} is a link to a folder outside the package "
                        f"({os.readlink(entry.path)}): not swept for SM checks"
                    )
            elif entry.name.endswith(".py") and entry.is_file():  # a FIFO would block the read
                yield child, entry.path, False


def prefiltered(rel: str, data: bytes) -> bool:
    """Whether ``data`` may hold an SM check on the path (bytes only, no parsing)."""
    return (FUSION_BYTES.search(data) is not None or _module_on_path(rel)) and any(b in data for b in SM_BYTES)


def _identity(st: os.stat_result) -> list[int]:
    """What changes when a file or directory is written, replaced or copied: the inode and the
    ctime (set by the kernel on every write, rename or chmod; ``touch -r``, ``cp -a`` and rsync
    keep an mtime, never a ctime), and the size."""
    return [st.st_ino, st.st_ctime_ns, st.st_size]


@dataclass
class _Scan:
    # what the record looks at again once apply has written (``remember``): each directory (an
    # entry added, removed, renamed) and each .py (a file edited in place)
    dirs: list[str]
    files: list[str]
    kept: dict[str, bytes]  # the files the pre-filter kept
    unreadable: list[str]  # what could not be read, as sentences


class Prefetch:
    """``_scan`` in a helper thread, started before the planning it overlaps: reading ~70 MB
    of sglang waits on the kernel, not on the interpreter, while libcst loads and parses."""

    def __init__(self, tree: SglangTree) -> None:
        import threading  # here: a trusted tree's verify never starts one

        from sm120patch.runner import leave_ctrl_c_to_the_main_thread

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
    scan = _Scan([], [], {}, [])
    for rel, path, is_dir in _walk(tree.package_dir, scan.unreadable):
        if is_dir:
            scan.dirs.append(rel)
            continue
        try:
            data = _read(path)
        except FileNotFoundError:
            continue  # removed meanwhile (or a dangling link): nothing Python would import
        except OSError as exc:  # a gate in it would go unseen: said, not passed over
            scan.unreadable.append(f"sglang/{rel} cannot be read ({exc.strerror}): not swept for SM checks")
            continue
        scan.files.append(rel)
        if prefiltered(rel, data):
            scan.kept[rel] = data
    return scan


# -- the checks in one file ------------------------------------------------------------------


_ALIAS = re.compile(rb"\b(_?is_(?:sm\d+|blackwell)(?:_supported)?)[ \t]+as[ \t]+(\w+)")


def _aliases(data: bytes) -> dict[str, str]:
    """The names a file imports an SM term under (``import is_sm100_supported as _sm100``),
    by the architecture each tests (bytes: an import sits outside the definitions parsed)."""
    found = {}
    for match in _ALIAS.finditer(data):
        term = match.group(1).decode()
        named = (HELPER_NAME if not term.startswith("_") else FLAG_NAME).match(term)
        if named:
            found[match.group(2).decode()] = named.group(1)
    return found


def _arch(node: ast.AST, aliases: Mapping[str, str] | None = None) -> str | None:
    """The architecture an SM term of ``sm_names`` tests (the shapes ``sm_terms`` matches, a
    helper called as a module's attribute, and a name of ``aliases``)."""
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        name = node.func.id if isinstance(node.func, ast.Name) else _attribute_call(node.func)
        match = HELPER_NAME.match(name) if name else None
        if match:
            return match.group(1)
    if isinstance(node, ast.Name):
        match = FLAG_NAME.match(node.id)
        return match.group(1) if match else (aliases or {}).get(node.id)
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


def _attribute_call(func: ast.AST) -> str | None:
    """``utils.is_sm100_supported``: the helper's name, called on a module."""
    if isinstance(func, ast.Attribute) and not (
        isinstance(func.value, ast.Call) and _called(func.value) == PLATFORM_CALL
    ):
        return func.attr
    return None


def _ints(node: ast.AST, members: bool = False) -> list[Any] | None:
    """The value of an int, or a tuple/list/set of ints or of int tuples; None otherwise.
    ``members``: the right of ``in``, where ``(9, 12)`` is two majors, not one capability."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        if all(isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts):
            ints = [e.value for e in node.elts]  # type: ignore[attr-defined]
            return ints if members else [tuple(ints)]
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


_ORDER = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}


def _sm12x_satisfies(op: ast.cmpop, value: Any, sm12x_on_left: bool) -> bool:
    """Whether SM12x (``12``, ``120``, ``(12, 0)`` at the constant's scale) passes ``op``."""
    if isinstance(value, tuple):
        probe: Any = (12, 0)
    elif isinstance(value, int):
        probe = 120 if value >= 20 else 12
    else:
        return True
    compare = _ORDER[type(op)]
    return compare(probe, value) if sm12x_on_left else compare(value, probe)


def _raw_admits_sm12x(node: ast.Compare, in_range: bool = False) -> bool | None:
    """None: not a raw capability comparison.  Else whether it admits SM12x: ``==``, ``!=``,
    ``in`` admit it only when they name 12 (12, 120, 121, (12, x)): without it they single
    other GPUs out, a gate.  A threshold alone admits it (``if major < 10: raise`` shuts out
    older GPUs, which way it gates is the statement's); a range (``9 <= major < 11``, or
    ``in_range``: a threshold ``and``-ed with another) is evaluated at SM12x."""
    operands = [node.left, *node.comparators]
    in_range = in_range or len(node.ops) > 1
    verdicts: list[bool] = []
    for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
        for probe, consts, probe_left in ((left, right, True), (right, left, False)):
            values = _ints(consts, members=isinstance(op, (ast.In, ast.NotIn)) and probe_left)
            if values is None or not _names_capability(probe):
                continue
            if isinstance(op, tuple(_ORDER)) and len(values) == 1:
                verdicts.append(not in_range or _sm12x_satisfies(op, values[0], probe_left))
            else:
                flat = [v[0] if isinstance(v, tuple) and v else v for v in values]
                verdicts.append(any(v in (12, 120, 121) for v in flat) or isinstance(op, tuple(_ORDER)))
            break
    return all(verdicts) if verdicts else None


def _is_threshold(node: ast.Compare) -> bool:
    """``major >= 9``: one ordering comparison of the capability with a constant."""
    return (
        len(node.ops) == 1
        and isinstance(node.ops[0], tuple(_ORDER))
        and any(
            _ints(c) is not None and _names_capability(p)
            for p, c in ((node.left, node.comparators[0]), (node.comparators[0], node.left))
        )
    )


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


def _terms(node: ast.AST, aliases: Mapping[str, str] | None = None) -> tuple[frozenset[str], bool]:
    """The architectures the SM checks in ``node`` name, and whether it admits SM12x: a term
    that names SM12x anywhere (``is_sm100() and not is_sm120()`` is deliberate), or the
    checks' value on SM12x (``_on_sm12x``) is true."""
    archs: set[str] = set()
    names_sm12x = False
    for sub in ast.walk(node):
        arch = _arch(sub, aliases)
        if arch is not None:
            archs.add(arch)
            names_sm12x |= arch in SM12X_ARCHS
        elif _capability_lookup(sub) or (isinstance(sub, ast.Compare) and _raw_admits_sm12x(sub) is not None):
            archs.add(RAW)
    return frozenset(archs), names_sm12x or _on_sm12x(node, aliases) is True


def _on_sm12x(node: ast.AST, aliases: Mapping[str, str] | None = None, in_range: bool = False) -> bool | None:
    """Whether the SM checks of ``node`` pass on SM12x, None where it holds none.  ``and``
    passes when none of its checks fails (``major >= 9 and major < 11`` does not), ``or``
    when one passes; anything else when one of its checks does."""
    if isinstance(node, ast.BoolOp):
        thresholds = [e for e in node.values if isinstance(e, ast.Compare) and _is_threshold(e)]
        in_range = isinstance(node.op, ast.And) and len(thresholds) > 1
        values = {v for v in (_on_sm12x(e, aliases, in_range) for e in node.values) if v is not None}
        if not values:
            return None
        return False not in values if isinstance(node.op, ast.And) else True in values
    found: bool | None = None
    for sub in ast.walk(node):
        arch = _arch(sub, aliases)
        if arch is not None:
            passes: bool | None = arch in SM12X_ARCHS
        elif _capability_lookup(sub):
            passes = False
        else:
            passes = _raw_admits_sm12x(sub, in_range) if isinstance(sub, ast.Compare) else None
        if passes is not None:
            found = bool(found) or passes
    return found


class _Reader:
    def __init__(self, data: bytes, aliases: Mapping[str, str]) -> None:
        self.data = data
        self.aliases = aliases
        self.words = (*_SM_WORDS, *aliases)
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
        if not any(word in text for word in self.words):
            return  # the text first: most statements name no SM term
        archs, admits = _terms(test, self.aliases)
        if not archs or admits:
            return
        if isinstance(governs, (ast.If, ast.While)):  # its test and body, not its ``else``
            statement = " ".join(self.source(s) for s in [governs.test, *governs.body])
        else:
            statement = self.source(governs)
        line, end = test.lineno, test.end_lineno or test.lineno  # type: ignore[attr-defined]
        self.checks.append(_Check(line, end, function, self._clause(test), archs, f"{within} {statement}"))

    def _clause(self, test: ast.AST) -> str:
        """The SM clause of ``test`` on one line: the conjuncts that test the GPU (through
        ``not``), without the rest of the condition or its comments."""
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        sm = [part for part in parts if _terms(part, self.aliases)[0]] or [test]
        return " and ".join(" ".join(ast.unparse(part).split()) for part in sm)


def _blocks(stmt: ast.stmt) -> Iterator[list[ast.stmt]]:
    """The statements inside ``stmt``: its body, ``else`` and ``finally``, each ``except``'s
    and each ``case``'s (a statement's ``body`` is always a list of statements)."""
    for name in ("body", "orelse", "finalbody"):
        yield getattr(stmt, name, [])
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
    aliases = _aliases(data)
    for source, first, outer, within_function in _parts(rel, data):
        try:
            module = ast.parse(source, filename=rel)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return _whole(rel, data)
        reader = _Reader(source, aliases)
        reader.visit(module.body, outer, within_function)
        checks += [replace(c, line=c.line + first - 1, end_line=c.end_line + first - 1) for c in reader.checks]
    return checks


def _whole(rel: str, data: bytes) -> list[_Check] | str:
    """Every SM check of the whole file that does not admit SM12x, or why it cannot be read."""
    try:
        module = ast.parse(data, filename=rel)
    except SyntaxError as exc:
        return f"sglang/{rel}:{exc.lineno} does not parse ({exc.msg}): not swept for SM checks"
    except (RecursionError, MemoryError):
        return f"sglang/{rel} is nested too deeply to parse: not swept for SM checks"
    except ValueError as exc:  # null bytes
        return f"sglang/{rel} cannot be read as Python source ({exc}): not swept for SM checks"
    reader = _Reader(data, _aliases(data))
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
    """The pending patch whose evidence line is in ``check``, inside the patch's anchor; or the
    patch left out as asked (``--only`` / ``--skip``) whose clause it is: named as that patch
    (``plan.skipped``), never as a check this tool does not know."""
    for report in [*plan.reports, *plan.left_out]:
        if report.file != rel or report.state not in (State.PENDING, State.SKIPPED):
            continue
        if any(check.line <= e.line <= check.end_line for e in report.evidence) and (
            _anchored(rel, check.function, report.id) or report.found_at == f"{rel}:{check.function}"
        ):
            return report.id
    return None


def _known(rel: str, check: _Check, plan: Plan) -> KnownGate | None:
    """The known gate ``check`` is; where a patch found its target by role, a known gate in
    that target is known under the target's new name and module too."""
    places = [(rel, check.function), *_known_as(rel, check.function, plan)]
    return next(
        (k for k in KNOWN_GATES for m, f in places if k.matches(m, f, check.archs, check.statement)),
        None,
    )


def _known_as(rel: str, function: str, plan: Plan) -> list[tuple[str, str]]:
    """Where the known rows kept the function a role find located at ``rel:function``."""
    registry = by_id()
    return [
        (a.file, f"{a.cls}.{a.name}" if a.cls else a.name)
        for report in plan.reports
        if report.found_at == f"{rel}:{function}" and report.id in registry
        for a in registry[report.id].anchors
        if a.kind is Kind.FUNCTION
    ]


@dataclass(frozen=True)
class Verdict:
    """One SM check on the fused path that does not admit SM12x, and why it is (not) reported."""

    check: UnknownCheck
    owner: str | None  # the pending patch that will widen it, or the one left out as asked
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
    files: tuple[str, ...] = ()  # the package's .py files, as swept
    kept: tuple[str, ...] = ()  # the files the pre-filter kept

    @property
    def warnings(self) -> list[str]:
        return [c.sentence() for c in self.unknown] + self.unread

    def as_json(self) -> list[dict[str, Any]]:
        """The ``sm_checks`` of ``--json``: each check no patch owns, as data (the files that
        could not be swept stay sentences of ``warnings``)."""
        return [{**asdict(c), "file": f"sglang/{c.file}"} for c in self.unknown]


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
                found.append(Verdict(shown, _owner(rel, check, plan), _known(rel, check, plan)))
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
    found.unread += scan.unreadable
    found.dirs, found.files, found.kept = tuple(scan.dirs), tuple(scan.files), tuple(sorted(files))
    return found


# -- the record a trusted tree is judged by ----------------------------------------------------


def _seal(data: Mapping[str, Any]) -> str:
    return sha256(json.dumps({k: v for k, v in data.items() if k != "seal"}, sort_keys=True).encode())


def remember(tree: SglangTree, state: StateDir, manifest: Manifest, found: Sweep) -> None:
    """After apply: what the sweep found, and what tells the tree is still as it was swept.
    The directories and files are looked at again, as the tree stands once written."""
    data: dict[str, Any] = {
        "manifest_seal": manifest.seal,
        "dirs": {rel: _identity(os.stat(tree.package_dir / rel)) for rel in found.dirs},
        "identities": {rel: _identity(os.stat(tree.package_dir / rel)) for rel in found.files},
        "files": {rel: sha256(_read(str(tree.package_dir / rel))) for rel in found.kept},
        "unknown": [asdict(c) for c in found.unknown],
        "unread": found.unread,
    }
    data["seal"] = _seal(data)
    with contextlib.suppress(OSError, ValueError):
        if json.loads(state.sweep_path.read_bytes()) == data:
            return  # the record holds this already (an apply asked again): no write
    state.write_json(state.sweep_path, data)


def recalled(tree: SglangTree, state: StateDir, manifest: Manifest | None) -> Sweep | None:
    """The recorded sweep of a trusted tree, or None when the tree has to be swept again."""
    if manifest is None:
        return None
    try:
        data = json.loads(state.sweep_path.read_bytes())
        if data.get("seal") != _seal(data) or data["manifest_seal"] != manifest.seal:
            return None
        for rel, identity in itertools.chain(data["dirs"].items(), data["identities"].items()):
            if _identity(os.stat(tree.package_dir / rel)) != identity:
                return None
        for rel, digest in data["files"].items():
            if sha256(_read(str(tree.package_dir / rel))) != digest:
                return None
        unknown = [UnknownCheck(**c) for c in data["unknown"]]
        return Sweep(
            unknown, list(data["unread"]), True, tuple(data["dirs"]), tuple(data["identities"]), tuple(data["files"])
        )
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
