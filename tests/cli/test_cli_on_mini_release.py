"""The command line on the miniature release (tests/support/mini_sglang.py): fast, no network.

The same behaviours run on real releases in the slow tier; here they run in seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch import __version__
from sm120patch.patcher.plan import planner as plan
from tests.support.cli import jrun, run, tree_hashes
from tests.support.fakes import fake_flashinfer
from tests.support.mini_sglang import COMM, FUSION, SERVER_ARGS, VERSION
from tests.support.patch_checks import expected_states
from tests.support.realtrees import record_hashes, sha256

TARGETS = (COMM, FUSION, SERVER_ARGS)


def test_apply_verify_apply_again_revert(mini: Path) -> None:
    code, before = jrun("verify", "--sglang-path", str(mini))
    assert code == 1 and before["headline"].startswith("not patched: the files are sglang 0.5.11's release files")
    assert {p["id"]: p["state"] for p in before["patches"]} == expected_states(VERSION)
    code, applied = jrun("apply", "--sglang-path", str(mini))
    assert code == 0 and sorted(applied["written"]) == sorted(f"sglang/{t}" for t in TARGETS)
    assert applied["state"]["present"] and applied["state"]["sglang_version"] == "0.5.11"
    assert all(p["state_after"] in ("applied", "not-needed") for p in applied["patches"])
    code, verified = jrun("verify", "--sglang-path", str(mini))
    assert code == 0 and verified["headline"] == "all patches applied"
    assert {f["file"]: f["recorded"] for f in verified["files"]} == {f"sglang/{t}": "patched" for t in TARGETS}
    patched = tree_hashes(mini)
    code, again = jrun("apply", "--sglang-path", str(mini))
    assert code == 0 and again["written"] == [] and "already applied" in again["headline"]
    assert tree_hashes(mini) == patched
    code, reverted = jrun("revert", "--sglang-path", str(mini))
    assert code == 0 and sorted(reverted["written"]) == sorted(f"sglang/{t}" for t in TARGETS)
    record = record_hashes(mini)
    assert all(sha256(mini / t) == record[t] for t in TARGETS)


def test_dry_run_prints_a_plain_diff_and_writes_nothing(mini: Path) -> None:
    before = tree_hashes(mini)
    code, out, err = run("apply", "--sglang-path", str(mini), "--dry-run")
    assert code == 0 and "dry run: would change 3 files; nothing written" in err
    assert out.startswith(f"--- a/sglang/{COMM}\n+++ b/sglang/{COMM}\n") and "\x1b[" not in out
    assert "+        if not is_sm120_supported():\n" in out
    assert tree_hashes(mini) == before


def test_only_pulls_in_requirements_and_skip_refuses_a_needed_one(mini: Path) -> None:
    code, data = jrun("apply", "--sglang-path", str(mini), "--only", "communicator-fusion-gate")
    assert code == 0 and data["written"] == [f"sglang/{COMM}"]
    assert "also selecting communicator-flag (required by communicator-fusion-gate)" in data["messages"]
    code, _, err = run("apply", "--sglang-path", str(mini), "--skip", "communicator-import")
    assert code == 2 and "cannot skip communicator-import: communicator-flag needs it" in err
    code, _, err = run("apply", "--sglang-path", str(mini), "--only", "nope")
    assert code == 2 and "unknown patch id nope" in err


def test_apply_refuses_while_flashinfer_lacks_the_kernel(mini: Path) -> None:
    fake_flashinfer(mini.parent, "0.6.16", [9, 10])
    before = tree_hashes(mini)
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert code == 1 and data["written"] == []
    assert data["headline"].startswith(
        "refusing to patch, nothing was written: FlashInfer 0.6.16 has no SM12x allreduce kernel ("
    )
    works = "what works is sglang >= 0.5.18 with the FlashInfer it pins, or flashinfer-python>=0.6.17"
    assert works in data["headline"]
    assert data["headline"].endswith("--allow-missing-kernel writes anyway")
    assert all(p["state_after"] == p["state"] for p in data["patches"])  # nothing promised
    assert "pending" in {p["state"] for p in data["patches"]}
    assert not any("the gates are open" in m for m in data["messages"])
    assert tree_hashes(mini) == before


def test_allow_missing_kernel_writes_with_the_warning_and_strict_still_refuses(mini: Path) -> None:
    fake_flashinfer(mini.parent, "0.6.16", [9, 10])
    before = tree_hashes(mini)
    code, data = jrun("apply", "--sglang-path", str(mini), "--allow-missing-kernel", "--strict")
    assert (code, data["code"], data["written"]) == (1, "strict", [])
    assert "supported_major_versions=[9, 10]" in data["warnings"][0]
    assert tree_hashes(mini) == before
    code, data = jrun("apply", "--sglang-path", str(mini), "--allow-missing-kernel")
    assert code == 0 and data["warnings"] and data["written"]


def test_dry_run_says_apply_would_refuse(mini: Path) -> None:
    fake_flashinfer(mini.parent, "0.6.16", [9, 10])
    code, data = jrun("apply", "--sglang-path", str(mini), "--dry-run")
    assert code == 0 and data["written"] == [] and data["diff"]
    assert any(m.startswith("apply would refuse: FlashInfer 0.6.16") for m in data["messages"])


def test_strict_passes_with_the_sm12x_kernel(mini: Path) -> None:
    fake_flashinfer(mini.parent, "0.6.18", [9, 10, 12])
    code, data = jrun("apply", "--sglang-path", str(mini), "--strict")
    assert code == 0 and data["warnings"] == [] and len(data["written"]) == 3
    assert data["sglang"]["flashinfer_has_sm12x_allreduce"] is True


def test_drift_writes_nothing_and_promises_nothing(mini: Path) -> None:
    gate = mini / COMM
    gate.write_text(gate.read_text().replace("def apply_flashinfer_allreduce_fusion(", "def fusion_allowed("))
    before = tree_hashes(mini)
    code, _out, err = run("apply", "--sglang-path", str(mini))
    assert code == 1 and "nothing was written" in err and "apply_flashinfer_allreduce_fusion" in err
    assert "-> applied" not in err  # the other patches are reported as they are, pending
    assert tree_hashes(mini) == before and not (mini / ".sm120patch" / "manifest.json").exists()
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert {p["id"]: (p["state"], p["state_after"]) for p in data["patches"]}["workspace-preflight"] == (
        "pending",
        "pending",
    )


def test_a_patch_that_breaks_the_code_is_an_internal_error(mini: Path, monkeypatch) -> None:
    def broken(source, filename, mode, **kwargs):
        raise SyntaxError("invalid syntax")

    monkeypatch.setattr(plan, "compile", broken, raising=False)
    before = tree_hashes(mini)
    code, _out, err = run("apply", "--sglang-path", str(mini))
    assert code == 70 and "does not compile" in err and "nothing was written" in err
    assert tree_hashes(mini) == before


def test_unparsable_utils_names_the_file_and_line(mini: Path) -> None:
    utils = mini / "srt/utils/__init__.py"
    utils.write_text("import torch\ndef broken(:\n")  # a hand edit gone wrong
    code, _out, err = run("verify", "--sglang-path", str(mini))
    assert code == 1
    assert f"{utils}:2: does not parse" in err
    assert "upgrade" not in err.lower()  # not the "no SM12x probe" advice


def test_unreadable_record_is_reported(mini: Path) -> None:
    (record,) = mini.parent.glob("sglang-*.dist-info/RECORD")
    record.unlink()
    record.mkdir()  # reading it fails, whoever runs the test
    _, data = jrun("verify", "--sglang-path", str(mini))
    assert (
        "cannot read" in data["sglang"]["record_problem"]
        and "pristine check is off" in data["sglang"]["record_problem"]
    )
    assert {f["file"]: f["pristine"] for f in data["files"]} == {f"sglang/{t}": None for t in TARGETS}
    _code, _out, err = run("verify", "--sglang-path", str(mini))
    assert "no RECORD hash (cannot read" in err


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ("{not json", "is corrupted"),
        ('{"format": 99, "files": {}}', "written by a newer sm120patch"),
    ],
)
def test_damaged_state_is_an_environment_error(mini: Path, manifest: str, message: str) -> None:
    assert run("apply", "--sglang-path", str(mini))[0] == 0
    (mini / ".sm120patch" / "manifest.json").write_text(manifest)
    for command in ("verify", "revert", "apply"):
        code, _out, err = run(command, "--sglang-path", str(mini))
        assert code == 2 and message in err and "Traceback" not in err, command


def test_environment_variable_stands_for_sglang_path(mini: Path) -> None:
    _, data = jrun("verify", env={"SM120PATCH_SGLANG_PATH": str(mini)})
    assert data["sglang"]["location"] == str(mini.resolve())


@pytest.mark.parametrize("command", ["verify", "list", "doctor"])
@pytest.mark.offline
def test_an_option_on_the_command_line_wins_over_the_other_from_the_environment(
    mini: Path, tmp_path: Path, command: str
) -> None:
    """The Docker example sets SM120PATCH_PYTHON for the image's python: `--sglang-path DIR`
    typed in the container still looks at DIR, and the reverse."""
    elsewhere = {"SM120PATCH_PYTHON": str(tmp_path / "no-such-python")}
    _, data = jrun(command, "--sglang-path", str(mini), env=elsewhere)
    assert data["sglang"]["location"] == str(mini.resolve())
    code, data = jrun(command, "--python", str(tmp_path / "no-such-python"), env={"SM120PATCH_SGLANG_PATH": str(mini)})
    assert code == 2 and "no such interpreter" in data["error"]
    both = {**elsewhere, "SM120PATCH_SGLANG_PATH": str(mini)}
    code, data = jrun(command, env=both)
    assert code == 2 and "SM120PATCH_PYTHON and SM120PATCH_SGLANG_PATH are both set" in data["error"]
    code, data = jrun(command, "--sglang-path", str(mini), env=both)  # typed: it wins
    assert data["sglang"]["location"] == str(mini.resolve())
    cleared = {"SM120PATCH_PYTHON": "", "SM120PATCH_SGLANG_PATH": str(mini)}  # docs/containers.md
    assert jrun(command, env=cleared)[1]["sglang"]["location"] == str(mini.resolve())


def test_version_says_which_releases() -> None:
    code, out, _ = run("--version")
    assert code == 0 and out.startswith(f"sm120patch {__version__}") and "0.5.4" in out and "0.5.23" in out


def test_not_an_sglang_directory_is_a_usage_error(tmp_path: Path) -> None:
    code, data = jrun("verify", "--sglang-path", str(tmp_path))
    assert code == 2 and data["ok"] is False and "not an sglang package" in data["error"]
