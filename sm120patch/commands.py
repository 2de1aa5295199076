"""apply / verify / revert / list as plain functions: locate -> plan -> write -> Outcome.

The CLI only parses options and renders an ``Outcome``; tests and the matrix script call
these directly.
"""

from __future__ import annotations

import difflib
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sm120patch import releases
from sm120patch.errors import EnvironmentProblem
from sm120patch.fsutil import remove_stale_temps, sha256, sha256_file
from sm120patch.locate import SglangTree
from sm120patch.registry import Patch, State, all_patches
from sm120patch.state import FileRecord, Manifest, StateDir
from sm120patch.transaction import Entry, commit, recover

if TYPE_CHECKING:
    from sm120patch.plan import Plan

OK, NOT_AS_ASKED, ENVIRONMENT = 0, 1, 2


def make_plan(tree: SglangTree, patches: list[Patch], change: bool) -> Plan:
    """Parse and check the targets.  Imported on use: a revert from saved state compares
    hashes only and never loads libcst."""
    from sm120patch.plan import make_plan as plan

    return plan(tree, patches, change)


@dataclass
class FileStatus:
    rel: str
    sha256: str | None
    record_sha256: str | None
    recorded: str | None  # "patched" / "original" per the manifest, or None

    @property
    def pristine(self) -> bool | None:
        if self.record_sha256 is None:
            return None
        return self.sha256 == self.record_sha256


@dataclass
class Outcome:
    command: str
    tree: SglangTree
    exit_code: int
    headline: str
    plan: Plan | None = None
    messages: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    diff: str = ""
    files: list[FileStatus] = field(default_factory=list)
    state: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # --strict turns these into exit 1
    runtime: dict | None = None  # verify --runtime: what the serving interpreter imported


def _diff(plan_files: list[tuple[str, bytes, bytes]]) -> str:
    chunks: list[str] = []
    for rel, old, new in plan_files:
        chunks.extend(
            difflib.unified_diff(
                old.decode("utf-8", "replace").splitlines(keepends=True),
                new.decode("utf-8", "replace").splitlines(keepends=True),
                f"a/sglang/{rel}",
                f"b/sglang/{rel}",
            )
        )
    return "".join(chunks)


def _file_statuses(tree: SglangTree, rels: list[str], manifest: Manifest | None) -> list[FileStatus]:
    statuses = []
    for rel in rels:
        current = sha256_file(tree.path(rel))
        recorded = None
        if manifest is not None and rel in manifest.files:
            rec = manifest.files[rel]
            recorded = {rec.sha256_after: "patched", rec.sha256_before: "original"}.get(current or "")
        statuses.append(FileStatus(rel, current, tree.record.get(rel), recorded))
    return statuses


def _state_info(state: StateDir, manifest: Manifest | None, tree: SglangTree) -> dict:
    return {
        "dir": str(state.root),
        "present": manifest is not None,
        "sglang_version": manifest.sglang_version if manifest else None,
        "tool_version": manifest.tool_version if manifest else None,
        "stale": bool(manifest and manifest.sglang_version != tree.version),
        "files": sorted(manifest.files) if manifest else [],
        "interrupted": state.journal_path.exists(),
    }


def _fused_path_warnings(tree: SglangTree) -> list[str]:
    """What would keep the fused kernel from running even with every patch applied."""
    warning = releases.flashinfer_warning(tree.flashinfer_facts, tree.version)
    return [warning] if warning else []


def _gpu_note() -> str | None:
    """Whether this host has an SM12x GPU (an image build usually has no GPU at all)."""
    from sm120patch import gpus

    seen = gpus.from_nvidia_smi()
    if not seen.answered:
        return f"no NVIDIA GPU seen ({seen.error}): fine for an image build; the patches act on SM12x hosts"
    if not seen.sm12x:
        shown = "; ".join(g.describe() for g in seen.gpus) or "none"
        return f"no SM12x GPU seen by nvidia-smi ({shown}): the patches change nothing at run time here"
    return None


def _plan_problems(plan: Plan) -> str | None:
    if plan.refusal:
        return plan.refusal
    if plan.drift:
        return "; ".join(f"{r.file}: {r.patch.id}: {r.detail}" for r in plan.drift)
    return None


def _remove_temps(state: StateDir, targets: list[Path]) -> None:
    """Temp files of a killed run: beside the targets and anywhere in the state dir."""
    dirs = [Path(os.path.realpath(p)).parent for p in targets]
    dirs += [d for d in state.root.rglob("*") if d.is_dir()] + [state.root]
    remove_stale_temps(d for d in dirs if d.is_dir())


def _still_current(plan: Plan) -> bool:
    """Whether every planned file still has the bytes the plan was made from."""
    for f in plan.files:
        try:
            current = f.path.read_bytes() if f.path.is_file() else None
        except OSError:
            return False
        if current != f.original:
            return False
    return True


def _check_writable(paths: list[Path]) -> None:
    """Prove each file can be replaced before replacing any: open it for appending (writes
    nothing) and create a temp file beside it.  ``os.access`` would say yes to root even
    for an immutable file or a read-only mount."""
    for path in paths:
        real = Path(os.path.realpath(path))
        try:
            with open(real, "ab"):
                pass
            with tempfile.NamedTemporaryFile(dir=real.parent, prefix=".sm120patch-probe-"):
                pass
        except OSError as exc:
            raise EnvironmentProblem(
                f"{real}: cannot be replaced ({exc.strerror}); no sglang file was changed. Run "
                "as the user that owns the sglang install, or make it writable"
            ) from exc


def verify(
    tree: SglangTree, patches: list[Patch] | None = None, runtime_timeout: float | None = None
) -> Outcome:
    """Check every patch; with ``runtime_timeout``, also import the patched modules in the
    serving interpreter (``verify --runtime``)."""
    outcome = _verify_static(tree, patches)
    if runtime_timeout is not None and outcome.plan is not None and not outcome.plan.refusal:
        _runtime(outcome, runtime_timeout)
    return outcome


def _runtime(outcome: Outcome, timeout: float) -> None:
    from sm120patch import runtime

    tree, plan = outcome.tree, outcome.plan
    assert plan is not None
    python = tree.python or sys.executable
    rels = [f.rel for f in plan.files if f.original is not None]
    data = runtime.check(tree, rels, python, timeout)
    outcome.runtime = data
    torch = data.get("torch") or {}
    if not torch.get("ok"):
        outcome.exit_code = ENVIRONMENT
        outcome.headline = (
            f"torch does not import in {python} ({torch.get('error')}): the runtime check needs "
            "the interpreter that serves sglang (--python)"
        )
        return
    package = data.get("sglang") or {}
    if not package.get("ok"):
        outcome.exit_code = NOT_AS_ASKED
        outcome.headline = (
            f"sglang does not import in {python}: {package.get('error')} (is this the "
            "interpreter that serves sglang, with its dependencies?)"
        )
        return
    broken = [m for m in data["modules"] if not m["ok"]]
    probe = data.get("probe") or {}
    if broken or not probe.get("ok"):
        outcome.exit_code = NOT_AS_ASKED
        first = broken[0] if broken else None
        outcome.headline = (
            f"the patched tree does not import in {python}: {first['module']}: {first['error']}"
            if first
            else f"the release's SM120 probe failed in {python}: {probe.get('error')}"
        )
        return
    where = f"cc {'.'.join(map(str, torch['capability']))}" if torch.get("capability") else "no CUDA GPU visible to torch"
    branch = "takes" if probe["value"] else "does not take"
    outcome.messages.append(
        f"runtime: {probe['expression']} = {probe['value']} in {python} ({where}): this host "
        f"{branch} the SM12x branches; every patched module imports"
    )


def _verify_static(tree: SglangTree, patches: list[Patch] | None = None) -> Outcome:
    patches = list(patches or all_patches())
    state = StateDir(tree.package_dir)
    manifest = state.load()
    plan = make_plan(tree, patches, change=False)
    outcome = Outcome("verify", tree, OK, "", plan, state=_state_info(state, manifest, tree))
    rels = [f.rel for f in plan.files if f.original is not None]
    outcome.files = _file_statuses(tree, rels, manifest)
    if outcome.state["interrupted"]:
        outcome.messages.append(
            f"an apply/revert was interrupted ({state.journal_path}); the next "
            "`sm120patch apply` or `revert` finishes it"
        )
    if plan.refusal:
        outcome.exit_code, outcome.headline = NOT_AS_ASKED, plan.refusal
        return outcome
    states = {r.state for r in plan.reports}
    pending_files = {r.file for r in plan.reports if r.state is State.PENDING}
    pristine = {f.rel for f in outcome.files if f.pristine}
    if manifest is not None and manifest.sglang_version != tree.version:
        outcome.messages.append(
            f"the saved state is from sglang {manifest.sglang_version}, but {tree.version} is "
            "installed: an upgrade or reinstall replaced the patched files (apply sets the old "
            "state aside)"
        )
    if State.DRIFT in states:
        outcome.exit_code = NOT_AS_ASKED
        outcome.headline = "drift: the code is not what the patches know; see the details"
    elif pending_files and pending_files <= pristine:
        outcome.exit_code = NOT_AS_ASKED
        outcome.headline = (
            f"the files are the pristine sglang {tree.version} release files again (RECORD "
            "hashes match): sglang was reinstalled or upgraded. Run `sm120patch apply`."
        )
    elif pending_files:
        outcome.exit_code = NOT_AS_ASKED
        outcome.headline = "not patched: run `sm120patch apply`"
    else:
        outcome.headline = "all patches applied"
    outcome.warnings = _fused_path_warnings(tree)
    return outcome


def list_patches(tree: SglangTree) -> Outcome:
    plan = make_plan(tree, list(all_patches()), change=False)
    return Outcome("list", tree, OK, plan.refusal or f"{len(all_patches())} patches", plan)


def apply(
    tree: SglangTree,
    patches: list[Patch],
    dry_run: bool = False,
    notes: list[str] | None = None,
    strict: bool = False,
) -> Outcome:
    """Patch the tree.  ``strict``: a warning about the fused path (FlashInfer without the
    SM12x kernel) refuses the change instead, for image builds."""
    state = StateDir(tree.package_dir)
    outcome = Outcome("apply", tree, OK, "", messages=list(notes or []))
    outcome.warnings = _fused_path_warnings(tree)
    note = _gpu_note()
    if note:
        outcome.messages.append(note)
    plan = make_plan(tree, patches, change=True)
    interrupted = state.journal_path.exists()
    if strict and outcome.warnings and not dry_run and not _plan_problems(plan):
        _finish_plan(outcome, plan, state, dry_run=True)
        outcome.diff = ""
        outcome.exit_code = NOT_AS_ASKED
        outcome.headline = (
            f"--strict: nothing was written: {len(outcome.warnings)} warning(s) about the fused "
            "path (above) would make the patches useless on SM12x"
        )
        return outcome
    if dry_run or (not plan.changes and not interrupted) or _plan_problems(plan):
        return _finish_plan(outcome, plan, state, dry_run)
    with state.lock():
        recovered = recover(state)
        if recovered:
            outcome.messages.append(recovered)
        _remove_temps(state, [f.path for f in plan.files])
        if recovered or not _still_current(plan):
            # Another run changed the tree while we waited for the lock: plan again.
            plan = make_plan(tree, patches, change=True)
        if not plan.changes or _plan_problems(plan):
            return _finish_plan(outcome, plan, state, dry_run)
        _check_writable([f.path for f in plan.changes])
        manifest = state.load()
        if manifest is not None and manifest.sglang_version != tree.version:
            aside = state.set_aside(manifest.sglang_version or "unknown")
            outcome.messages.append(
                f"the saved state was for sglang {manifest.sglang_version}; {tree.version} is "
                f"installed now. Old state and backups kept in {aside}"
            )
            manifest = None
        manifest = manifest or Manifest(tree.version, str(tree.package_dir))
        try:
            entries = _stage(state, plan, manifest)
        except OSError as exc:
            shutil.rmtree(state.root / "staged", ignore_errors=True)
            raise EnvironmentProblem(
                f"cannot write backups into {state.root} ({exc.strerror}); no sglang file was changed"
            ) from exc
        commit(state, entries, manifest, "apply")
        outcome.written = [e.rel for e in entries]
        outcome.diff = _diff([(f.rel, f.original, f.updated) for f in plan.changes])  # type: ignore[misc]
        return _finish_plan(outcome, plan, state, dry_run)


def _stage(state: StateDir, plan: Plan, manifest: Manifest) -> list[Entry]:
    """Back up each original (first apply only) and stage each new content, durably."""
    entries = []
    for f in plan.changes:
        assert f.original is not None and f.updated is not None
        before, after = sha256(f.original), sha256(f.updated)
        record = manifest.files.get(f.rel)
        if record is None or record.sha256_before != before and record.sha256_after != before:
            # First time this file is patched, or it was edited by hand since: back up what
            # is there now, and keep the earlier backup aside rather than overwrite it.
            if record is not None:
                state.keep_aside(f"superseded-{f.rel.replace('/', '_')}", state.backup_path(f.rel))
            state.put(state.backup_path(f.rel), f.original)
            record = FileRecord(before, after, [], f"backups/{f.rel}")
        state.put(state.staged_path(f.rel), f.updated)
        applied_here = [r.patch.id for r in f.reports if r.state is State.PENDING]
        record.sha256_after = after
        record.patches = sorted(set(record.patches) | set(applied_here))
        manifest.files[f.rel] = record
        entries.append(Entry(f.rel, str(f.path), before, after, f"staged/{f.rel}"))
    return entries


def _finish_plan(outcome: Outcome, plan: Plan, state: StateDir, dry_run: bool) -> Outcome:
    tree = outcome.tree
    outcome.plan = plan
    manifest = state.load()
    outcome.state = _state_info(state, manifest, tree)
    outcome.files = _file_statuses(tree, [f.rel for f in plan.files if f.original is not None], manifest)
    problem = _plan_problems(plan)
    if problem:
        outcome.exit_code = NOT_AS_ASKED
        release = f"sglang {tree.version}" if tree.version else "this sglang"
        outcome.headline = plan.refusal or (
            f"drift in {release}, nothing was written: "
            + "; ".join(f"sglang/{r.file}: {r.patch.id}: {r.detail}" for r in plan.drift)
        )
        return outcome
    if dry_run:
        outcome.diff = _diff([(f.rel, f.original, f.updated) for f in plan.changes])  # type: ignore[misc]
        outcome.headline = (
            f"dry run: would change {len(plan.changes)} file(s); nothing written"
            if plan.changes
            else "dry run: nothing to change"
        )
    elif outcome.written:
        outcome.headline = f"patched {len(outcome.written)} file(s); backups in {state.root}"
    else:
        outcome.headline = "already applied: nothing to change"
    return outcome


def revert(tree: SglangTree, force: bool = False, dry_run: bool = False) -> Outcome:
    state = StateDir(tree.package_dir)
    outcome = Outcome("revert", tree, OK, "")
    if not state.exists():
        return _revert_without_state(outcome, state)
    with state.lock():
        recovered = recover(state)
        if recovered:
            outcome.messages.append(recovered)
        manifest = state.load()
        if manifest is None:
            return _revert_without_state(outcome, state)
        _remove_temps(state, [tree.path(rel) for rel in manifest.files])
        outcome.state = _state_info(state, manifest, tree)
        statuses = _file_statuses(tree, sorted(manifest.files), manifest)
        outcome.files = statuses
        if manifest.sglang_version != tree.version:
            if all(s.pristine for s in statuses):
                if not dry_run:
                    aside = state.set_aside(manifest.sglang_version or "unknown")
                    outcome.messages.append(f"old state kept in {aside}")
                outcome.headline = (
                    f"nothing to revert: the saved state is from sglang {manifest.sglang_version} "
                    f"and the installed {tree.version} files are pristine (RECORD)"
                )
                return outcome
            outcome.exit_code = NOT_AS_ASKED
            outcome.headline = (
                f"the saved state is from sglang {manifest.sglang_version} but {tree.version} is "
                "installed and its files are not pristine; restore them with `pip install "
                f"--force-reinstall --no-deps sglang=={tree.version}`"
            )
            return outcome
        changed = [s for s in statuses if s.recorded is None]
        if changed and not force:
            outcome.exit_code = NOT_AS_ASKED
            outcome.headline = (
                "refusing to revert: changed since apply (hash differs from the patched one): "
                + ", ".join(s.rel for s in changed)
                + ". Nothing was written. --force restores the originals anyway (the changed "
                "files are kept aside)."
            )
            return outcome
        entries, diffs = [], []
        for status in statuses:
            record = manifest.files[status.rel]
            if status.sha256 == record.sha256_before:
                continue
            backup = state.root / record.backup
            data = backup.read_bytes() if backup.is_file() else b""
            if sha256(data) != record.sha256_before:
                raise EnvironmentProblem(
                    f"backup {backup} is missing or damaged; nothing was written. Reinstall "
                    f"sglang to restore: pip install --force-reinstall --no-deps sglang=={tree.version}"
                )
            path = tree.path(status.rel)
            diffs.append((status.rel, path.read_bytes(), data))
            if status.recorded is None and not dry_run:  # --force: keep what we overwrite
                aside = state.root / "stale-overwritten" / status.rel
                try:
                    state.put(aside, path.read_bytes())
                except OSError as exc:
                    raise EnvironmentProblem(
                        f"cannot keep the changed {status.rel} aside ({exc.strerror}); nothing was written"
                    ) from exc
                outcome.messages.append(f"kept the changed {status.rel} as {aside}")
            entries.append(Entry(status.rel, str(path), status.sha256 or "", record.sha256_before, record.backup))
        outcome.diff = _diff(diffs)
        if dry_run:
            outcome.headline = f"dry run: would restore {len(entries)} file(s); nothing written"
            return outcome
        _check_writable([Path(e.path) for e in entries])
        commit(state, entries, None, "revert")
        outcome.written = [e.rel for e in entries]
        outcome.files = _file_statuses(tree, sorted(manifest.files), None)
        outcome.state = _state_info(state, None, tree)
        outcome.headline = f"restored {len(entries)} file(s) byte for byte; state removed"
        return outcome


def _revert_without_state(outcome: Outcome, state: StateDir) -> Outcome:
    tree = outcome.tree
    plan = make_plan(tree, list(all_patches()), change=False)
    rels = [f.rel for f in plan.files if f.original is not None]
    outcome.plan = plan
    outcome.files = _file_statuses(tree, rels, None)
    outcome.state = _state_info(state, None, tree)
    modified = [f.rel for f in outcome.files if f.pristine is False]
    if modified:
        outcome.exit_code = NOT_AS_ASKED
        outcome.headline = (
            f"no saved state in {state.root}, but {', '.join(modified)} differ from the release "
            f"(RECORD); sm120patch did not write them. Restore with `pip install "
            f"--force-reinstall --no-deps sglang=={tree.version}`"
        )
    else:
        outcome.headline = "nothing to revert: no saved state, files as released"
    return outcome
