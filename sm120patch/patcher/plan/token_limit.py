"""The fusion token limit an apply was asked for (``--fuse-up-to N`` or ``measured``), and
where it came from: carried in the manifest, so verify can name it and a plain apply keeps it."""

from __future__ import annotations

import socket
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan.types import PatchReport
from sm120patch.patcher.transaction.identity import same_tree
from sm120patch.patcher.transaction.state_dir import Manifest, StateDir
from sm120patch.sglang.layout import GATE, files_keeping
from sm120patch.sglang.tree import SglangTree

GATE_FILES = files_keeping(GATE)  # the gate's module, newest layout first

PATCH_ID = "fusion-token-limit"
LIMIT_SITE = "FUSE_ALLREDUCE_MAX_BATCH_SIZE"  # the report's ``where`` when the release has the limit

GIVEN = "given"  # --fuse-up-to N
MEASURED = "measured"  # --fuse-up-to measured: the crossover of the last bench on this host
SGLANG = "sglang"  # --fuse-up-to sglang: back to the release's own limit, without a revert


@dataclass(frozen=True)
class LimitAsk:
    """A fusion token limit and its source; for a measured one, the bench that measured it."""

    limit: int
    source: str = GIVEN
    host: str | None = None
    tp: int | None = None
    gpus: tuple[str, ...] = ()
    date: str | None = None
    release: str | None = None
    baseline: str | None = None  # what fusion was measured against (the crossover's ``against``)
    indicative: bool = False  # that baseline was stand-ins, not sglang's own code

    def describe(self) -> str:
        """``limit 512, measured by bench on gpu7 at TP 2 on 2026-12-03 against sglang's unfused
        path`` / ``limit 512, given as --fuse-up-to 512`` / ``limit 2048, sglang's own``."""
        if self.source == MEASURED:
            said = f"limit {self.limit}, measured by bench on {self.host} at TP {self.tp} on {self.date}"
            if self.baseline:
                said += f" against {self.baseline}{' (indicative only)' if self.indicative else ''}"
            return said
        if self.source == SGLANG:
            return f"limit {self.limit}, sglang's own"
        return f"limit {self.limit}, given as --fuse-up-to {self.limit}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = list(self.gpus)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LimitAsk | None:
        """None when ``data`` is not what ``to_json`` wrote (the ask is then unknown)."""
        try:
            limit = data["limit"]
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                return None
            return cls(
                limit,
                str(data.get("source", GIVEN)),
                data.get("host"),
                data.get("tp"),
                tuple(data.get("gpus") or ()),
                data.get("date"),
                data.get("release"),
                data.get("baseline"),
                bool(data.get("indicative", False)),
            )
        except (KeyError, TypeError, ValueError):
            return None


def recorded(manifest: Manifest | None, tree: SglangTree) -> LimitAsk | None:
    """The limit the last apply of this very tree was asked for, if any (a state is this tree's
    by its version or by the files apply wrote: a moved version string keeps the record)."""
    if manifest is None or not manifest.token_limit or not same_tree(tree, manifest):
        return None
    return LimitAsk.from_json(manifest.token_limit)


def limit_note(reports: list[PatchReport], manifest: Manifest | None, tree: SglangTree) -> str | None:
    """The fusion token limit in force and where it came from, as verify and doctor say it."""
    report = next((r for r in reports if r.id == PATCH_ID), None)
    if report is None or report.state is State.REFUSED:
        return None
    asked = recorded(manifest, tree)
    if asked is None:  # sglang's own, or one no apply recorded: the patch's own words name it
        in_force = report.state is State.NOT_NEEDED and report.where == LIMIT_SITE
        return report.detail if in_force else None
    if report.state is State.APPLIED:
        return f"fusion token limit in force: {asked.describe()}"
    return (
        f"fusion token limit asked by the last apply: {asked.describe()}; "
        f"the code: {report.state.value}: {report.detail}"
    )


def gate_rel(tree: SglangTree, manifest: Manifest | None = None) -> str:
    """The gate's module in this tree (where the limit lives): where the last apply found the
    limit (a role find, in a release that moved it), else the newest layout that exists."""
    return recorded_rel(manifest) or next((rel for rel in GATE_FILES if tree.exists(rel)), GATE_FILES[-1])


def recorded_rel(manifest: Manifest | None) -> str | None:
    """The module the last apply found the token limit in, as its manifest records it."""
    for rel, checked in (manifest.checked if manifest else {}).items():
        if any(report.get("id") == PATCH_ID for report in checked.get("reports", ())):
            return rel
    return None


def _gate_source(tree: SglangTree, shipped: bool) -> bytes | None:
    """The gate module's bytes as sglang ships them (``shipped``: the backup where the module
    was patched) or as they are now; None where it cannot be read."""
    state = StateDir(tree.package_dir)
    manifest = state.load()
    rel = gate_rel(tree, manifest)
    kept = manifest if shipped else None
    path = state.root / kept.files[rel].backup if kept and rel in kept.files else tree.path(rel)
    try:
        return path.read_bytes()
    except OSError:
        return None


def sglang_sites(tree: SglangTree, shipped: bool = True) -> list[Any] | None:
    """The token limit's sites (``fusion_token_limit.Site``) as sglang ships them in this tree
    (``shipped``: read from the backup where the gate's module was patched, else from the file)
    or as they are in force (the file); None where the release has none or the file cannot be
    read (the plan then says what is wrong)."""
    import libcst as cst

    from sm120patch.patcher.patches.fusion_token_limit import limit_sites

    source = _gate_source(tree, shipped)
    try:
        found = limit_sites(cst.parse_module(source)) if source is not None else None
    except cst.ParserSyntaxError:
        return None
    if found is None or isinstance(found, str) or not found[0]:
        return None
    return list(found[0])


#: The gate that also compares the batch with a literal of its own (0.5.4 - 0.5.7's method,
#: the patch's ``LITERAL_GATES``) and the batch it compares, for the reader below; a test holds
#: them equal to the patch's.
LITERAL_GATE = ("CommunicateWithAllReduceAndLayerNormFn", "_gather_hidden_states_and_residual")
BATCH = frozenset({"batch_size", "hidden_states.shape[0]"})


def limit_in(source: bytes) -> int | None:
    """The largest batch the gate module ``source`` lets through, read with the standard
    library's ``ast`` (the patch's sites by libcst: the same values, a test says so), so doctor
    and ``verify --json`` on a trusted tree load no libcst; None where there is no limit, it is
    not one integer, or the source does not parse."""
    import ast

    try:
        module = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None

    def at_import(body: list[ast.stmt]) -> list[ast.stmt]:  # as cst_helpers.module_statements
        found = []
        for stmt in body:
            found.append(stmt)
            if isinstance(stmt, ast.If):
                found += at_import(stmt.body) + at_import(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                handlers = [s for h in stmt.handlers for s in h.body]
                found += at_import(stmt.body + handlers + stmt.orelse + stmt.finalbody)
        return found

    def value(node: ast.expr | None) -> int | None:
        return node.value if isinstance(node, ast.Constant) and type(node.value) is int else None

    def assigns(stmt: ast.Assign | ast.AnnAssign) -> bool:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return any(isinstance(t, ast.Name) and t.id == LIMIT_SITE for t in targets)

    assignments = [s for s in at_import(module.body) if isinstance(s, (ast.Assign, ast.AnnAssign))]
    values = [value(stmt.value) for stmt in assignments if assigns(stmt)]
    if len(values) > 1 or None in values:
        return None
    for cls in (s for s in module.body if isinstance(s, ast.ClassDef) and s.name == LITERAL_GATE[0]):
        for gate in (s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == LITERAL_GATE[1]):
            for node in (n for n in ast.walk(gate) if isinstance(n, ast.Compare)):
                left = node.left
                for op, right in zip(node.ops, node.comparators, strict=True):
                    if isinstance(op, ast.LtE) and value(right) is not None and ast.unparse(left) in BATCH:
                        values.append(value(right))
                    left = right
    found = [v for v in values if v is not None]
    return min(found) if found else None


def sglang_limit(tree: SglangTree, shipped: bool = True) -> int | None:
    """The limit as sglang ships it in this tree, or (``shipped`` False) the one in force in
    its files now (None: the release has none)."""
    source = _gate_source(tree, shipped)
    return limit_in(source) if source is not None else None


def mismatch(tree: SglangTree, facts: dict, tp: int | None, gpus: list[str] | None = None) -> str | None:
    """Why a saved result is not of this host, release, install, TP or GPU set (one clause), or None.
    ``gpus``: this host's GPU names (None where nvidia-smi did not answer: not compared)."""
    host = socket.gethostname()
    if facts.get("host") != host:
        return f"was measured on {facts.get('host')}, not on this host ({host})"
    if not tree.same_release(facts.get("release")):
        return f"was measured with sglang {facts.get('release')}, not {tree.version}"
    if tp is not None and facts.get("tp") != tp:
        return f"was measured at TP {facts.get('tp')}, not TP {tp}"
    fused_by, now_by = facts.get("flashinfer"), tree.flashinfer
    if fused_by and now_by and fused_by != now_by:
        return f"was measured with FlashInfer {fused_by}, not {now_by} (installed beside sglang now)"
    then = facts.get("gate_record_sha256")
    now = tree.record.sha256(gate_rel(tree))
    if then and now and then != now:
        return "is older than the installed sglang files (RECORD lists other hashes: reinstalled since)"
    installed = _installed_at(tree)
    epoch = facts.get("epoch")
    if installed is not None and isinstance(epoch, (int, float)) and epoch < installed:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(installed))
        return f"is older than the installed sglang files (installed {when})"
    measured = Counter(facts.get("gpus") or [])
    if gpus is not None and measured and measured - Counter(gpus):
        here = ", ".join(gpus) or "none"
        return f"was measured on {', '.join(measured.elements())}, not on this host's GPUs ({here})"
    return None


def _installed_at(tree: SglangTree) -> float | None:
    """When pip wrote this install (its RECORD), where it did."""
    if tree.dist_info is None:
        return None
    try:
        return (tree.dist_info / "RECORD").stat().st_mtime
    except OSError:
        return None


def limit_json(tree: SglangTree) -> dict[str, Any] | None:
    """The fusion token limit for verify's and apply's JSON: the value in force in the files
    now, sglang's own (as shipped), and the ask the saved state records (``LimitAsk.to_json``,
    or None); None where the release has no limit or the gate's module cannot be read."""
    from sm120patch.errors import EnvironmentProblem

    try:
        own, now = sglang_limit(tree), sglang_limit(tree, shipped=False)
        asked = recorded(StateDir(tree.package_dir).load(), tree)
    except EnvironmentProblem:  # an unreadable state: the command's own lines say so
        return None
    if own is None and now is None:
        return None
    return {"in_force": now, "sglang": own, "asked": asked.to_json() if asked else None}


def rewritten(reports: list[PatchReport], asked: LimitAsk) -> list[str]:
    """The note of an apply without ``--fuse-up-to`` that wrote the recorded limit again (after
    a reinstall put sglang's back), or none."""
    if not any(r.id == PATCH_ID and r.state is State.PENDING for r in reports):
        return []
    return [
        f"fusion token limit written again as the last apply was asked ({asked.describe()}); "
        "`sm120patch apply --fuse-up-to sglang` puts sglang's own back"
    ]
