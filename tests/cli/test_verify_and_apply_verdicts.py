"""verify's one sentence for each way a tree can be, and what apply says and records on its
way, in this process on the miniature release (tests/support/mini_sglang.py).

Fakes: a fake ``nvidia-smi`` on PATH (``fake_nvidia_smi``); FakeTorch (``fake_torch_package``)
on the serving interpreter's path for ``verify --runtime``; a Ctrl-C injected as apply replaces
its first file (``fsutil.STEP_HOOK``, the reliability suite's hook); for a record another
run changed meanwhile, ``apply._still_current`` answering "changed"; for a file rewritten just
after verify read it, ``verify.judge`` wrapped to write it; and, for what verify hands the
runtime check, ``runtime.check`` recording its arguments.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from sm120patch import __version__
from sm120patch.errors import ExitCode
from sm120patch.patcher import runtime
from sm120patch.patcher.commands import apply as apply_module
from sm120patch.patcher.commands import verify as verify_module
from sm120patch.patcher.commands.verify import verify
from sm120patch.patcher.kit.auto_enable_tp import AT_TP2
from sm120patch.patcher.runtime import RuntimeCheck
from sm120patch.patcher.transaction import fsutil
from sm120patch.patcher.transaction.fsutil import sha256
from sm120patch.sglang.tree import from_directory
from tests.support.cli import jrun, run, tree_hashes
from tests.support.fakes import RTX_PRO_6000, fake_flashinfer, fake_nvidia_smi, fake_torch_package
from tests.support.mini_sglang import COMM, FILES, FUSION, SERVER_ARGS, write_mini_sglang

HOST_HINT = (
    "the gates are open; whether this host runs the fused kernel (FlashInfer's SM12x build, P2P, multicast, "
    "GPUDirect RDMA) is for `sm120patch doctor` to say"
)
NO_GPU = "no NVIDIA GPU seen (nvidia-smi is not on PATH): fine for an image build; the patches act on SM12x hosts"
RUN = "Run `sm120patch apply`."


def verify_json(mini: Path, *args: str) -> tuple[int, dict]:
    return jrun("verify", "--sglang-path", str(mini), *args)


def applied(mini: Path) -> Path:
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert code == 0, data
    return mini / ".sm120patch" / "manifest.json"


def edit_manifest(manifest: Path, **fields: object) -> None:
    data = json.loads(manifest.read_text())
    data.update(fields)
    manifest.write_text(json.dumps(data))


@pytest.fixture
def no_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")


# --- verify ---------------------------------------------------------------------------------------


def test_a_patched_tree_is_ok_with_the_host_hint(mini: Path) -> None:
    applied(mini)
    code, data = verify_json(mini)
    assert (code, data["headline"]) == (0, "all patches applied")
    assert data["messages"] == [HOST_HINT]


def test_a_fresh_release_is_not_patched_and_gets_no_host_hint(mini: Path) -> None:
    code, data = verify_json(mini)
    assert (code, data["headline"]) == (
        1,
        f"not patched: the files are sglang 0.5.11's release files (RECORD hashes match). {RUN}",
    )
    assert data["messages"] == []


def test_a_release_of_no_version_is_this_sglang(mini: Path) -> None:
    tree = dataclasses.replace(from_directory(mini), version=None)
    outcome = verify(tree)
    assert outcome.exit_code is ExitCode.NOT_AS_ASKED
    assert outcome.headline == f"not patched: the files are this sglang's release files (RECORD hashes match). {RUN}"


def test_drift_is_not_as_asked(mini: Path) -> None:
    (mini / COMM).write_text(FILES[COMM].replace("def apply_flashinfer_allreduce_fusion(", "def fusion_allowed("))
    code, data = verify_json(mini)
    assert (code, data["headline"]) == (1, "drift: the code is not what the patches know; see the details")
    assert HOST_HINT not in data["messages"]


def test_files_edited_without_an_apply_are_named(mini: Path) -> None:
    for rel in (COMM, SERVER_ARGS):
        (mini / rel).write_text(FILES[rel] + "# a hand edit\n")
    code, data = verify_json(mini)
    assert (code, data["headline"]) == (
        1,
        f"not patched, and sglang/{COMM}, sglang/{SERVER_ARGS} differ from the release (RECORD): edited by hand or "
        f"by another tool. {RUN}",
    )


@pytest.mark.parametrize(
    ("selection", "left_out", "messages"),
    [
        (("--skip", "server-args-auto-enable"), "server-args-auto-enable", [HOST_HINT]),
        # The preflight left out keeps the fused path shut (a warning): the gates are not "open".
        (("--only", "communicator-fusion-gate"), "workspace-preflight, server-args-auto-enable", []),
    ],
)
def test_what_apply_was_asked_to_leave_out_is_named_in_order(
    mini: Path, selection: tuple[str, str], left_out: str, messages: list[str]
) -> None:
    assert jrun("apply", "--sglang-path", str(mini), *selection)[0] == 0
    code, data = verify_json(mini)
    assert (code, data["headline"]) == (
        0,
        f"all patches applied, except {left_out}: skipped, as the last apply was asked",
    )
    assert data["messages"] == messages


def test_without_record_hashes_it_is_just_not_patched(mini: Path) -> None:
    (record,) = mini.parent.glob("sglang-*.dist-info/RECORD")
    record.unlink()
    code, data = verify_json(mini)
    assert (code, data["headline"]) == (1, f"not patched. {RUN}")


def test_a_reinstall_after_apply(mini: Path) -> None:
    applied(mini)
    write_mini_sglang(mini.parent)  # pip install --force-reinstall: the release's files again
    code, data = verify_json(mini)
    assert (code, data["headline"]) == (
        1,
        f"not patched: sglang 0.5.11 was reinstalled after `apply`; its files are the release's again. {RUN}",
    )
    assert data["messages"] == []


def test_an_upgrade_after_apply_names_both_releases(mini: Path) -> None:
    edit_manifest(applied(mini), sglang_version="0.5.10")  # as if applied to 0.5.10, then upgraded
    write_mini_sglang(mini.parent)
    code, data = verify_json(mini)
    assert (code, data["headline"]) == (
        1,
        "not patched: sglang was upgraded from 0.5.10 to 0.5.11 after `apply`, which replaced the patched files. "
        + RUN,
    )
    assert data["messages"] == [
        "the saved state is from sglang 0.5.10, but 0.5.11 is installed: an upgrade or reinstall replaced the "
        "patched files (apply sets the old state aside)"
    ]


def test_a_state_of_another_release_beside_applied_patches_never_says_replaced(mini: Path) -> None:
    """The saved state is of 0.5.10 and the files hold the patches, but not the bytes apply
    wrote (patched again by hand after an upgrade): "all patches applied", and the note says
    the files are no longer apply's writing, not that an upgrade replaced the patched files."""
    edit_manifest(applied(mini), sglang_version="0.5.10")
    for rel in (COMM, SERVER_ARGS, FUSION):
        (mini / rel).write_text((mini / rel).read_text() + "# patched by hand after the upgrade\n")
    code, data = verify_json(mini)
    assert (code, data["headline"]) == (0, "all patches applied")
    assert data["messages"][0] == (
        "the saved state is from sglang 0.5.10, but 0.5.11 is installed: the files are no longer what apply "
        "wrote (apply sets the old state aside)"
    )
    assert not any("replaced" in message for message in data["messages"])


def test_a_file_changed_after_apply_is_named_and_only_the_pending_ones(mini: Path) -> None:
    applied(mini)
    (mini / COMM).write_text(FILES[COMM] + "# another tool put the original back, with a comment\n")
    (mini / SERVER_ARGS).write_text((mini / SERVER_ARGS).read_text() + "# still patched, with a comment\n")
    code, data = verify_json(mini)
    assert (code, data["headline"]) == (
        1,
        f"not patched: sglang/{COMM} changed after `apply` (a hand edit or another tool: the hash matches neither "
        f"the release nor what apply wrote). {RUN}",
    )


@pytest.mark.offline
def test_runtime_imports_are_reported_when_they_work(
    mini: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    applied(mini)
    monkeypatch.setenv("PYTHONPATH", str(fake_torch_package(tmp_path / "faketorch", (12, 0))))
    code, data = verify_json(mini, "--runtime")
    assert (code, data["headline"]) == (0, "all patches applied")
    assert data["messages"] == [
        HOST_HINT,
        f"runtime: is_sm120_supported() = True in {sys.executable} (cc 12.0): this host takes the SM12x branches; "
        "every patched module imports",
    ]
    assert data["runtime"]["probe"]["value"] is True


def test_runtime_is_not_tried_on_a_refused_release(mini: Path) -> None:
    """No torch here: trying would be exit 2; the refusal is the answer."""
    utils = mini / "srt/utils/common.py"
    utils.write_text(utils.read_text().replace("def is_sm120_supported", "def _gone"))
    code, data = verify_json(mini, "--runtime")
    assert code == 1 and data["headline"].startswith("sglang 0.5.11 has no SM12x probe")
    assert data["runtime"] is None


def test_verify_shows_the_saved_state_it_judged_by(mini: Path) -> None:
    applied(mini)
    code, data = verify_json(mini)
    assert code == 0
    assert data["state"] == {
        "dir": str(mini / ".sm120patch"),
        "present": True,
        "sglang_version": "0.5.11",
        "tool_version": __version__,
        "stale": False,
        "files": sorted([COMM, FUSION, SERVER_ARGS]),
        "interrupted": False,
    }


def test_each_file_is_reported_as_judged_not_as_read_again(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file another tool rewrites just after verify read it: its hash is that of the bytes judged."""
    judged_bytes = (mini / COMM).read_bytes()
    real_judge = verify_module.read_state

    def judge_then_rewrite(tree: object) -> object:
        """Fake: ``read_state``, then another tool writes the gate file."""
        judged = real_judge(tree)
        (mini / COMM).write_text(FILES[COMM] + "# written after verify read it\n")
        return judged

    monkeypatch.setattr(verify_module, "read_state", judge_then_rewrite)
    outcome = verify(from_directory(mini))
    hashes = {f.rel: f.sha256 for f in outcome.files}
    assert hashes[COMM] == sha256(judged_bytes)
    assert outcome.headline == f"not patched: the files are sglang 0.5.11's release files (RECORD hashes match). {RUN}"


def test_the_runtime_check_imports_every_patched_file_within_the_timeout_asked(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[list[str], float]] = []

    def record(tree: object, rels: list[str], python: str, timeout: float) -> RuntimeCheck:
        """Fake ``runtime.check``: records what it was asked; torch "does not import"."""
        seen.append((rels, timeout))
        return RuntimeCheck(python, None, None, None, (), 3)

    monkeypatch.setattr(runtime, "check", record)
    applied(mini)
    outcome = verify(from_directory(mini), runtime_timeout=7.5)
    assert seen == [(sorted([COMM, FUSION, SERVER_ARGS]), 7.5)]
    assert outcome.exit_code is ExitCode.ENVIRONMENT


# --- apply ----------------------------------------------------------------------------------------


@pytest.mark.offline
def test_apply_on_an_sm12x_host_has_no_gpu_note(mini: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvidia_smi(tmp_path / "bin", [(RTX_PRO_6000, "12.0")])
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert code == 0 and [m.split(" for the models")[0] for m in data["messages"]] == [AT_TP2, HOST_HINT]
    assert data["headline"] == f"patched 3 files; backups in {mini / '.sm120patch'}"


def test_apply_without_a_gpu_says_so_first(mini: Path, no_nvidia_smi: None) -> None:
    code, data = jrun("apply", "--sglang-path", str(mini), "--only", "server-args-auto-enable")
    assert code == 0 and data["written"] == [f"sglang/{SERVER_ARGS}"]
    # The gate left out keeps the fused path shut (a warning): no "the gates are open" after it.
    assert [m.split(" for the models")[0] for m in data["messages"]] == [NO_GPU, AT_TP2]


def test_dry_runs_say_what_they_would_change(mini: Path, no_nvidia_smi: None) -> None:
    code, data = jrun("apply", "--sglang-path", str(mini), "--dry-run")
    assert (code, data["headline"], [m.split(" for the models")[0] for m in data["messages"]]) == (
        0,
        "dry run: would change 3 files; nothing written",
        [NO_GPU, AT_TP2],
    )
    applied(mini)
    code, data = jrun("apply", "--sglang-path", str(mini), "--dry-run")
    assert (code, data["headline"], data["diff"]) == (0, "dry run: nothing to change", "")


def test_a_second_apply_trusts_its_record_unless_strict_meets_a_warning(mini: Path) -> None:
    applied(mini)
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert (code, data["headline"]) == (0, "already applied: nothing to change")
    assert {f["checked_by"] for f in data["files"]} == {"hash"}  # the record, not a parse
    code, data = jrun("apply", "--sglang-path", str(mini), "--strict")  # no FlashInfer here: one warning
    assert (code, data["code"], data["written"], len(data["warnings"])) == (1, "strict", [], 1)
    assert {f["checked_by"] for f in data["files"]} == {"structure"}


def test_a_second_apply_leaves_the_saved_state_untouched(mini: Path) -> None:
    """Trusted by hash, nothing to write: not even the manifest is written again."""
    manifest = applied(mini)
    before = manifest.stat()
    assert jrun("apply", "--sglang-path", str(mini))[0] == 0
    after = manifest.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


@pytest.mark.parametrize("asked", [["--dry-run"], ["--only", "communicator-flag"], ["--skip", "workspace-preflight"]])
def test_a_dry_run_or_a_chosen_set_of_patches_reads_the_code_not_the_record(mini: Path, asked: list[str]) -> None:
    """The record says what the last full apply saw; a dry run shows what the code says now,
    and a chosen set is judged patch by patch, so neither takes the record's word."""
    applied(mini)
    code, data = jrun("apply", "--sglang-path", str(mini), *asked)
    assert code == 0 and data["written"] == []
    assert {f["checked_by"] for f in data["files"]} == {"structure"}


def test_a_partial_apply_over_a_tree_patched_without_state_records_it_with_its_location(mini: Path) -> None:
    """Nothing to write, patches left out and no record: apply records what was asked, and
    where sglang is, so verify judges against it."""
    applied(mini)
    for path in sorted((mini / ".sm120patch").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    (mini / ".sm120patch").rmdir()
    code, data = jrun("apply", "--sglang-path", str(mini), "--skip", "workspace-preflight")
    assert (code, data["written"]) == (0, [])
    manifest = json.loads((mini / ".sm120patch" / "manifest.json").read_text())
    assert (manifest["sglang_location"], manifest["sglang_version"]) == (str(mini), "0.5.11")
    assert "workspace-preflight" not in manifest["patch_set"]


@pytest.mark.parametrize("asked", [["--dry-run"], ["--strict"]])
def test_a_dry_run_or_a_refused_apply_leaves_a_stale_record_as_it_is(mini: Path, asked: list[str]) -> None:
    """Only an apply that may write refreshes the record; a dry run and a refusal write nothing."""
    manifest = applied(mini)
    edit_manifest(manifest, fingerprint="0" * 64)  # as a newer sm120patch's code would see it
    before = manifest.read_bytes()
    code, _ = jrun("apply", "--sglang-path", str(mini), *asked)
    assert code == (0 if asked == ["--dry-run"] else 1)  # --strict: no FlashInfer here, one warning
    assert manifest.read_bytes() == before


def test_a_record_that_cannot_be_saved_names_the_file_the_os_named(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = applied(mini)
    edit_manifest(manifest, fingerprint="0" * 64)
    temp = str(mini / ".sm120patch" / ".manifest.json.x1.sm120patch-tmp")

    def full_disk(self: object, saved: object) -> None:
        """Fake: the disk is full as the record's temp file is written."""
        raise OSError(28, "No space left on device", temp)

    monkeypatch.setattr(apply_module.StateDir, "save", full_disk)
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert code == 2
    assert data["error"] == (
        f"the patches are in place, but recording them in {manifest} failed (No space left on device: {temp}); "
        "no sglang file was changed"
    )


def test_an_apply_another_one_beat_to_the_lock_says_already_applied_and_records_nothing(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fake ``recover``: as this apply takes the lock, the files are found patched by someone
    else (sed, say): nothing is left to write, so no state is made and nothing is "finished"."""
    applied(mini)
    patched = {rel: (mini / rel).read_bytes() for rel in (COMM, FUSION, SERVER_ARGS)}
    assert jrun("revert", "--sglang-path", str(mini))[0] == 0
    assert not (mini / ".sm120patch").exists()

    def patched_meanwhile(state: object) -> None:
        for rel, data in patched.items():
            (mini / rel).write_bytes(data)

    monkeypatch.setattr(apply_module, "recover", patched_meanwhile)
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert (code, data["headline"], data["written"]) == (0, "already applied: nothing to change", [])
    assert not (mini / ".sm120patch" / "manifest.json").exists()


def test_a_later_full_apply_keeps_the_state_of_the_same_release(mini: Path) -> None:
    code, data = jrun("apply", "--sglang-path", str(mini), "--skip", "workspace-preflight")
    assert code == 0
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert (code, data["written"]) == (0, [f"sglang/{FUSION}"])
    assert not [m for m in data["messages"] if m.startswith("the saved state was for")]
    assert [p.name for p in (mini / ".sm120patch").iterdir() if p.name.startswith("stale-")] == []


def test_a_flashinfer_without_the_kernel_refuses_nothing_when_nothing_is_left_to_write(mini: Path) -> None:
    fake_flashinfer(mini.parent, "0.6.16", [9, 10])
    assert jrun("apply", "--sglang-path", str(mini), "--allow-missing-kernel")[0] == 0
    code, data = jrun("apply", "--sglang-path", str(mini), "--only", "communicator-fusion-gate")
    assert (code, data["headline"], data["written"]) == (0, "already applied: nothing to change", [])


@pytest.mark.parametrize(("version", "label"), [("0.5.10", "0.5.10"), (None, "unknown")])
def test_the_state_of_another_release_is_set_aside_before_patching(mini: Path, version: str | None, label: str) -> None:
    edit_manifest(applied(mini), sglang_version=version)
    write_mini_sglang(mini.parent)  # the new release's files
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert code == 0 and len(data["written"]) == 3
    (aside,) = (mini / ".sm120patch").glob("stale-*")
    assert aside.name.startswith(f"stale-{label}-") and (aside / "manifest.json").is_file()
    said = [m for m in data["messages"] if m.startswith("the saved state was for sglang ")]
    assert said == [
        f"the saved state was for sglang {version or '(unknown version)'}; 0.5.11 is installed now. "
        f"Old state and backups kept in {aside}"
    ]
    assert json.loads((mini / ".sm120patch" / "manifest.json").read_text())["sglang_version"] == "0.5.11"


def test_a_tree_patched_by_hand_without_state_gets_no_state(mini: Path) -> None:
    """Nothing to write and no record asked for (every patch selected): no state folder."""
    applied(mini)
    patched = tree_hashes(mini / ".sm120patch")
    assert patched  # the state apply left, removed below: as if patched with sed
    for path in sorted((mini / ".sm120patch").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    (mini / ".sm120patch").rmdir()
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert (code, data["headline"], data["written"]) == (0, "already applied: nothing to change", [])
    assert data["state"]["present"] is False and not (mini / ".sm120patch").exists()


def test_a_stale_record_is_written_again_so_verify_checks_by_hash(mini: Path) -> None:
    manifest = applied(mini)
    edit_manifest(manifest, fingerprint="0" * 64)  # as a newer sm120patch's code would see it
    assert {f["checked_by"] for f in verify_json(mini)[1]["files"]} == {"structure"}
    before = tree_hashes(mini)
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert (code, data["headline"], data["written"]) == (0, "already applied: nothing to change", [])
    assert json.loads(manifest.read_text())["fingerprint"] != "0" * 64
    assert {f["checked_by"] for f in verify_json(mini)[1]["files"]} == {"hash"}
    assert {k: v for k, v in tree_hashes(mini).items() if ".sm120patch" not in k} == {
        k: v for k, v in before.items() if ".sm120patch" not in k
    }


def test_a_record_another_run_changed_meanwhile_is_left_to_it(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = applied(mini)
    edit_manifest(manifest, fingerprint="0" * 64)
    recorded = manifest.read_bytes()

    def changed_meanwhile(plan: object) -> bool:
        """Fake: another apply or revert wrote the files while this one waited for the lock."""
        return False

    monkeypatch.setattr(apply_module, "_still_current", changed_meanwhile)
    assert jrun("apply", "--sglang-path", str(mini))[0] == 0
    assert manifest.read_bytes() == recorded


def test_the_record_of_another_release_is_not_rewritten(mini: Path) -> None:
    manifest = applied(mini)
    edit_manifest(manifest, sglang_version="0.5.10")  # upgraded; the new release's files patched by hand
    for rel in (COMM, SERVER_ARGS, FUSION):  # patched, but not the bytes apply wrote
        with (mini / rel).open("a") as fh:
            fh.write("# patched by hand after the upgrade\n")
    recorded = manifest.read_bytes()
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert (code, data["headline"]) == (0, "already applied: nothing to change")
    assert manifest.read_bytes() == recorded


def test_a_version_that_moved_over_the_files_apply_wrote_is_the_same_tree(mini: Path) -> None:
    """The saved state names another version, but each file holds what apply wrote: the
    version moved (a checkout's tag, ``_version.py`` written by ``pip install -e``), the tree
    did not.  apply records the version and keeps the state; verify never says "replaced"."""
    manifest = applied(mini)
    edit_manifest(manifest, sglang_version=None)
    code, data = jrun("verify", "--sglang-path", str(mini))
    assert (code, data["headline"]) == (0, "all patches applied")
    assert data["state"]["stale"] is False
    assert data["messages"][0] == (
        "the saved state was written when this sglang read as (unknown version); its files still hold what "
        "apply wrote, so it is this tree's state (revert restores from it)"
    )
    assert not any("replaced" in note for note in data["messages"])
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert (code, data["headline"]) == (0, "already applied: nothing to change")
    assert data["messages"][-1] == (
        "the saved state was written when this sglang read as (unknown version); its files still hold what "
        "apply wrote, so it is this tree's state, now recorded as sglang 0.5.11"
    )
    assert json.loads(manifest.read_text())["sglang_version"] == "0.5.11"


def test_verify_judges_a_moved_version_by_its_files_once(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether the state is this tree's is judged once per verify (the skipped patches, the
    state's summary, the verdict and its note all take that answer): no file of it is read
    and hashed twice for it."""
    from collections import Counter

    from sm120patch.patcher.transaction import identity

    edit_manifest(applied(mini), sglang_version=None)
    hashed: Counter[str] = Counter()
    real = identity.sha256_file

    def counted(path: Path) -> str | None:
        hashed[str(path)] += 1
        return real(path)

    monkeypatch.setattr(identity, "sha256_file", counted)
    outcome = verify(from_directory(mini))
    assert (outcome.exit_code, outcome.code) == (ExitCode.OK, None)
    assert outcome.state is not None and outcome.state.stale is False
    assert hashed and max(hashed.values()) == 1, hashed


def test_ctrl_c_while_replacing_files_is_finished_by_the_next_apply(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = mini / ".sm120patch" / "journal.json"

    def ctrl_c_at_the_first_replace(step: str) -> None:
        """Fake: the user presses Ctrl-C as apply replaces its first file."""
        if step == "replace":
            raise KeyboardInterrupt

    monkeypatch.setattr(fsutil, "STEP_HOOK", ctrl_c_at_the_first_replace)
    code, out, err = run("apply", "--sglang-path", str(mini), "--json")
    said = (
        "interrupted while sglang's files were being replaced: each is either as before or fully replaced, and the "
        f"next `sm120patch apply` or `sm120patch revert` finishes what was started ({journal})"
    )
    assert (code, json.loads(out)["error"], err.strip()) == (130, said, f"error: [interrupted] {said}")
    monkeypatch.setattr(fsutil, "STEP_HOOK", None)

    code, data = verify_json(mini)
    assert code == 1 and data["state"]["interrupted"] is True
    assert data["messages"] == [
        f"an apply/revert was interrupted ({journal}); the next `sm120patch apply` or `revert` finishes it"
    ]
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert code == 0 and not journal.exists()
    assert data["written"] == []  # the interrupted apply's files were finished, nothing planned again
    assert any(m.startswith("recovered an interrupted apply (pid ") for m in data["messages"])
    assert data["headline"] == "finished the interrupted run (see its note); nothing else to change"
    assert verify_json(mini)[1]["headline"] == "all patches applied"


def test_drift_that_lands_while_apply_waits_for_the_lock_stops_the_write(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_recover = apply_module.recover

    def recover_then_a_hand_edit(state: object) -> str | None:
        """Fake: as apply takes the lock, someone renames the fusion gate (the real recover runs first)."""
        said = real_recover(state)  # type: ignore[arg-type]
        (mini / COMM).write_text(FILES[COMM].replace("def apply_flashinfer_allreduce_fusion(", "def fusion_allowed("))
        return said

    monkeypatch.setattr(apply_module, "recover", recover_then_a_hand_edit)
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert code == 1 and data["written"] == []
    assert data["headline"].startswith(
        "drift in sglang 0.5.11, nothing was written: sglang/srt/layers/communicator.py: "
    )
    assert (mini / SERVER_ARGS).read_text() == FILES[SERVER_ARGS]  # its change was ready, and not written
    assert not (mini / ".sm120patch" / "manifest.json").exists()


def test_a_plan_made_again_under_the_lock_keeps_what_was_asked(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another run changed a file while apply waited for the lock: the plan made again writes
    the auto-enable in the form asked (any TP), not the default."""
    real_recover = apply_module.recover

    def recover_then_an_edit(state: object) -> str | None:
        """Fake: as apply takes the lock, someone adds a comment to the communicator."""
        said = real_recover(state)  # type: ignore[arg-type]
        (mini / COMM).write_text(FILES[COMM] + "# tuned\n")
        return said

    monkeypatch.setattr(apply_module, "recover", recover_then_an_edit)
    code, data = jrun("apply", "--sglang-path", str(mini), "--auto-enable-tp", "any")
    assert code == 0 and len(data["written"]) == 3
    server_args = (mini / SERVER_ARGS).read_text()
    assert "is_sm120_supported()" in server_args and ".tp_size == 2" not in server_args


def test_each_file_is_reported_once_as_it_stands(mini: Path) -> None:
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert code == 0
    files = {f["file"]: (f["recorded"], f["pristine"], f["checked_by"]) for f in data["files"]}
    assert files == {f"sglang/{rel}": ("patched", False, "structure") for rel in (COMM, FUSION, SERVER_ARGS)}
    assert sorted(os.listdir(mini / ".sm120patch" / "backups" / "srt" / "layers")) == [
        "communicator.py",
        "flashinfer_comm_fusion.py",
    ]


def test_the_saved_state_records_where_sglang_is(mini: Path) -> None:
    """The manifest names the package it belongs to (an upgrade or a copied tree is told by it)."""
    import json

    from sm120patch.patcher.commands.apply import apply as apply_tree
    from sm120patch.sglang.tree import from_directory as locate_here

    assert apply_tree(locate_here(mini)).exit_code == 0
    manifest = json.loads((mini / ".sm120patch" / "manifest.json").read_text())
    assert (manifest["sglang_location"], manifest["sglang_version"]) == (str(mini), "0.5.11")


def test_apply_refuses_a_flashinfer_without_the_sm12x_kernel_unless_told(mini: Path) -> None:
    """FakeFlashInfer 0.6.3 beside sglang (``fake_flashinfer``): its allreduce is built for
    SM 9 and 10 only; apply changes nothing unless ``allow_missing_kernel``."""
    from sm120patch.patcher.commands.apply import apply as apply_tree
    from sm120patch.sglang.tree import from_directory as locate_here
    from tests.support.fakes import fake_flashinfer

    fake_flashinfer(mini.parent, "0.6.3", [9, 10])
    before = (mini / "srt/layers/communicator.py").read_bytes()
    refused = apply_tree(locate_here(mini))
    assert refused.exit_code == 1 and refused.written == []
    assert (mini / "srt/layers/communicator.py").read_bytes() == before
    allowed = apply_tree(locate_here(mini), allow_missing_kernel=True)
    assert allowed.exit_code == 0 and allowed.written
