"""Fast never means blind: a file is trusted by hash only while it is byte for byte what the
last apply of this very code wrote and recorded; anything else is checked by structure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan import trust
from sm120patch.patcher.plan.types import Plan
from sm120patch.patcher.transaction.state_dir import StateDir
from sm120patch.sglang.tree import SglangTree, from_directory
from tests.support.cli import jrun, modules_loaded_by, run
from tests.support.mini_sglang import COMM, FILES, FUSION, SERVER_ARGS
from tests.support.realtrees import sha256


def verify(package: Path) -> dict:
    return jrun("verify", "--sglang-path", str(package))[1]


def checked_by(data: dict) -> set[str]:
    return {f["checked_by"] for f in data["files"]}


@pytest.fixture
def applied(mini: Path) -> Path:
    assert run("apply", "--sglang-path", str(mini))[0] == 0
    return mini


def manifest_path(package: Path) -> Path:
    return package / ".sm120patch" / "manifest.json"


def test_untouched_tree_is_trusted_by_hash_without_libcst(applied: Path) -> None:
    data = verify(applied)
    assert data["ok"] and checked_by(data) == {"hash"}
    assert {p["id"]: p["state"] for p in data["patches"]}["workspace-preflight"] == "applied"
    gate = next(p for p in data["patches"] if p["id"] == "communicator-fusion-gate")
    assert gate["evidence"][0]["text"].strip() == "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)"


@pytest.mark.parametrize("command", [["verify"], ["verify", "--json"], ["list"]], ids=" ".join)
@pytest.mark.offline
def test_a_trusted_tree_is_read_without_libcst(applied: Path, command: list[str]) -> None:
    """The everyday paths stay as cheap as a click CLI (benchmarks/run.py measures how cheap)."""
    loaded = modules_loaded_by(*command, "--sglang-path", str(applied))
    assert "libcst" not in loaded
    assert "rich" in loaded or "--json" in command  # rich renders for people


def test_a_hand_edit_is_checked_by_structure(applied: Path) -> None:
    gate = applied / COMM
    gate.write_text(gate.read_text().replace(" or _is_sm120_supported)", ")"))  # undone by hand
    data = verify(applied)
    assert checked_by(data) == {"structure"} and data["exit_code"] == 1
    assert {p["id"]: p["state"] for p in data["patches"]}["communicator-fusion-gate"] == "pending"


def test_a_reinstalled_file_is_checked_by_structure(applied: Path) -> None:
    (applied / FUSION).write_text(FILES[FUSION])  # what a `pip install --force-reinstall` leaves
    data = verify(applied)
    assert checked_by(data) == {"structure"}
    assert {p["id"]: p["state"] for p in data["patches"]}["workspace-preflight"] == "pending"


def test_a_tampered_manifest_is_not_believed(applied: Path) -> None:

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
    ids=["fingerprint", "tool_version", "patch_set"],
)
def test_a_manifest_from_other_code_or_a_partial_apply_is_not_trusted(applied: Path, field: str, value: object) -> None:
    manifest = json.loads(manifest_path(applied).read_text())
    manifest[field] = value
    if field == "tool_version":  # a manifest written by another version has another fingerprint too
        manifest["fingerprint"] = "another version's code"
    manifest_path(applied).write_text(json.dumps(manifest))
    data = verify(applied)
    assert checked_by(data) == {"structure"} and data["ok"]  # still applied, by structure


def test_a_tree_with_a_journal_is_not_trusted(applied: Path) -> None:
    """An apply or revert was interrupted: the record may not describe the files."""
    journal = {"format": 1, "op": "apply", "entries": [], "manifest": None}
    (manifest_path(applied).parent / "journal.json").write_text(json.dumps(journal))
    data = verify(applied)
    assert checked_by(data) == {"structure"}
    assert any("was interrupted" in m for m in data["messages"])


def test_an_old_format_manifest_is_read_and_checked_by_structure(applied: Path) -> None:
    manifest = json.loads(manifest_path(applied).read_text())
    for key in ("fingerprint", "patch_set", "registry", "checked", "seal"):
        del manifest[key]
    manifest["format"] = 1  # written by sm120patch 0.1.0
    manifest_path(applied).write_text(json.dumps(manifest))
    data = verify(applied)
    assert data["ok"] and checked_by(data) == {"structure"}


def test_apply_only_a_subset_is_not_trusted_later(mini: Path) -> None:
    assert run("apply", "--sglang-path", str(mini), "--only", "communicator-flag")[0] == 0
    data = verify(mini)
    assert checked_by(data) == {"structure"} and data["exit_code"] == 0  # the rest: skipped, as asked


def test_a_no_op_apply_renews_a_stale_record(applied: Path) -> None:
    """After an sm120patch upgrade the record is another code's: verify falls back to parsing
    until an apply (which has nothing to write) records the tree again."""
    manifest = json.loads(manifest_path(applied).read_text())
    manifest["fingerprint"] = "the previous sm120patch"
    manifest_path(applied).write_text(json.dumps(manifest))
    before = {p.name: p.read_bytes() for p in applied.rglob("*.py")}
    assert checked_by(verify(applied)) == {"structure"}
    assert jrun("apply", "--sglang-path", str(applied))[1]["written"] == []
    assert {p.name: p.read_bytes() for p in applied.rglob("*.py")} == before  # no sglang file touched
    assert checked_by(verify(applied)) == {"hash"}


def trusted(package: Path) -> tuple[SglangTree, Plan | None]:
    """``trusted_plan`` as the commands call it: on the tree at ``package``, with its state."""
    tree = from_directory(package)
    state = StateDir(tree.package_dir)
    return tree, trust.trusted_plan(tree, state, state.load())


def reseal(package: Path, **changes: Any) -> None:
    """Change fields of the manifest and seal it again, as the code that wrote it would have."""
    state = StateDir(package)
    manifest = state.load()
    assert manifest is not None
    for name, value in changes.items():
        setattr(manifest, name, value)
    manifest.seal = trust._seal(manifest)
    state.save(manifest)


def test_the_trusted_plan_is_the_recorded_tree_file_by_file(applied: Path) -> None:
    tree, plan = trusted(applied)
    assert plan is not None and plan.tree is tree and plan.refusal is None
    manifest = StateDir(applied).load()
    assert manifest is not None
    assert [f.rel for f in plan.files] == sorted(manifest.checked) and {COMM, FUSION, SERVER_ARGS} <= set(
        manifest.checked
    )
    for f in plan.files:
        assert f.path == applied / f.rel and f.original == (applied / f.rel).read_bytes() and not f.changed
        assert f.reports and {r.file for r in f.reports} == {f.rel}
    states = {r.id: r.state for r in plan.reports}
    assert states["communicator-fusion-gate"] is State.APPLIED and states["workspace-preflight"] is State.APPLIED


@pytest.mark.parametrize(
    "changes",
    [
        {"fingerprint": "the previous sm120patch"},  # another code wrote it, and sealed it
        {"sglang_version": "0.5.9"},  # recorded on another release
        {"checked": {}},  # nothing recorded: nothing to trust
        {"fingerprint": "the previous sm120patch", "sglang_version": "0.5.9"},
        {"checked": {}, "fingerprint": "the previous sm120patch"},
    ],
)
def test_a_correctly_sealed_manifest_is_still_not_trusted_when_a_condition_fails(
    applied: Path, changes: dict[str, Any]
) -> None:
    assert trusted(applied)[1] is not None
    reseal(applied, **changes)
    assert trusted(applied)[1] is None
    data = verify(applied)
    assert checked_by(data) == {"structure"} and data["ok"]
