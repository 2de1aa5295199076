"""apply / verify / revert / list: short orchestrators over locate -> plan -> write -> Outcome.

The CLI only parses options and renders an ``Outcome``; tests and scripts call these.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sm120patch.errors import EnvironmentProblem, ExitCode
from sm120patch.locate.tree import SglangTree
from sm120patch.patchkit.layout import COMM_FUSION
from sm120patch.patchkit.model import Patch, State
from sm120patch.plan import releases, startup_risk
from sm120patch.plan.registry import all_patches
from sm120patch.plan.trust import record, trusted_plan
from sm120patch.report.outcome import CheckedBy, Command, FileStatus, Outcome, Recorded, StateSummary
from sm120patch.transaction.fsutil import sha256, sha256_file
from sm120patch.transaction.journal import Entry, check_writable, commit, recover, remove_temps, stage, still_current
from sm120patch.transaction.state import Manifest, StateDir

if TYPE_CHECKING:
    from sm120patch.plan.types import Plan


def make_plan(tree: SglangTree, patches: list[Patch], change: bool) -> Plan:
    """Parse and check the targets.  Imported on use: a revert from saved state compares
    hashes only and never loads libcst."""
    from sm120patch.plan.planner import make_plan as plan

    return plan(tree, patches, change)


# --- what every command reports ----------------------------------------------------------


def _plan_changes(plan: Plan) -> list[tuple[str, bytes, bytes]]:
    return [(f.rel, f.original, f.updated) for f in plan.changes if f.original is not None and f.updated is not None]


def file_statuses(
    tree: SglangTree,
    rels: list[str],
    manifest: Manifest | None,
    by_hash: bool = False,
    read: dict[str, bytes] | None = None,
) -> list[FileStatus]:
    """Each file against RECORD and the saved state (``read``: bytes just read, not re-read)."""
    checked_by = CheckedBy.HASH if by_hash else CheckedBy.STRUCTURE
    statuses = []
    for rel in rels:
        current = sha256(read[rel]) if read and rel in read else sha256_file(tree.path(rel))
        recorded = None
        if manifest is not None and rel in manifest.files:
            rec = manifest.files[rel]
            recorded = {rec.sha256_after: Recorded.PATCHED, rec.sha256_before: Recorded.ORIGINAL}.get(current or "")
        statuses.append(FileStatus(rel, current, tree.record.sha256(rel), recorded, checked_by))
    return statuses


def state_summary(state: StateDir, manifest: Manifest | None, tree: SglangTree) -> StateSummary:
    return StateSummary(
        dir=str(state.root),
        present=manifest is not None,
        sglang_version=manifest.sglang_version if manifest else None,
        tool_version=manifest.tool_version if manifest else None,
        stale=bool(manifest and not tree.same_release(manifest.sglang_version)),
        files=sorted(manifest.files) if manifest else [],
        interrupted=state.journal_path.exists(),
    )


#: What "applied" does not say: the gates are open, the host may still stop the kernel.
HOST_HINT = (
    "the gates are open; whether this host runs the fused kernel (FlashInfer's SM12x build, "
    "P2P, multicast, GPUDirect RDMA) is for `sm120patch doctor` to say"
)


def _missing_kernel_effect(tree: SglangTree) -> str | None:
    """What this release does when fusion is on and FlashInfer lacks the SM12x kernel."""
    try:
        effect = startup_risk.missing_kernel_effect(tree.path(COMM_FUSION).read_bytes())
    except OSError:
        return None
    return startup_risk.effect_sentence(tree.version or "(unknown version)", effect) if effect else None


def _fused_path_warnings(tree: SglangTree) -> list[str]:
    """What would keep the fused kernel from running even with every patch applied."""
    warning = releases.flashinfer_warning(tree.flashinfer_facts, tree.version, _missing_kernel_effect(tree))
    return [warning] if warning else []


def missing_kernel_refusal(tree: SglangTree) -> str | None:
    """Why apply must not open the gates: the FlashInfer beside sglang has no SM12x build of
    the trtllm allreduce, so fusion on SM12x would stop the server (0.5.4-0.5.9) or change
    nothing (0.5.10+).  None when FlashInfer has the kernel, or is not installed (then the
    gate cannot open at all: a warning says so)."""
    facts = tree.flashinfer_facts
    if not facts.found or facts.sm12x_kernel is not False:
        return None
    try:
        effect = startup_risk.missing_kernel_effect(tree.path(COMM_FUSION).read_bytes())
    except OSError:
        effect = None
    release = tree.version or "(unknown version)"
    consequence = startup_risk.effect_sentence(release, effect) if effect else "fusion cannot run on SM12x with it"
    name = f"FlashInfer {facts.version}" if facts.version else "the installed FlashInfer"
    return (
        f"refusing to patch, nothing was written: {name} has no SM12x allreduce kernel ({facts.source}), and "
        f"{consequence}; what works is sglang >= {releases.FIRST_PINNING_SM12X} with the FlashInfer it pins, or "
        f"flashinfer-python>={releases.FLASHINFER_SM12X} (untested with older sglang); "
        "--allow-missing-kernel writes anyway"
    )


def _refuse(outcome: Outcome, plan: Plan, state: StateDir, headline: str) -> Outcome:
    """Nothing is written: each patch is reported as it is, not as the plan would leave it."""
    for report in plan.reports:
        report.state_after = None
    _report_plan(outcome, plan, state, dry_run=False)
    outcome.notes = [note for note in outcome.notes if note != HOST_HINT]
    outcome.exit_code, outcome.headline = ExitCode.NOT_AS_ASKED, headline
    return outcome


def _gpu_note() -> str | None:
    """Whether this host has an SM12x GPU (an image build usually has no GPU at all)."""
    from sm120patch.doctor import gpus

    seen = gpus.from_nvidia_smi()
    if not seen.answered:
        return f"no NVIDIA GPU seen ({seen.error}): fine for an image build; the patches act on SM12x hosts"
    if not seen.sm12x:
        shown = "; ".join(g.describe() for g in seen.gpus) or "none"
        return f"no SM12x GPU seen by nvidia-smi ({shown}): the patches change nothing at run time here"
    return None


def _problem(plan: Plan) -> str | None:
    """Why nothing may be written: a refused release, or drift (named file by file)."""
    if plan.refusal:
        return plan.refusal
    if plan.drift:
        release = f"sglang {plan.tree.version}" if plan.tree.version else "this sglang"
        return f"drift in {release}, nothing was written: " + "; ".join(
            f"sglang/{r.file}: {r.id}: {r.detail}" for r in plan.drift
        )
    return None


# --- verify --------------------------------------------------------------------------------


def verify(tree: SglangTree, patches: list[Patch] | None = None, runtime_timeout: float | None = None) -> Outcome:
    """Check every patch; with ``runtime_timeout``, also import the patched modules in the
    serving interpreter (``verify --runtime``)."""
    state = StateDir(tree.package_dir)
    manifest = state.load()
    trusted = trusted_plan(tree, state, manifest) if patches is None else None
    plan = trusted or make_plan(tree, list(patches or all_patches()), change=False)
    outcome = Outcome(Command.VERIFY, tree, ExitCode.OK, "", plan, state=state_summary(state, manifest, tree))
    read = {f.rel: f.original for f in plan.files if f.original is not None}
    outcome.files = file_statuses(tree, list(read), manifest, by_hash=trusted is not None, read=read)
    outcome.warnings = _fused_path_warnings(tree)
    if outcome.state and outcome.state.interrupted:
        outcome.notes.append(
            f"an apply/revert was interrupted ({state.journal_path}); "
            "the next `sm120patch apply` or `revert` finishes it"
        )
    if manifest is not None and not tree.same_release(manifest.sglang_version):
        outcome.notes.append(
            f"the saved state is from sglang {manifest.sglang_version}, but {tree.version} is installed: an "
            "upgrade or reinstall replaced the patched files (apply sets the old state aside)"
        )
    outcome.exit_code, outcome.headline = _verdict(plan, outcome.files, tree)
    if outcome.exit_code == ExitCode.OK:
        outcome.notes.append(HOST_HINT)
    if runtime_timeout is not None and not plan.refusal:
        _runtime(outcome, runtime_timeout)
    return outcome


def _verdict(plan: Plan, files: list[FileStatus], tree: SglangTree) -> tuple[ExitCode, str]:
    if plan.refusal:
        return ExitCode.NOT_AS_ASKED, plan.refusal
    states = {r.state for r in plan.reports}
    pending = {r.file for r in plan.reports if r.state is State.PENDING}
    if State.DRIFT in states:
        return ExitCode.NOT_AS_ASKED, "drift: the code is not what the patches know; see the details"
    if pending and pending <= {f.rel for f in files if f.pristine}:
        return ExitCode.NOT_AS_ASKED, (
            f"the files are the pristine sglang {tree.version} release files again (RECORD hashes "
            "match): sglang was reinstalled or upgraded. Run `sm120patch apply`."
        )
    if pending:
        return ExitCode.NOT_AS_ASKED, "not patched: run `sm120patch apply`"
    return ExitCode.OK, "all patches applied"


def _runtime(outcome: Outcome, timeout: float) -> None:
    from sm120patch.doctor import runtime

    tree, plan = outcome.tree, outcome.plan
    assert plan is not None
    python = tree.python or sys.executable
    data = runtime.check(tree, [f.rel for f in plan.files if f.original is not None], python, timeout)
    outcome.runtime = data
    verdict = runtime.verdict(data, python)
    if verdict is not None:
        outcome.exit_code, outcome.headline = verdict
    else:
        outcome.notes.append(runtime.summary(data, python))


# --- list ----------------------------------------------------------------------------------


def list_patches(tree: SglangTree) -> Outcome:
    state = StateDir(tree.package_dir)
    plan = trusted_plan(tree, state, state.load()) or make_plan(tree, list(all_patches()), change=False)
    return Outcome(Command.LIST, tree, ExitCode.OK, plan.refusal or f"{len(plan.reports)} patches", plan)


# --- apply ---------------------------------------------------------------------------------


def apply(
    tree: SglangTree,
    patches: list[Patch] | None = None,
    dry_run: bool = False,
    notes: list[str] | None = None,
    strict: bool = False,
    allow_missing_kernel: bool = False,
) -> Outcome:
    """Patch the tree with ``patches`` (default: all).  A FlashInfer beside sglang without
    the SM12x kernel refuses the change unless ``allow_missing_kernel``.  ``strict``: any
    warning about the fused path refuses it too, for image builds."""
    state = StateDir(tree.package_dir)
    outcome = Outcome(Command.APPLY, tree, ExitCode.OK, "", notes=list(notes or []))
    outcome.warnings = _fused_path_warnings(tree)
    refusal = None if allow_missing_kernel else missing_kernel_refusal(tree)
    note = _gpu_note()
    if note:
        outcome.notes.append(note)
    trusted = trusted_plan(tree, state, state.load()) if patches is None and not dry_run else None
    if trusted is not None and not (strict and outcome.warnings):
        return _report_plan(outcome, trusted, state, dry_run, by_hash=True)
    patches = patches if patches is not None else list(all_patches())
    plan = make_plan(tree, patches, change=True)
    if _problem(plan) or dry_run:
        if dry_run and refusal and plan.changes:
            outcome.notes.append(refusal.replace("refusing to patch, nothing was written", "apply would refuse"))
        return _report_plan(outcome, plan, state, dry_run)
    if refusal and plan.changes:
        return _refuse(outcome, plan, state, refusal)
    if strict and outcome.warnings:
        return _refuse(
            outcome,
            plan,
            state,
            f"--strict: nothing was written: {len(outcome.warnings)} warning(s) say the fused path "
            "would still not run on SM12x",
        )
    if not plan.changes and not state.journal_path.exists():
        _refresh_record(state, plan, patches)
        return _report_plan(outcome, plan, state, dry_run)
    with state.lock():
        recovered = recover(state)
        if recovered:
            outcome.notes.append(recovered)
        remove_temps(state, [f.path for f in plan.files])
        if recovered or not still_current(plan):
            # Another run changed the tree while we waited for the lock: plan again.
            plan = make_plan(tree, patches, change=True)
        if plan.changes and not _problem(plan):
            _write(outcome, plan, state)
        return _report_plan(outcome, plan, state, dry_run)


def _refresh_record(state: StateDir, plan: Plan, patches: list[Patch]) -> None:
    """Nothing to write, but what verify may trust is stale (a newer sm120patch, say):
    record it again, so the next verify needs no parsing.  Only the manifest is rewritten,
    under the lock, and only where this release's state exists."""
    manifest = state.load()
    tree = plan.tree
    if manifest is None or not tree.same_release(manifest.sglang_version) or trusted_plan(tree, state, manifest):
        return
    with state.lock():
        manifest = state.load()
        if manifest is None or not still_current(plan):
            return
        record(plan, manifest, [p.id for p in all_patches()])
        state.save(manifest)


def _write(outcome: Outcome, plan: Plan, state: StateDir) -> None:
    tree = outcome.tree
    check_writable([f.path for f in plan.changes])
    manifest = state.load()
    if manifest is not None and not tree.same_release(manifest.sglang_version):
        aside = state.set_aside(manifest.sglang_version or "unknown")
        outcome.notes.append(
            f"the saved state was for sglang {manifest.sglang_version}; {tree.version} is installed now. "
            f"Old state and backups kept in {aside}"
        )
        manifest = None
    manifest = manifest or Manifest(tree.version, str(tree.package_dir))
    entries = stage(state, plan, manifest)
    record(plan, manifest, [p.id for p in all_patches()])
    commit(state, entries, manifest, Command.APPLY.value)
    outcome.written = [e.rel for e in entries]
    outcome.changes = _plan_changes(plan)


def _report_plan(outcome: Outcome, plan: Plan, state: StateDir, dry_run: bool, by_hash: bool = False) -> Outcome:
    tree = outcome.tree
    outcome.plan = plan
    manifest = state.load()
    outcome.state = state_summary(state, manifest, tree)
    outcome.files = file_statuses(tree, [f.rel for f in plan.files if f.original is not None], manifest, by_hash)
    problem = _problem(plan)
    if problem:
        outcome.exit_code, outcome.headline = ExitCode.NOT_AS_ASKED, problem
    elif dry_run:
        outcome.changes = _plan_changes(plan)
        outcome.headline = (
            f"dry run: would change {len(plan.changes)} file(s); nothing written"
            if plan.changes
            else "dry run: nothing to change"
        )
    elif outcome.written:
        outcome.headline = f"patched {len(outcome.written)} file(s); backups in {state.root}"
        outcome.notes.append(HOST_HINT)
    else:
        outcome.headline = "already applied: nothing to change"
        outcome.notes.append(HOST_HINT)
    return outcome


# --- revert --------------------------------------------------------------------------------


def revert(tree: SglangTree, force: bool = False, dry_run: bool = False) -> Outcome:
    state = StateDir(tree.package_dir)
    outcome = Outcome(Command.REVERT, tree, ExitCode.OK, "")
    if not state.exists():
        return _revert_without_state(outcome, state)
    with state.lock():
        recovered = recover(state)
        if recovered:
            outcome.notes.append(recovered)
        manifest = state.load()
        if manifest is None:
            return _revert_without_state(outcome, state)
        remove_temps(state, [tree.path(rel) for rel in manifest.files])
        outcome.state = state_summary(state, manifest, tree)
        outcome.files = file_statuses(tree, sorted(manifest.files), manifest)
        if not tree.same_release(manifest.sglang_version):
            return _revert_other_release(outcome, state, manifest, dry_run)
        changed = [s.rel for s in outcome.files if s.recorded is None]
        if changed and not force:
            outcome.exit_code = ExitCode.NOT_AS_ASKED
            outcome.headline = (
                f"refusing to revert: changed since apply (hash differs from the patched one): {', '.join(changed)}. "
                "Nothing was written. --force restores the originals anyway (the changed files are kept aside)."
            )
            return outcome
        return _restore(outcome, state, manifest, dry_run)


def _revert_without_state(outcome: Outcome, state: StateDir) -> Outcome:
    tree = outcome.tree
    plan = make_plan(tree, list(all_patches()), change=False)
    outcome.plan = plan
    outcome.files = file_statuses(tree, [f.rel for f in plan.files if f.original is not None], None)
    outcome.state = state_summary(state, None, tree)
    modified = [f.rel for f in outcome.files if f.pristine is False]
    if modified:
        outcome.exit_code = ExitCode.NOT_AS_ASKED
        outcome.headline = (
            f"no saved state in {state.root}, but {', '.join(modified)} differ from the release (RECORD); "
            f"sm120patch did not write them. Restore with `pip install --force-reinstall --no-deps "
            f"sglang=={tree.version}`"
        )
    else:
        outcome.headline = "nothing to revert: no saved state, files as released"
    return outcome


def _revert_other_release(outcome: Outcome, state: StateDir, manifest: Manifest, dry_run: bool) -> Outcome:
    """The saved state belongs to the release sglang was upgraded from."""
    tree = outcome.tree
    if all(s.pristine for s in outcome.files):
        if not dry_run:
            outcome.notes.append(f"old state kept in {state.set_aside(manifest.sglang_version or 'unknown')}")
        outcome.headline = (
            f"nothing to revert: the saved state is from sglang {manifest.sglang_version} and the "
            f"installed {tree.version} files are pristine (RECORD)"
        )
        return outcome
    outcome.exit_code = ExitCode.NOT_AS_ASKED
    outcome.headline = (
        f"the saved state is from sglang {manifest.sglang_version} but {tree.version} is installed and its "
        f"files are not pristine; restore them with `pip install --force-reinstall --no-deps sglang=={tree.version}`"
    )
    return outcome


def _restore(outcome: Outcome, state: StateDir, manifest: Manifest, dry_run: bool) -> Outcome:
    """Put every backed-up file back (``--force``: keeping changed files aside first)."""
    tree = outcome.tree
    entries: list[Entry] = []
    diffs = []
    for status in outcome.files:
        record = manifest.files[status.rel]
        if status.sha256 == record.sha256_before:
            continue
        backup = state.root / record.backup
        data = backup.read_bytes() if backup.is_file() else b""
        if sha256(data) != record.sha256_before:
            raise EnvironmentProblem(
                f"backup {backup} is missing or damaged; nothing was written. Reinstall sglang to restore: "
                f"pip install --force-reinstall --no-deps sglang=={tree.version}"
            )
        path = tree.path(status.rel)
        current = path.read_bytes()
        diffs.append((status.rel, current, data))
        if status.recorded is None and not dry_run:
            outcome.notes.append(f"kept the changed {status.rel} as {_keep_changed(state, status.rel, current)}")
        entries.append(Entry(status.rel, str(path), status.sha256 or "", record.sha256_before, record.backup))
    outcome.changes = diffs
    if dry_run:
        outcome.headline = f"dry run: would restore {len(entries)} file(s); nothing written"
        return outcome
    check_writable([Path(e.path) for e in entries])
    commit(state, entries, None, Command.REVERT.value)
    outcome.written = [e.rel for e in entries]
    outcome.files = file_statuses(tree, sorted(manifest.files), None)
    outcome.state = state_summary(state, None, tree)
    outcome.headline = f"restored {len(entries)} file(s) byte for byte; state removed"
    return outcome


def _keep_changed(state: StateDir, rel: str, data: bytes) -> Path:
    aside = state.root / "stale-overwritten" / rel
    try:
        state.put(aside, data)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot keep the changed {rel} aside ({exc.strerror}); nothing was written") from exc
    return aside
