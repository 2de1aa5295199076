"""Fast never means blind: a file is trusted by hash only while it is byte for byte what the
last apply of this very code wrote and recorded; anything else is checked by structure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sm120patch.cli import main
from tests.mini_sglang import COMM, FUSION, SERVER_ARGS, write_mini_sglang


def verify(package: Path) -> dict:
    result = CliRunner().invoke(main, ["verify", "--sglang-path", str(package), "--json"])
    return json.loads(result.stdout)


def checked_by(data: dict) -> set[str]:
    return {f["checked_by"] for f in data["files"]}


@pytest.fixture
def applied(tmp_path: Path) -> Path:
    package = write_mini_sglang(tmp_path / "site")
    assert CliRunner().invoke(main, ["apply", "--sglang-path", str(package)]).exit_code == 0
    return package


def manifest_path(package: Path) -> Path:
    return package / ".sm120patch" / "manifest.json"


def test_untouched_tree_is_trusted_by_hash_without_libcst(applied: Path) -> None:
    data = verify(applied)
    assert data["ok"] and checked_by(data) == {"hash"}
    assert {p["id"]: p["state"] for p in data["patches"]}["workspace-preflight"] == "applied"
    gate = next(p for p in data["patches"] if p["id"] == "communicator-fusion-gate")
    assert gate["evidence"][0]["text"].strip() == "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)"
    probe = (
        "import sys\nfrom sm120patch.cli import main\n"
        f"try:\n    main(['verify', '--sglang-path', {str(applied)!r}])\n"
        "except SystemExit as e:\n    assert e.code == 0\n"
        "print(sorted(m for m in ('libcst', 'rich') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.stdout.strip() == "['rich']"  # rich renders for people; libcst never loads


def test_a_hand_edit_is_checked_by_structure(applied: Path) -> None:
    gate = applied / COMM
    gate.write_text(gate.read_text().replace(" or _is_sm120_supported)", ")"))  # undone by hand
    data = verify(applied)
    assert checked_by(data) == {"structure"} and data["exit_code"] == 1
    assert {p["id"]: p["state"] for p in data["patches"]}["communicator-fusion-gate"] == "pending"


def test_a_reinstalled_file_is_checked_by_structure(applied: Path) -> None:
    from tests.mini_sglang import FILES

    (applied / FUSION).write_text(FILES[FUSION])  # what a `pip install --force-reinstall` leaves
    data = verify(applied)
    assert checked_by(data) == {"structure"}
    assert {p["id"]: p["state"] for p in data["patches"]}["workspace-preflight"] == "pending"


def test_a_tampered_manifest_is_not_believed(applied: Path) -> None:
    from tests.mini_sglang import FILES
    from tests.realtrees import sha256

    # Someone restores the pristine file and "fixes up" the recorded hash to match it.
    (applied / SERVER_ARGS).write_text(FILES[SERVER_ARGS])
    manifest = json.loads(manifest_path(applied).read_text())
    manifest["checked"][SERVER_ARGS]["sha256"] = sha256(applied / SERVER_ARGS)
    manifest_path(applied).write_text(json.dumps(manifest))
    data = verify(applied)
    assert checked_by(data) == {"structure"}
    assert {p["id"]: p["state"] for p in data["patches"]}["server-args-auto-enable"] == "pending"


@pytest.mark.parametrize(
    ("field", "value"),
    [("fingerprint", "0" * 64), ("tool_version", "0.1.0"), ("patch_set", ["communicator-import"])],
)
def test_a_manifest_from_other_code_or_a_partial_apply_is_not_trusted(applied: Path, field: str, value) -> None:
    manifest = json.loads(manifest_path(applied).read_text())
    manifest[field] = value
    if field == "tool_version":  # a manifest written by another version has another fingerprint too
        manifest["fingerprint"] = "another version's code"
    manifest_path(applied).write_text(json.dumps(manifest))
    data = verify(applied)
    assert checked_by(data) == {"structure"} and data["ok"]  # still applied, by structure


def test_an_old_format_manifest_is_read_and_checked_by_structure(applied: Path) -> None:
    manifest = json.loads(manifest_path(applied).read_text())
    for key in ("fingerprint", "patch_set", "registry", "checked", "seal"):
        del manifest[key]
    manifest["format"] = 1  # written by sm120patch 0.1.0
    manifest_path(applied).write_text(json.dumps(manifest))
    data = verify(applied)
    assert data["ok"] and checked_by(data) == {"structure"}


def test_apply_only_a_subset_is_not_trusted_later(tmp_path: Path) -> None:
    package = write_mini_sglang(tmp_path / "site")
    runner = CliRunner()
    assert runner.invoke(main, ["apply", "--sglang-path", str(package), "--only", "communicator-flag"]).exit_code == 0
    data = verify(package)
    assert checked_by(data) == {"structure"} and data["exit_code"] == 1


def test_a_no_op_apply_renews_a_stale_record(applied: Path) -> None:
    """After an sm120patch upgrade the record is another code's: verify falls back to parsing
    until an apply (which has nothing to write) records the tree again."""
    manifest = json.loads(manifest_path(applied).read_text())
    manifest["fingerprint"] = "the previous sm120patch"
    manifest_path(applied).write_text(json.dumps(manifest))
    before = {p.name: p.read_bytes() for p in applied.rglob("*.py")}
    assert checked_by(verify(applied)) == {"structure"}
    result = CliRunner().invoke(main, ["apply", "--sglang-path", str(applied), "--json"])
    assert json.loads(result.stdout)["written"] == []
    assert {p.name: p.read_bytes() for p in applied.rglob("*.py")} == before  # no sglang file touched
    assert checked_by(verify(applied)) == {"hash"}
