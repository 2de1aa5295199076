"""What every command shares (sm120patch/patcher/commands/: planning, saved_state,
fused_path), called in this process on the miniature release: each file's status, the
saved state's summary, the sentences users read about FlashInfer's missing SM12x kernel,
this host's GPUs, drift and a Ctrl-C.

Fakes: FakeFlashInfer (``fake_flashinfer``) beside sglang, a fake ``nvidia-smi`` on PATH
(``fake_nvidia_smi``), and, for the set-aside that fails, ``StateDir.set_aside`` replaced by
one that raises the OSError a read-only state folder gives.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
from pathlib import Path

import pytest

from sm120patch import __version__
from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.commands import kernel_blockers, planning, state_report
from sm120patch.patcher.kit.model import State
from sm120patch.patcher.outcome import CheckedBy, FileStatus, Recorded, StateSummary
from sm120patch.patcher.plan.registry import all_patches
from sm120patch.patcher.plan.types import FilePlan, PatchReport, Plan
from sm120patch.patcher.transaction.state_dir import FileRecord, Manifest, StateDir
from sm120patch.sglang.tree import SglangTree, from_directory
from tests.support.cli import apply_all
from tests.support.fakes import RTX_PRO_6000, fake_flashinfer, fake_nvidia_smi
from tests.support.mini_sglang import COMM, FUSION, SERVER_ARGS, write_mini_sglang
from tests.support.realtrees import record_hashes

#: A release whose fusion module creates FlashInfer's workspace with no ``try`` around it
#: (the shape of sglang 0.5.4-0.5.9): without the SM12x kernel, the server does not start.
CRASHING_FUSION = b"""
import flashinfer.comm as comm

def initialize(world_size, rank):
    return comm.trtllm_create_ipc_workspace_for_all_reduce_fusion(rank, world_size, 2048, 4096)

def flashinfer_allreduce_residual_rmsnorm(x):
    initialize(2, 0)
    return comm.trtllm_allreduce_fusion(x)
"""

CRASH = (
    "creates FlashInfer's workspace inside CUDA-graph capture with no fallback: "
    "the server would not start ('Capture cuda graph failed')"
)
NO_KERNEL_JIT = (
    "With fusion on, FlashInfer's JIT raises 'No supported CUDA architectures found for major versions [9, 10]' "
    "on SM12x (sglang#15650). Upgrade: `pip install -U 'flashinfer-python>=0.6.17'`."
)
WORKS = (
    "what works is sglang >= 0.5.18 with the FlashInfer it pins, or flashinfer-python>=0.6.17 "
    "(untested with older sglang); --allow-missing-kernel writes anyway"
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree_of(package: Path, version: str | None = "0.5.11") -> SglangTree:
    tree = from_directory(package)
    return tree if version == tree.version else dataclasses.replace(tree, version=version)


def old_flashinfer(mini: Path, with_version: bool = True) -> str:
    """FakeFlashInfer 0.6.16 beside sglang: its trtllm allreduce is built for SM 9 and 10 only;
    without its dist-info when ``with_version`` is False.  Where the answer comes from."""
    fake_flashinfer(mini.parent, "0.6.16", [9, 10])
    if not with_version:
        for dist in mini.parent.glob("flashinfer_python-*.dist-info"):
            for file in dist.iterdir():
                file.unlink()
            dist.rmdir()
    return f"{mini.parent}/flashinfer/jit/comm.py: gen_trtllm_comm_module(supported_major_versions=[9, 10])"


# --- each file against RECORD and the saved state ------------------------------------------------


def test_file_statuses_hash_what_is_on_disk_against_record_by_structure_unless_asked(mini: Path) -> None:
    tree, record = tree_of(mini), record_hashes(mini)
    disk = {rel: sha((mini / rel).read_bytes()) for rel in (COMM, SERVER_ARGS)}
    assert state_report.file_statuses(tree, [COMM, SERVER_ARGS], None) == [
        FileStatus(COMM, disk[COMM], record[COMM], None, CheckedBy.STRUCTURE),
        FileStatus(SERVER_ARGS, disk[SERVER_ARGS], record[SERVER_ARGS], None, CheckedBy.STRUCTURE),
    ]
    by_hash = state_report.file_statuses(tree, [COMM], None, by_hash=True)
    assert [s.checked_by for s in by_hash] == [CheckedBy.HASH]
    missing = state_report.file_statuses(tree, ["srt/no_such_module.py"], None)
    assert missing == [FileStatus("srt/no_such_module.py", None, None, None, CheckedBy.STRUCTURE)]


def test_file_statuses_take_bytes_just_read_and_read_the_others(mini: Path) -> None:
    statuses = state_report.file_statuses(
        tree_of(mini), [COMM, SERVER_ARGS], None, read={COMM: b"as read a moment ago"}
    )
    assert [s.sha256 for s in statuses] == [sha(b"as read a moment ago"), sha((mini / SERVER_ARGS).read_bytes())]
    assert statuses[0].pristine is False and statuses[1].pristine is True


def test_file_statuses_say_what_the_saved_state_calls_each_file(mini: Path) -> None:
    disk = {rel: sha((mini / rel).read_bytes()) for rel in (COMM, SERVER_ARGS, FUSION)}
    manifest = Manifest("0.5.11", str(mini))
    manifest.files = {
        COMM: FileRecord(disk[COMM], "a" * 64, ["communicator-import"], f"backups/{COMM}"),  # as before apply
        SERVER_ARGS: FileRecord("b" * 64, disk[SERVER_ARGS], ["server-args-auto-enable"], "x"),  # as apply left it
        FUSION: FileRecord("c" * 64, "d" * 64, ["workspace-preflight"], "y"),  # changed since
    }
    statuses = state_report.file_statuses(tree_of(mini), [COMM, SERVER_ARGS, FUSION, "__init__.py"], manifest)
    assert [s.recorded for s in statuses] == [Recorded.ORIGINAL, Recorded.PATCHED, None, None]


# --- the saved state ------------------------------------------------------------------------------


def test_state_summary_without_saved_state(mini: Path) -> None:
    state = StateDir(mini)
    assert state_report.state_summary(state, None, tree_of(mini)) == StateSummary(
        dir=str(mini / ".sm120patch"),
        present=False,
        sglang_version=None,
        tool_version=None,
        stale=False,
        files=[],
        interrupted=False,
    )


def test_state_summary_after_apply_and_for_another_release(mini: Path) -> None:
    apply_all(mini)
    state = StateDir(mini)
    manifest = state.load()
    assert manifest is not None
    summary = state_report.state_summary(state, manifest, tree_of(mini))
    assert summary == StateSummary(
        dir=str(mini / ".sm120patch"),
        present=True,
        sglang_version="0.5.11",
        tool_version=__version__,
        stale=False,
        files=sorted([COMM, SERVER_ARGS, FUSION]),
        interrupted=False,
    )
    manifest.sglang_version = "0.5.10"
    state.journal_path.write_text("{}")  # left by an apply that was stopped
    moved = state_report.state_summary(state, manifest, tree_of(mini))  # the files are still apply's writing
    assert (moved.stale, moved.sglang_version, moved.interrupted) == (False, "0.5.10", True)
    write_mini_sglang(mini.parent)  # reinstalled over it: the state is of another release now
    older = state_report.state_summary(state, manifest, tree_of(mini))
    assert (older.stale, older.sglang_version, older.interrupted) == (True, "0.5.10", True)


def test_set_aside_moves_the_state_and_names_where(mini: Path) -> None:
    apply_all(mini)
    aside = state_report.set_aside(StateDir(mini), "0.5.10")
    assert aside.parent == mini / ".sm120patch" and aside.name.startswith("stale-0.5.10-")
    assert (aside / "manifest.json").is_file() and not (mini / ".sm120patch" / "manifest.json").exists()


@pytest.mark.parametrize("filename", ["/srv/site/sglang/.sm120patch/stale-0.5.10", None])
def test_a_set_aside_that_fails_is_one_sentence_naming_the_path(
    mini: Path, monkeypatch: pytest.MonkeyPatch, filename: str | None
) -> None:
    def read_only_set_aside(self: StateDir, label: str) -> Path:
        """Fake: the state folder is read-only."""
        raise OSError(errno.EACCES, "Permission denied", filename)

    monkeypatch.setattr(StateDir, "set_aside", read_only_set_aside)
    state = StateDir(mini)
    with pytest.raises(EnvironmentProblem) as raised:
        state_report.set_aside(state, "0.5.10")
    assert str(raised.value) == (
        f"cannot set the saved state of sglang 0.5.10 aside in {state.root} "
        f"(Permission denied: {filename or state.root}); no sglang file was changed"
    )


# --- FlashInfer's SM12x kernel --------------------------------------------------------------------


def test_no_flashinfer_warns_about_the_one_sglang_pins_and_refuses_nothing(mini: Path) -> None:
    tree = tree_of(mini)
    assert kernel_blockers.fused_path_warnings(tree) == [
        "[kernel-missing] FlashInfer is not installed here; sglang 0.5.11 pins 0.6.8.post1, "
        "which has no SM12x allreduce kernel "
        f"(the first is 0.6.17, flashinfer#3903). {NO_KERNEL_JIT}"
    ]
    assert kernel_blockers.missing_kernel_refusal(tree) is None
    assert kernel_blockers.missing_kernel_effect(tree) is None  # the miniature release creates no workspace


def test_flashinfer_with_the_sm12x_kernel_is_no_warning_and_no_refusal(mini: Path) -> None:
    fake_flashinfer(mini.parent, "0.6.18", [9, 10, 12])
    (mini / FUSION).write_bytes(CRASHING_FUSION)
    tree = tree_of(mini)
    assert kernel_blockers.fused_path_warnings(tree) == []
    assert kernel_blockers.missing_kernel_refusal(tree) is None


def test_flashinfer_that_nothing_can_judge_is_no_warning_and_no_refusal(mini: Path) -> None:
    """A FlashInfer of no version whose comm.py has another shape: unknown, so neither."""
    (mini.parent / "flashinfer" / "jit").mkdir(parents=True)
    (mini.parent / "flashinfer" / "__init__.py").write_text("")
    (mini.parent / "flashinfer" / "jit" / "comm.py").write_text("def something_else():\n    pass\n")
    tree = tree_of(mini)
    assert tree.flashinfer_facts.found and tree.flashinfer_facts.sm12x_kernel is None
    assert kernel_blockers.fused_path_warnings(tree) == []
    assert kernel_blockers.missing_kernel_refusal(tree) is None


def test_flashinfer_without_the_kernel_on_a_release_of_unknown_effect(mini: Path) -> None:
    source = old_flashinfer(mini)
    tree = tree_of(mini)
    assert kernel_blockers.fused_path_warnings(tree) == [
        "[kernel-missing] "
        f"FlashInfer 0.6.16 does not build the trtllm allreduce for SM12x ({source}); the first that does is "
        f"0.6.17 (flashinfer#3903). {NO_KERNEL_JIT}"
    ]
    assert kernel_blockers.missing_kernel_refusal(tree) == (
        f"refusing to patch, nothing was written: FlashInfer 0.6.16 has no SM12x allreduce kernel ({source}), and "
        f"fusion cannot run on SM12x with it; {WORKS}"
    )


def test_flashinfer_without_the_kernel_on_a_release_that_would_not_start(mini: Path) -> None:
    source = old_flashinfer(mini)
    (mini / FUSION).write_bytes(CRASHING_FUSION)
    tree = tree_of(mini)
    assert kernel_blockers.missing_kernel_effect(tree) == f"sglang 0.5.11 {CRASH}"
    (warning,) = kernel_blockers.fused_path_warnings(tree)
    assert f"With fusion on, sglang 0.5.11 {CRASH}. Upgrade:" in warning
    assert kernel_blockers.missing_kernel_refusal(tree) == (
        f"refusing to patch, nothing was written: FlashInfer 0.6.16 has no SM12x allreduce kernel ({source}), and "
        f"sglang 0.5.11 {CRASH}; {WORKS}"
    )


def test_a_release_and_a_flashinfer_of_no_version_are_named_as_such(mini: Path) -> None:
    source = old_flashinfer(mini, with_version=False)
    (mini / FUSION).write_bytes(CRASHING_FUSION)
    tree = tree_of(mini, version=None)
    assert kernel_blockers.missing_kernel_effect(tree) == f"sglang (unknown version) {CRASH}"
    assert kernel_blockers.missing_kernel_refusal(tree) == (
        f"refusing to patch, nothing was written: the installed FlashInfer has no SM12x allreduce kernel ({source}), "
        f"and sglang (unknown version) {CRASH}; {WORKS}"
    )


@pytest.mark.parametrize("how", ["missing", "a folder"])
def test_a_fusion_module_that_cannot_be_read_has_no_effect_to_tell(mini: Path, how: str) -> None:
    source = old_flashinfer(mini)
    (mini / FUSION).unlink()
    if how == "a folder":
        (mini / FUSION).mkdir()
    tree = tree_of(mini)
    assert kernel_blockers.missing_kernel_effect(tree) is None
    assert f"({source}), and fusion cannot run on SM12x with it; " in (
        kernel_blockers.missing_kernel_refusal(tree) or ""
    )


# --- this host's GPUs -----------------------------------------------------------------------------


def with_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: list[tuple[str, str]] | None) -> None:
    """PATH with a fake nvidia-smi answering ``gpus`` (None: no nvidia-smi at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if gpus is not None:
        fake_nvidia_smi(bin_dir, gpus)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_no_nvidia_smi_is_fine_for_an_image_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_gpus(tmp_path, monkeypatch, None)
    assert kernel_blockers.gpu_note(5) == (
        "no NVIDIA GPU seen (nvidia-smi is not on PATH): fine for an image build; the patches act on SM12x hosts"
    )


@pytest.mark.parametrize(
    ("gpus", "shown"),
    [
        (
            [("NVIDIA H200", "9.0"), ("NVIDIA B200", "10.0")],
            "GPU 0: NVIDIA H200 (cc 9.0); GPU 1: NVIDIA B200 (cc 10.0)",
        ),
        ([], "none"),
    ],
)
@pytest.mark.offline
def test_gpus_that_are_not_sm12x_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: list[tuple[str, str]], shown: str
) -> None:
    with_gpus(tmp_path, monkeypatch, gpus)
    assert kernel_blockers.gpu_note(5) == (
        f"no SM12x GPU seen by nvidia-smi ({shown}): the patches change nothing at run time here"
    )


@pytest.mark.parametrize(
    "gpus",
    [[(RTX_PRO_6000, "12.0")], [("NVIDIA H200", "9.0"), (RTX_PRO_6000, "12.0")], [("NVIDIA Mystery", "[N/A]")]],
    ids=["sm12x", "mixed", "unknown"],
)
@pytest.mark.offline
def test_an_sm12x_gpu_or_one_of_unknown_capability_needs_no_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: list[tuple[str, str]]
) -> None:
    with_gpus(tmp_path, monkeypatch, gpus)
    assert kernel_blockers.gpu_note(5) is None


# --- planning, drift, Ctrl-C ----------------------------------------------------------------------


def test_plan_tree_makes_the_change_only_when_asked(mini: Path) -> None:
    tree, patches = tree_of(mini), list(all_patches())
    assert planning.plan_tree(tree, patches, change=False).changes == []
    changed = planning.plan_tree(tree, patches, change=True)
    assert sorted(f.rel for f in changed.changes) == sorted([COMM, SERVER_ARGS, FUSION])
    assert [rel for rel, _, _ in planning.plan_changes(changed)] == [f.rel for f in changed.changes]


def test_plan_changes_are_the_existing_files_with_new_bytes(mini: Path) -> None:
    plan = Plan(
        tree_of(mini),
        [
            FilePlan("srt/new.py", mini / "srt/new.py", None, b"created"),
            FilePlan(COMM, mini / COMM, b"same", None),
            FilePlan(SERVER_ARGS, mini / SERVER_ARGS, b"before", b"after"),
        ],
    )
    assert planning.plan_changes(plan) == [(SERVER_ARGS, b"before", b"after")]


def report(rel: str, pid: str, state: State, detail: str) -> PatchReport:
    return PatchReport(pid, "summary", (), rel, state, detail)


def drifted(tree: SglangTree, refusal: str | None = None) -> Plan:
    comm = FilePlan(COMM, tree.path(COMM), b"", reports=[])
    comm.reports = [
        report(COMM, "communicator-fusion-gate", State.DRIFT, "no apply_flashinfer_allreduce_fusion"),
        report(COMM, "communicator-import", State.PENDING, "pending"),
    ]
    fusion = FilePlan(FUSION, tree.path(FUSION), b"", reports=[report(FUSION, "workspace-preflight", State.DRIFT, "x")])
    return Plan(tree, [comm, fusion], refusal)


def test_drift_is_named_file_by_file(mini: Path) -> None:
    said = (
        f"sglang/{COMM}: communicator-fusion-gate: no apply_flashinfer_allreduce_fusion; "
        f"sglang/{FUSION}: workspace-preflight: x"
    )
    assert planning.why_not_written(drifted(tree_of(mini))) == f"drift in sglang 0.5.11, nothing was written: {said}"
    unknown = drifted(tree_of(mini, version=None))
    assert planning.why_not_written(unknown) == f"drift in this sglang, nothing was written: {said}"


def test_a_refusal_comes_before_drift_and_a_clean_plan_has_no_reason(mini: Path) -> None:
    assert planning.why_not_written(drifted(tree_of(mini), refusal="sglang 0.5.3 is refused")) == (
        "sglang 0.5.3 is refused"
    )
    assert planning.why_not_written(Plan(tree_of(mini), [])) is None


def test_what_an_interrupt_left_behind(mini: Path) -> None:
    tree = tree_of(mini)
    assert state_report.interrupted_note(None) == "interrupted before sglang was found; nothing was written"
    assert state_report.interrupted_note(tree) == (
        "interrupted; no sglang file was left half-changed (`sm120patch verify` says where the patches stand)"
    )
    journal = StateDir(mini).journal_path
    journal.parent.mkdir()
    journal.write_text("{}")
    assert state_report.interrupted_note(tree) == (
        "interrupted while sglang's files were being replaced: each is either as before or fully replaced, "
        f"and the next `sm120patch apply` or `sm120patch revert` finishes what was started ({journal})"
    )
