"""The sweep of SM checks on the miniature release: a gate the patches do not know is a
warning in verify, apply and doctor, ``--strict`` refuses on it, and what a patch owns (before
and after apply) or the known list names is not reported.  Real releases: the slow tier
(tests/patcher/plan/test_gate_sweep_releases.py)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from sm120patch.doctor.checks import sm_checks
from sm120patch.doctor.diagnose import diagnose
from sm120patch.patcher.exports import tree_states
from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan import gate_sweep
from sm120patch.patcher.plan.current import read_state
from sm120patch.patcher.plan.gate_sweep import sweep_tree
from sm120patch.patcher.transaction.state_dir import StateDir
from sm120patch.sglang.fusion_path import KNOWN_GATES, ON_PATH
from sm120patch.sglang.tree import from_directory
from tests.doctor.facts import host_with
from tests.support.cli import jrun, run, tree_hashes
from tests.support.fakes import fake_flashinfer
from tests.support.mini_sglang import COMM

#: A module no patch reads, named as sglang 0.5.21+ names its fusions, with a gate of its own.
NEW_MODULE = "srt/layers/layer_boundary/fusions/allreduce.py"
NEW_SOURCE = (
    "from sglang.srt.utils import is_sm90_supported, is_sm100_supported\n\n\n"
    "class FusedAllReduce:\n"
    "    def forward(self, x):\n"
    "        if not (is_sm90_supported() or is_sm100_supported()):\n"
    "            return None\n"
    "        return x\n"
)
#: In the gate's own file, outside the function the gate patch anchors on.
OUTSIDE_ANCHOR = "\n\ndef allreduce_fusion_workspace_ready(size: int):\n    return _is_sm100_supported and size > 0\n"

NEW_WARNING = (
    f"[unknown-sm-check] an SM check this tool does not know: sglang/{NEW_MODULE}:6 FusedAllReduce.forward: "
    "not (is_sm90_supported() or is_sm100_supported())"
)
COMM_WARNING = (
    "[unknown-sm-check] "
    f"an SM check this tool does not know: sglang/{COMM}:20 allreduce_fusion_workspace_ready: _is_sm100_supported"
)


@pytest.fixture
def gated(mini: Path) -> Path:
    """The miniature release with FlashInfer's SM12x kernel beside it (no other warning), one
    unknown gate in a file no patch reads and one in a patched file outside the anchor."""
    fake_flashinfer(mini.parent, "0.6.18", [9, 10, 12])
    (mini / NEW_MODULE).parent.mkdir(parents=True)
    (mini / NEW_MODULE).write_text(NEW_SOURCE)
    with open(mini / COMM, "a") as fh:
        fh.write(OUTSIDE_ANCHOR)
    return mini


def test_verify_reports_both_gates_and_strict_refuses(gated: Path) -> None:
    code, data = jrun("verify", "--sglang-path", str(gated))
    assert code == 1 and data["warnings"] == [COMM_WARNING, NEW_WARNING]
    code, _, err = run("verify", "--sglang-path", str(gated))
    assert (
        "warning: [unknown-sm-check] an SM check this tool does not know: sglang/srt/layers/layer_boundary/fusions/"
        in err
    )


def test_apply_strict_writes_nothing_and_apply_warns(gated: Path) -> None:
    before = tree_hashes(gated)
    code, data = jrun("apply", "--sglang-path", str(gated), "--strict")
    assert (code, data["code"], data["written"], len(data["warnings"])) == (1, "strict", [], 2)
    assert data["warnings"] == [COMM_WARNING, NEW_WARNING]
    assert data["headline"].endswith("refuses the 2 warnings that say the fused path would still not run on SM12x")
    assert tree_hashes(gated) == before
    # the form of the auto-enable in force is said of an apply that wrote, not of a refused one
    assert not any("`sm120patch apply --auto-enable-tp any`" in m for m in data["messages"])
    code, data = jrun("apply", "--sglang-path", str(gated))
    assert code == 0 and len(data["written"]) == 3
    assert any("`sm120patch apply --auto-enable-tp any`" in m for m in data["messages"])
    # The patched file gained lines above the gate (the import): the line is as it is now.
    assert data["warnings"] == [COMM_WARNING.replace(":20 ", ":22 "), NEW_WARNING]


NEW_CHECK = {
    "file": f"sglang/{NEW_MODULE}",
    "line": 6,
    "function": "FusedAllReduce.forward",
    "expression": "not (is_sm90_supported() or is_sm100_supported())",
}
COMM_CHECK = {
    "file": f"sglang/{COMM}",
    "line": 22,  # after apply: the patched file gained its import above
    "function": "allreduce_fusion_workspace_ready",
    "expression": "_is_sm100_supported",
}


def test_the_json_of_verify_and_apply_has_each_check_as_data(gated: Path) -> None:
    code, data = jrun("apply", "--sglang-path", str(gated), "--strict")
    assert code == 1 and data["sm_checks"] == [{**COMM_CHECK, "line": 20}, NEW_CHECK]
    code, data = jrun("apply", "--sglang-path", str(gated))
    assert code == 0 and data["sm_checks"] == [COMM_CHECK, NEW_CHECK]
    for command in ("verify", "apply"):  # the trusted tree: from the record apply left
        code, data = jrun(command, "--sglang-path", str(gated))
        assert code == 0 and data["sm_checks"] == [COMM_CHECK, NEW_CHECK], command
    assert [w for w in data["warnings"] if "SM check" in w] == [COMM_WARNING.replace(":20 ", ":22 "), NEW_WARNING]


def test_a_trusted_tree_still_reports_them_and_verify_strict_refuses(gated: Path) -> None:
    assert jrun("apply", "--sglang-path", str(gated))[0] == 0
    code, data = jrun("verify", "--sglang-path", str(gated))
    assert code == 0 and data["headline"] == "all patches applied"
    assert {f["checked_by"] for f in data["files"]} == {"hash"}
    assert data["warnings"] == [COMM_WARNING.replace(":20 ", ":22 "), NEW_WARNING]
    code, data = jrun("verify", "--sglang-path", str(gated), "--strict")
    assert (code, data["code"], len(data["warnings"])) == (1, "strict", 2)
    assert data["headline"].endswith(", but --strict refuses the 2 warnings about the fused path")
    code, data = jrun("apply", "--sglang-path", str(gated), "--strict")
    assert (code, data["code"], data["written"]) == (1, "strict", [])


def test_patched_mini_release_is_clean_and_its_pending_gates_are_owned(mini: Path) -> None:
    fake_flashinfer(mini.parent, "0.6.18", [9, 10, 12])
    code, data = jrun("verify", "--sglang-path", str(mini), "--strict")
    assert code == 1 and data["warnings"] == [] and "pending" in {p["state"] for p in data["patches"]}
    assert jrun("apply", "--sglang-path", str(mini), "--strict")[0] == 0
    code, data = jrun("verify", "--sglang-path", str(mini), "--strict")
    assert code == 0 and data["warnings"] == []


def test_the_record_is_used_while_the_tree_holds_and_dropped_when_it_does_not(gated: Path) -> None:
    assert jrun("apply", "--sglang-path", str(gated))[0] == 0
    tree = from_directory(gated)
    judged = read_state(tree)
    found = sweep_tree(tree, judged.plan, judged.manifest, judged.by_hash)
    assert judged.by_hash and found.recalled and len(found.unknown) == 2
    # A file added beside the others changes its directory: swept again, and reported.
    (gated / "srt/layers/allreduce_fusion_extra.py").write_text(
        "def allreduce_fusion_enabled():\n    return is_sm100_supported()\n"
    )
    found = sweep_tree(tree, judged.plan, judged.manifest, judged.by_hash)
    assert not found.recalled
    assert sorted(c.function for c in found.unknown) == [
        "FusedAllReduce.forward",
        "allreduce_fusion_enabled",
        "allreduce_fusion_workspace_ready",
    ]


def test_an_edit_in_place_of_a_kept_file_is_swept_again(gated: Path) -> None:
    assert jrun("apply", "--sglang-path", str(gated))[0] == 0
    tree = from_directory(gated)
    judged = read_state(tree)
    with open(gated / NEW_MODULE, "r+") as fh:  # in place: the directory's mtime stays
        text = fh.read()
        fh.seek(0)
        fh.write(text.replace("if not (is_sm90_supported() or is_sm100_supported()):", "if False:"))
    found = sweep_tree(tree, judged.plan, judged.manifest, judged.by_hash)
    assert not found.recalled and [c.file for c in found.unknown] == [COMM]


def test_an_edit_in_place_that_keeps_the_mtime_of_a_file_with_no_sm_term_is_swept_again(gated: Path) -> None:
    """A file the pre-filter dropped (no SM term) is not hashed; edited in place, its mtime
    put back (``touch -r``, a copy that keeps mtimes), its directory unchanged: still seen."""
    plain = gated / "srt/layers/allreduce_plain.py"
    plain.write_text("def allreduce_fusion_enabled():\n    return True\n")
    assert jrun("apply", "--sglang-path", str(gated))[0] == 0
    tree = from_directory(gated)
    judged = read_state(tree)
    assert sweep_tree(tree, judged.plan, judged.manifest, judged.by_hash).recalled
    before = plain.stat()
    with open(plain, "r+") as fh:
        fh.write("def allreduce_fusion_enabled():\n    return is_sm100_supported()\n")
    os.utime(plain, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert plain.stat().st_mtime_ns == before.st_mtime_ns
    found = sweep_tree(tree, judged.plan, judged.manifest, judged.by_hash)
    assert not found.recalled and "allreduce_fusion_enabled" in [c.function for c in found.unknown]


@pytest.mark.offline
def test_a_copy_that_keeps_mtimes_is_swept_again(gated: Path, tmp_path: Path) -> None:
    assert jrun("apply", "--sglang-path", str(gated))[0] == 0
    copy = tmp_path / "copy" / "sglang"
    shutil.copytree(gated, copy, copy_function=shutil.copy2, symlinks=True)  # as cp -a
    tree = from_directory(copy)
    judged = read_state(tree)
    assert not sweep_tree(tree, judged.plan, judged.manifest, True).recalled


def test_what_cannot_be_swept_is_a_warning_not_a_silent_pass(
    gated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "allreduce_fusion.py").write_text("def allreduce_fusion_ok():\n    return is_sm100_supported()\n")
    (gated / "srt/linked").symlink_to(outside)
    os.mkfifo(gated / "srt/pipe.py")  # not a regular file: never opened (it would block)
    real = gate_sweep._read

    def denied(path: str) -> bytes:
        if path.endswith("srt/layers/allreduce_denied.py"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    (gated / "srt/layers/allreduce_denied.py").write_text("x = 1\n")
    monkeypatch.setattr(gate_sweep, "_read", denied)
    tree = from_directory(gated)
    judged = read_state(tree)
    unread = sweep_tree(tree, judged.plan, judged.manifest, judged.by_hash).unread
    assert sorted(unread) == [
        "sglang/srt/layers/allreduce_denied.py cannot be read (Permission denied): not swept for SM checks",
        f"sglang/srt/linked is a link to a folder outside the package ({outside}): not swept for SM checks",
    ]


def test_a_tampered_record_is_not_believed(gated: Path) -> None:
    assert jrun("apply", "--sglang-path", str(gated))[0] == 0
    path = StateDir(gated).sweep_path
    record = json.loads(path.read_text())
    record["unknown"] = []  # hides both, without a new seal
    path.write_text(json.dumps(record))
    code, data = jrun("verify", "--sglang-path", str(gated))
    assert code == 0 and data["warnings"] == [COMM_WARNING.replace(":20 ", ":22 "), NEW_WARNING]


def test_revert_leaves_no_record_behind(gated: Path) -> None:
    assert jrun("apply", "--sglang-path", str(gated))[0] == 0
    assert StateDir(gated).sweep_path.is_file()
    assert jrun("revert", "--sglang-path", str(gated))[0] == 0
    assert not StateDir(gated).root.exists()


def test_doctor_has_a_warning_per_gate(gated: Path) -> None:
    tree = from_directory(gated)
    states, found = tree_states(tree)
    assert states["communicator-fusion-gate"].value == "pending"
    findings = sm_checks(tree, found)
    assert [(f.id, f.severity.value, f.summary) for f in findings] == [
        ("sm-check", "warning", COMM_WARNING),
        ("sm-check", "warning", NEW_WARNING),
    ]
    # Each says what the gate may do and where doctor found it (doctor prints both under it).
    for finding in findings:
        assert finding.to_json()["detail"] == (
            "a gate sglang added or moved since the patches were written; the fused path may stay shut on SM12x"
        )
        assert finding.to_json()["source"] == f"sm120patch's sweep of {tree.package_dir}"


def test_doctor_reports_them_after_the_patches_and_they_do_not_make_it_fail(gated: Path) -> None:
    tree = from_directory(gated)
    states, found = tree_states(tree)
    report = diagnose(tree, None, {pid: State.APPLIED for pid in states}, host_with(), 2, found)
    ids = [f.id for f in report.findings]
    last_patch = max(i for i, finding in enumerate(ids) if finding.startswith("patch:"))
    assert ids[last_patch + 1 : last_patch + 3] == ["sm-check", "sm-check"] and ids.count("sm-check") == 2
    assert report.exit_code == 0 and report.headline.startswith("no blocking error;")


def test_list_docs_shows_the_path_and_every_known_gate_with_its_reason(mini: Path) -> None:
    code, out, _ = run("list", "--docs", "--sglang-path", str(mini))
    flat = " ".join(out.split())
    assert code == 0 and "known and deliberate, never reported:" in flat
    for place in ON_PATH:
        assert " ".join(place.reason.split()) in flat
    for known in KNOWN_GATES:
        assert f"{known.kind}: sglang/{known.module}: {known.function}" in flat
        assert " ".join(known.reason.split()) in flat
