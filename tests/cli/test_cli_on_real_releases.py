"""The command line on real releases: exit codes, --json, --dry-run, selection, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sm120patch.sglang.layout import COMMUNICATOR as COMM
from sm120patch.sglang.layout import SERVER_ARGS
from tests.support.cli import modules_loaded_by, process_env, run, run_process, tree_hashes
from tests.support.patch_checks import expected_states
from tests.support.realtrees import record_hashes, sha256

pytestmark = pytest.mark.slow  # real sglang releases from the package index


def test_json_verify_before_and_after_apply(release) -> None:
    package = release("0.5.9")
    code, out, _ = run("verify", "--sglang-path", str(package), "--json")
    before = json.loads(out)
    assert code == 1 and before["exit_code"] == 1 and before["ok"] is False
    assert before["schema"] == "sm120patch/1"
    assert before["sglang"]["version"] == "0.5.9"
    assert before["sglang"]["install_kind"] == "wheel"
    assert before["sglang"]["flashinfer_pinned"] == "0.6.3"
    assert before["sglang"]["flashinfer_has_sm12x_allreduce"] is False
    assert before["headline"].startswith("not patched: the files are sglang 0.5.9's release files")
    assert {p["id"]: p["state"] for p in before["patches"]} == expected_states("0.5.9")
    assert before["files"] and all(f["pristine"] for f in before["files"])

    code, out, _ = run("apply", "--sglang-path", str(package), "--json")
    applied = json.loads(out)
    assert code == 0 and sorted(applied["written"]) == ["sglang/" + COMM, "sglang/" + SERVER_ARGS]
    assert applied["state"]["present"] and applied["state"]["sglang_version"] == "0.5.9"

    code, out, _ = run("verify", "--sglang-path", str(package), "--json")
    after = json.loads(out)
    assert code == 0 and after["ok"]
    gate = next(p for p in after["patches"] if p["id"] == "communicator-fusion-gate")
    assert gate["evidence"] == [
        {
            "file": "sglang/" + COMM,
            "line": 97,
            "text": "        (_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)",
        }
    ]
    comm = next(f for f in after["files"] if f["file"] == "sglang/" + COMM)
    assert comm["pristine"] is False and comm["recorded"] == "patched"


def test_human_report_goes_to_stderr_and_json_to_stdout(release) -> None:
    package = release("0.5.9")
    code, out, err = run("apply", "--sglang-path", str(package))
    assert code == 0 and out == ""
    evidence = err[err.index("evidence:") :]  # the file once, then each line number and its code
    assert f"sglang/{COMM}\n" in evidence
    assert re.search(r"^ +75 +_is_sm120_supported = _is_cuda and is_sm120_supported\(\) *$", evidence, re.M)
    assert "patched 2 files" in err
    code, out, err = run("apply", "--sglang-path", str(package))
    assert code == 0 and "already applied" in err


def test_dry_run_writes_nothing_and_prints_a_plain_diff(release) -> None:
    package = release("0.5.9")
    before = tree_hashes(package)
    code, out, err = run("apply", "--sglang-path", str(package), "--dry-run")
    assert code == 0 and "nothing written" in err
    assert out.startswith(f"--- a/sglang/{COMM}\n+++ b/sglang/{COMM}\n")
    assert "+_is_sm120_supported = _is_cuda and is_sm120_supported()\n" in out
    assert "\x1b[" not in out
    assert tree_hashes(package) == before


def test_only_pulls_in_dependencies_and_skip_refuses_a_needed_one(release) -> None:
    package = release("0.5.9")
    code, out, err = run("apply", "--sglang-path", str(package), "--only", "communicator-fusion-gate", "--json")
    data = json.loads(out)
    assert code == 0
    assert "also selecting communicator-flag (required by communicator-fusion-gate)" in data["messages"]
    assert data["written"] == ["sglang/" + COMM]
    assert sha256(package / SERVER_ARGS) == record_hashes(package)[SERVER_ARGS]

    code, out, err = run("apply", "--sglang-path", str(package), "--skip", "communicator-flag")
    assert code == 2
    assert "cannot skip communicator-flag: communicator-fusion-gate needs it" in err

    code, out, err = run("apply", "--sglang-path", str(package), "--only", "no-such-patch")
    assert code == 2 and "unknown patch id no-such-patch" in err

    # The rest later: only server_args.py changes, communicator.py keeps its backup.
    code, out, _ = run("apply", "--sglang-path", str(package), "--json")
    assert code == 0 and json.loads(out)["written"] == ["sglang/" + SERVER_ARGS]
    code, out, _ = run("revert", "--sglang-path", str(package), "--json")
    assert code == 0
    record = record_hashes(package)
    assert sha256(package / COMM) == record[COMM]
    assert sha256(package / SERVER_ARGS) == record[SERVER_ARGS]


def test_list_shows_every_patch_and_its_state(release) -> None:
    package = release("0.5.14")
    code, out, _ = run("list", "--sglang-path", str(package), "--json")
    data = json.loads(out)
    assert code == 0
    assert {p["id"]: p["state"] for p in data["patches"]}["fusion-backend-resolver"] == "pending"
    code, out, _ = run("list", "--sglang-path", str(package), "--docs")
    assert "Remove when" in out and "fusion-backend-resolver" in out  # the docs asked for go to stdout
    assert "``" not in out  # rendered: no RST literals


def test_not_an_sglang_path_is_a_usage_error(tmp_path: Path) -> None:
    import click

    code, out, err = run("verify", "--sglang-path", str(Path(click.__file__).parent), "--json")
    assert code == 2
    data = json.loads(out)
    assert data["ok"] is False and "not an sglang package (it is the package 'click')" in data["error"]
    code, _, err = run("verify", "--sglang-path", str(tmp_path / "missing"))
    assert code == 2 and "not a directory" in err


def test_no_sglang_in_this_interpreter_exits_2_and_says_what_to_pass(tmp_path: Path) -> None:
    proc = run_process("verify", cwd=tmp_path, env=process_env(drop=["PYTHONPATH"]))
    assert proc.returncode == 2
    assert "no sglang found in this interpreter" in proc.stderr
    assert "--python" in proc.stderr and "--sglang-path" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_piped_output_has_no_colour(release) -> None:
    package = release("0.5.9")
    proc = run_process("verify", "--sglang-path", package, env=process_env(drop=["NO_COLOR", "FORCE_COLOR"]))
    assert proc.returncode == 1
    assert "\x1b[" not in proc.stderr and "communicator-fusion-gate" in proc.stderr


def test_revert_from_saved_state_never_loads_libcst(release) -> None:
    """Restoring compares hashes and copies backups; it must not pay for (or depend on) the
    parser, e.g. in a slim image where only the state and the tool are left."""
    package = release("0.5.9")
    assert run("apply", "--sglang-path", str(package))[0] == 0
    assert "libcst" not in modules_loaded_by("revert", "--sglang-path", str(package))
    assert sha256(package / COMM) == record_hashes(package)[COMM]
