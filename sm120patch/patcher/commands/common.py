"""What every command shares: planning a tree, each file's status, the saved state, and
what still keeps the fused path from running (FlashInfer's kernel, the GPU)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.kit.model import Patch
from sm120patch.patcher.outcome import CheckedBy, FileStatus, Recorded, StateSummary
from sm120patch.patcher.transaction.fsutil import sha256, sha256_file
from sm120patch.patcher.transaction.identity import same_tree
from sm120patch.patcher.transaction.state import Manifest, StateDir
from sm120patch.sglang import releases, startup_risk
from sm120patch.sglang.layout import COMM_FUSION
from sm120patch.sglang.tree import SglangTree

if TYPE_CHECKING:
    from sm120patch.patcher.plan.types import Plan


def plan_tree(tree: SglangTree, patches: list[Patch], change: bool, token_limit: int | None = None) -> Plan:
    """Parse and check the targets (``token_limit``: the fusion token limit asked for).
    Imported on use: a revert from saved state compares hashes only and never loads libcst."""
    from sm120patch.patcher.plan.planner import make_plan as plan

    return plan(tree, patches, change, token_limit)


def plan_changes(plan: Plan) -> list[tuple[str, bytes, bytes]]:
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


def version_text(version: str | None) -> str:
    """A release's version as sentences name it: a saved state or a checkout may not know it."""
    return version or "(unknown version)"


def set_aside(state: StateDir, release: str) -> Path:
    """``state.set_aside``: the saved state of another sglang release moved under ``stale-*/``."""
    try:
        return state.set_aside(release)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot set the saved state of sglang {release} aside in {state.root} "
            f"({exc.strerror}: {exc.filename or state.root}); no sglang file was changed"
        ) from exc


def state_summary(
    state: StateDir, manifest: Manifest | None, tree: SglangTree, own: bool | None = None
) -> StateSummary:
    """``own``: whether ``manifest`` is this tree's state, where the caller judged it already."""
    return StateSummary(
        dir=str(state.root),
        present=manifest is not None,
        sglang_version=manifest.sglang_version if manifest else None,
        tool_version=manifest.tool_version if manifest else None,
        stale=bool(manifest and not (same_tree(tree, manifest) if own is None else own)),
        files=sorted(manifest.files) if manifest else [],
        interrupted=state.journal_path.exists(),
    )


#: What "applied" does not say: the gates are open, the host may still stop the kernel.
HOST_HINT = (
    "the gates are open; whether this host runs the fused kernel (FlashInfer's SM12x build, "
    "P2P, multicast, GPUDirect RDMA) is for `sm120patch doctor` to say"
)


def missing_kernel_effect(tree: SglangTree) -> str | None:
    """What this release does when fusion is on and FlashInfer lacks the SM12x kernel."""
    try:
        effect = startup_risk.missing_kernel_effect(tree.path(COMM_FUSION).read_bytes())
    except OSError:
        return None
    return startup_risk.effect_sentence(tree.version or "(unknown version)", effect) if effect else None


def fused_path_warnings(tree: SglangTree) -> list[str]:
    """What would keep the fused kernel from running even with every patch applied.  The
    release's code is read (``startup_risk``) only when there is something to warn about."""
    if releases.flashinfer_warning(tree.flashinfer_facts, tree.version) is None:
        return []
    warning = releases.flashinfer_warning(tree.flashinfer_facts, tree.version, missing_kernel_effect(tree))
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


def gpu_note(timeout: float) -> str | None:
    """Whether this host has an SM12x GPU (an image build usually has no GPU at all)."""
    from sm120patch.runner import gpus

    seen = gpus.from_nvidia_smi(timeout)
    if not seen.answered:
        return f"no NVIDIA GPU seen ({seen.error}): fine for an image build; the patches act on SM12x hosts"
    if not seen.sm12x and not seen.unknown:
        shown = "; ".join(g.describe() for g in seen.gpus) or "none"
        return f"no SM12x GPU seen by nvidia-smi ({shown}): the patches change nothing at run time here"
    return None


def why_not_written(plan: Plan) -> str | None:
    """Why nothing may be written: a refused release, or drift (named file by file)."""
    if plan.refusal:
        return plan.refusal
    if plan.drift:
        release = f"sglang {plan.tree.version}" if plan.tree.version else "this sglang"
        return f"drift in {release}, nothing was written: " + "; ".join(
            f"sglang/{r.file}: {r.id}: {r.detail}" for r in plan.drift
        )
    return None


def interrupted_note(tree: SglangTree | None) -> str:
    """What a Ctrl-C left behind, and what the next run does about it.  The journal
    (``transaction/journal.py``) is written whole before the first sglang file is replaced
    and removed after the last: with it, each file is either as before or fully replaced and
    the next apply or revert finishes the job; without it, no file is half-way."""
    if tree is None:
        return "interrupted before sglang was found; nothing was written"
    journal = StateDir(tree.package_dir).journal_path
    if journal.exists():
        return (
            "interrupted while sglang's files were being replaced: each is either as before or fully "
            "replaced, and the next `sm120patch apply` or `sm120patch revert` finishes what was started "
            f"({journal})"
        )
    return "interrupted; no sglang file was left half-changed (`sm120patch verify` says where the patches stand)"
