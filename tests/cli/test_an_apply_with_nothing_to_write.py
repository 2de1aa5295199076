"""An apply that finds nothing to write in sglang's files (the miniature release, in this
process): what it still records in the saved state, and what it leaves as it found it.

* the sweep record (``sweep.json``) that lets verify trust the tree without reading the
  package again is made anew where it was lost or damaged, best effort (a full disk is no
  failure);
* a new source of the fusion token limit asked, for the limit already in the files, is
  recorded; so is a limit asked of a tree whose saved state was lost;
* a state that holds, or one of another release, is not written to.

Fakes: an OSError at the write of the sweep record (``tests/support/oserrors.py``); the sweep
replaced by one that fails the test (``forbid_sweeping``)."""

from __future__ import annotations

import errno
import json
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from sm120patch.patcher.transaction.state_dir import StateDir
from tests.cli.test_a_moved_version_is_recorded import MOVED
from tests.cli.test_doctor_recalls_the_sweep import applied_with_a_gate_no_patch_owns, forbid_sweeping
from tests.cli.test_fuse_up_to import LIMITED, save_recorded
from tests.cli.test_unknown_sm_checks import NEW_WARNING
from tests.cli.test_verify_and_apply_verdicts import applied, edit_manifest
from tests.support import oserrors
from tests.support.cli import jrun
from tests.support.mini_sglang import COMM, FILES, write_mini_sglang

ALREADY = "already applied: nothing to change"


def apply_again(package: Path, *args: str) -> dict:
    code, data = jrun("apply", "--sglang-path", str(package), *args)
    assert (code, data.get("headline")) == (0, ALREADY), data
    return data


def test_a_lost_sweep_record_is_made_again_and_verify_then_need_not_sweep(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    applied_with_a_gate_no_patch_owns(mini)
    sweep = StateDir(mini).sweep_path
    sweep.unlink()  # lost: a copy of the tree that left it out, say
    apply_again(mini)
    assert sweep.is_file()
    forbid_sweeping(monkeypatch)
    code, data = jrun("verify", "--sglang-path", str(mini))
    assert code == 0 and {f["checked_by"] for f in data["files"]} == {"hash"}
    assert NEW_WARNING in data["warnings"]  # the gate, from the record


def test_an_apply_asked_again_of_a_trusted_tree_recalls_its_sweep(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record is read, not the package: an apply in every image build costs no sweep."""
    applied_with_a_gate_no_patch_owns(mini)
    forbid_sweeping(monkeypatch)
    assert NEW_WARNING in apply_again(mini)["warnings"]  # the gate, from the record


def test_a_damaged_sweep_record_is_written_anew(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record cut short (a disk that filled as it was copied) is no record to compare with:
    apply writes it again and verify trusts it."""
    applied_with_a_gate_no_patch_owns(mini)
    sweep = StateDir(mini).sweep_path
    sweep.write_bytes(sweep.read_bytes()[:40])
    apply_again(mini)
    assert json.loads(sweep.read_bytes())["seal"]
    forbid_sweeping(monkeypatch)
    code, data = jrun("verify", "--sglang-path", str(mini))
    assert code == 0 and {f["checked_by"] for f in data["files"]} == {"hash"}


def test_a_sweep_record_that_cannot_be_written_does_not_fail_apply(mini: Path, tmp_path: Path) -> None:
    applied_with_a_gate_no_patch_owns(mini)
    sweep = StateDir(mini).sweep_path
    sweep.unlink()
    # the temp file the record is written to before it takes its name (``*``: its random part)
    temp = oserrors.Point("open", "site/sglang/.sm120patch/.sweep.json.*.sm120patch-tmp", 1)
    with oserrors.fail(tmp_path, temp, errno.ENOSPC) as armed:  # a full disk
        apply_again(mini)
    assert armed.fired == temp and not sweep.exists()
    code, data = jrun("verify", "--sglang-path", str(mini))  # without the record: swept again
    assert code == 0 and NEW_WARNING in data["warnings"]


def of_another_release(mini: Path) -> None:
    """The tree holds what the patches write, and the state beside it is an older release's
    whose writing is no longer in these files (an upgrade to a release that needs no patch)."""
    manifest = applied(mini)
    files = json.loads(manifest.read_text())["files"]
    edit_manifest(
        manifest,
        sglang_version="0.5.10",
        files={rel: dict(rec, sha256_after="0" * 64) for rel, rec in files.items()},
    )


def state_files(package: Path) -> dict[str, tuple[int, int, bytes]]:
    """Each file of the saved state: inode, mtime and bytes (a rewrite with the same bytes
    still shows).  The lock file is left out: a run that takes the lock to write writes its
    pid into it, whether it then writes or not."""
    root = StateDir(package).root
    return {
        str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "lock"
    }


@pytest.mark.parametrize(
    "saved",
    [applied, of_another_release],
    ids=["a state that holds, with its sweep record", "the state of another release"],
)
def test_the_saved_state_is_left_as_it_was_found(mini: Path, saved: Callable[[Path], object]) -> None:
    saved(mini)
    before = state_files(mini)
    assert "sweep.json" in before
    apply_again(mini)
    assert state_files(mini) == before


@pytest.fixture
def limited(tmp_path: Path) -> Path:
    """The miniature release with sglang's fusion token limit (2048)."""
    return write_mini_sglang(tmp_path / "site", files={**FILES, COMM: LIMITED})


def test_a_measured_limit_equal_to_the_given_one_is_recorded_as_measured(limited: Path) -> None:
    """``--fuse-up-to measured`` after ``--fuse-up-to 512``, the crossover measured being 512:
    the files stay, and verify names the measurement as the limit's source."""
    assert jrun("apply", "--sglang-path", str(limited), "--fuse-up-to", "512")[0] == 0
    save_recorded(limited)
    apply_again(limited, "--fuse-up-to", "measured", "--tp", "2")
    messages = jrun("verify", "--sglang-path", str(limited))[1]["messages"]
    said = next(m for m in messages if m.startswith("fusion token limit in force: "))
    assert said.startswith(f"fusion token limit in force: limit 512, measured by bench on {socket.gethostname()} ")


def test_a_limit_asked_of_a_tree_whose_state_was_lost_is_recorded(limited: Path) -> None:
    """The tree holds the limit, its saved state is gone (an image build that dropped the
    folder): ``apply --only fusion-token-limit --fuse-up-to 512`` writes no file, records the
    ask for verify, and does not claim the state named another version."""
    assert jrun("apply", "--sglang-path", str(limited), "--fuse-up-to", "512")[0] == 0
    shutil.rmtree(StateDir(limited).root)
    data = apply_again(limited, "--only", "fusion-token-limit", "--fuse-up-to", "512")
    assert not any(MOVED in m for m in data["messages"])
    assert json.loads(StateDir(limited).manifest_path.read_text())["sglang_version"] == "0.5.11"
    messages = jrun("verify", "--sglang-path", str(limited))[1]["messages"]
    assert "fusion token limit in force: limit 512, given as --fuse-up-to 512" in messages
