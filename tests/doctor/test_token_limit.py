"""doctor on sglang's fusion token limit: sglang's own, given, measured here, measured elsewhere,
and asked but no longer in the code (the miniature release with the limit)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from sm120patch.doctor.findings import Severity
from sm120patch.doctor.token_limit import token_limit
from sm120patch.patcher.exports import patch_states
from sm120patch.patcher.transaction.state_dir import StateDir
from sm120patch.runner.gpus import Gpu
from sm120patch.sglang.tree import from_directory
from tests.cli.test_fuse_up_to import LIMITED, save_recorded
from tests.support.cli import jrun
from tests.support.mini_sglang import COMM, FILES, write_mini_sglang

H200S = (Gpu(0, "NVIDIA H200", (9, 0)), Gpu(1, "NVIDIA H200", (9, 0)))


@pytest.fixture
def package(tmp_path: Path) -> Path:
    return write_mini_sglang(tmp_path / "site", files={**FILES, COMM: LIMITED})


def said(package: Path, gpus: tuple[Gpu, ...] = H200S, tp: int | None = 2) -> tuple[Severity, str, str]:
    """The one finding's severity, summary and detail, as doctor's JSON gives them; every
    answer names the command that checks it again on this tree as its source."""
    tree = from_directory(package)
    (finding,) = token_limit(tree, patch_states(tree), gpus, tp)
    shown = finding.to_json()
    assert (shown["id"], shown["source"]) == ("token-limit", f"sm120patch verify ({package})")
    return finding.severity, shown["summary"], shown["detail"]


MEASURE_HERE = "`sm120patch bench kernel`, then `sm120patch apply --fuse-up-to measured`"


def test_sglangs_own_limit_is_told_with_how_to_measure_it(package: Path) -> None:
    severity, summary, detail = said(package)
    assert (severity, summary) == (Severity.INFO, "fusion token limit: sglang's own, 2048 tokens (not measured here)")
    assert detail == (
        f"fusion pays at decode sizes and may lose at prefill sizes: {MEASURE_HERE} keeps it only where it wins "
        "on this host"
    )


def test_a_given_limit_is_ok_and_named(package: Path) -> None:
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "300")[0] == 0
    # an OK finding has no advice: its detail is empty (a string, as doctor's JSON promises), not a line
    assert said(package) == (Severity.OK, "fusion token limit: limit 300, given as --fuse-up-to 300", "")


def test_a_measured_limit_matches_this_host_or_says_what_changed(package: Path) -> None:
    save_recorded(package)
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "measured", "--tp", "2")[0] == 0
    severity, summary, detail = said(package)
    assert severity is Severity.OK and summary.endswith("; the measurement matches this host")
    assert f"limit 512, measured by bench on {socket.gethostname()} at TP 2 on " in summary
    assert detail == ""
    severity, summary, detail = said(package, tp=4)
    assert severity is Severity.WARNING
    assert "; the bench result was measured at TP 2, not TP 4" in summary
    assert detail == f"measure again here: {MEASURE_HERE}"
    blackwell = (Gpu(0, "NVIDIA RTX PRO 6000 Blackwell", (12, 0)),) * 2
    assert "not on this host's GPUs" in said(package, gpus=blackwell)[1]
    severity, summary, _ = said(package, gpus=(), tp=None)  # nvidia-smi silent, no --tp: said, not hidden
    assert severity is Severity.OK and summary.endswith(
        "; the measurement matches this host (not compared: the TP (doctor --tp N compares it), "
        "the GPUs (nvidia-smi did not answer))"
    )
    state = StateDir(package)
    manifest = json.loads(state.manifest_path.read_text())
    manifest["token_limit"]["host"] = "elsewhere"
    state.manifest_path.write_text(json.dumps(manifest))
    assert "was measured on elsewhere, not on this host" in said(package)[1]


def test_a_limit_asked_but_gone_from_the_code_is_a_warning(package: Path) -> None:
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "256")[0] == 0
    path = package / COMM
    path.write_text(path.read_text().replace("= 256", "= 1000"))
    severity, summary, detail = said(package)
    assert severity is Severity.WARNING and "but the code is pending" in summary
    assert detail == "run `sm120patch apply` to write it again"


def test_a_release_without_the_limit_has_no_finding(tmp_path: Path) -> None:
    tree = from_directory(write_mini_sglang(tmp_path / "site"))
    assert token_limit(tree, patch_states(tree), H200S, 2) == []


def test_a_limit_in_force_with_no_record_is_told_apart_from_sglangs_own(package: Path) -> None:
    """The file says 512 and the saved state records no ask (written by an older sm120patch):
    doctor names the value in force and sglang's own (the backup's) separately."""
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "512")[0] == 0
    state = StateDir(package)
    manifest = json.loads(state.manifest_path.read_text())
    del manifest["token_limit"]
    state.manifest_path.write_text(json.dumps(manifest))
    assert said(package)[:2] == (
        Severity.INFO,
        "fusion token limit: 512 tokens in force, with no apply recorded that set it (sglang's own: 2048)",
    )


def test_a_version_string_that_moved_keeps_the_recorded_limit(package: Path) -> None:
    """The saved state names another version but the files hold what apply wrote (a checkout's
    tag moved): the state is this tree's, so the ask it records is still named, and a plain
    apply keeps it."""
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "512")[0] == 0
    state = StateDir(package)
    manifest = json.loads(state.manifest_path.read_text())
    manifest["sglang_version"] = "0.5.10"
    state.manifest_path.write_text(json.dumps(manifest))
    assert said(package)[:2] == (Severity.OK, "fusion token limit: limit 512, given as --fuse-up-to 512")
    code, out = jrun("verify", "--sglang-path", str(package))
    assert code == 0 and "fusion token limit in force: limit 512, given as --fuse-up-to 512" in out["messages"]
    assert jrun("apply", "--sglang-path", str(package))[0] == 0
    assert json.loads(state.manifest_path.read_text())["token_limit"]["limit"] == 512


def test_no_limit_is_named_where_sglangs_own_cannot_be_read(package: Path) -> None:
    """The file holds 512, no ask is recorded and the backup that holds sglang's own value is
    gone: doctor cannot tell the two apart, so it names neither (never "sglang's own: None")."""
    assert jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "512")[0] == 0
    state = StateDir(package)
    manifest = json.loads(state.manifest_path.read_text())
    del manifest["token_limit"]
    state.manifest_path.write_text(json.dumps(manifest))
    (state.root / manifest["files"][COMM]["backup"]).unlink()
    tree = from_directory(package)
    assert token_limit(tree, patch_states(tree), H200S, 2) == []
