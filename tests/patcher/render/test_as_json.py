"""The ``--json`` document (docs/reference.md, "JSON output"), key by key: what scripts and CI
read instead of the text report.  Outcomes are built by hand, as in test_as_text.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm120patch import __version__
from sm120patch.doctor.findings import DoctorReport, HostFinding, Severity
from sm120patch.doctor.render import DoctorResult, doctor_json
from sm120patch.errors import ExitCode
from sm120patch.output.console import error_json, print_json
from sm120patch.patcher.kit.model import State
from sm120patch.patcher.outcome import CheckedBy, Command, FileStatus, Outcome, Recorded, StateSummary
from sm120patch.patcher.plan.left_out import LeftOut
from sm120patch.patcher.plan.registry import all_patches
from sm120patch.patcher.plan.types import Evidence, FilePlan, PatchReport, Plan
from sm120patch.patcher.render.as_json import to_json
from sm120patch.patcher.runtime import RuntimeCheck, TorchImport
from sm120patch.runner.gpus import Gpu
from sm120patch.sglang.releases import tree_json
from sm120patch.sglang.tree import InstallKind, SglangTree
from tests.support.fakes import fake_flashinfer

PACKAGE = Path("/site/sglang")


def a_tree(version: str | None = "0.5.11", **more: object) -> SglangTree:
    """A tree that exists only as these facts (no FlashInfer beside it unless ``more`` says)."""
    return SglangTree(PACKAGE, version, InstallKind.WHEEL, None, "--sglang-path", **more)  # type: ignore[arg-type]


def test_the_tree_as_found(tmp_path: Path) -> None:
    site = tmp_path / "site"
    fake_flashinfer(site, "0.6.16", [9, 10])
    tree = SglangTree(
        site / "sglang",
        "0.5.18",
        InstallKind.WHEEL,
        site / "sglang-0.5.18.dist-info",
        "/env/bin/python (import sglang)",
        python="/env/bin/python",
        flashinfer="0.6.16",
        flashinfer_dir=site / "flashinfer",
    )
    assert tree_json(tree) == {
        "version": "0.5.18",
        "location": str(site / "sglang"),
        "install_kind": "wheel",
        "dist_info": str(site / "sglang-0.5.18.dist-info"),
        "found_by": "/env/bin/python (import sglang)",
        "python": "/env/bin/python",
        "flashinfer": "0.6.16",
        "flashinfer_pinned": "0.6.17",
        # the installed code decides, not the pin (which has the kernel)
        "flashinfer_has_sm12x_allreduce": False,
        "flashinfer_evidence": f"{site / 'flashinfer/jit/comm.py'}: "
        "gen_trtllm_comm_module(supported_major_versions=[9, 10])",
        "record_problem": f"cannot read {site / 'sglang-0.5.18.dist-info/RECORD'} (No such file or directory): "
        "the pristine check is off",
    }


@pytest.mark.parametrize(
    ("version", "pin", "kernel"),
    [("0.5.18", "0.6.17", True), ("0.5.11", "0.6.8.post1", False)],
    ids=["0.5.18", "0.5.11"],
)
def test_without_flashinfer_beside_it_the_pin_decides(version: str, pin: str, kernel: bool) -> None:
    data = tree_json(a_tree(version))
    assert (data["flashinfer"], data["flashinfer_pinned"], data["flashinfer_has_sm12x_allreduce"]) == (
        None,
        pin,
        kernel,
    )
    assert data["flashinfer_evidence"] == "no flashinfer package found beside sglang"
    assert (data["dist_info"], data["python"]) == (None, None)
    assert data["record_problem"] == "no install metadata (not installed from a wheel)"


def test_an_unknown_release_has_no_pin() -> None:
    data = tree_json(a_tree(None))
    assert (data["version"], data["flashinfer_pinned"], data["flashinfer_has_sm12x_allreduce"]) == (None, None, None)


def a_plan(tree: SglangTree) -> Plan:
    gate = PatchReport(
        "gate",
        "widen the gate",
        ("flag",),
        "srt/a.py",
        State.PENDING,
        "will widen",
        where="apply_flashinfer_allreduce_fusion",
        evidence=[Evidence(12, "    if x:")],
        state_after=State.APPLIED,
    )
    flag = PatchReport("flag", "cache the flag", (), "srt/a.py", State.APPLIED, "there")
    return Plan(tree, [FilePlan("srt/a.py", tree.path("srt/a.py"), b"", reports=[gate, flag])])


def test_an_outcome_key_by_key() -> None:
    tree = a_tree()
    state = StateSummary("/site/sglang/.sm120patch", True, "0.5.11", "1.0", False, ["srt/a.py"], False)
    outcome = Outcome(
        Command.APPLY,
        tree,
        ExitCode.OK,
        "patched",
        a_plan(tree),
        notes=["note"],
        warnings=["warn"],
        written=["srt/a.py"],
        changes=[("srt/a.py", b"a\n", b"b\n")],
        files=[
            FileStatus("srt/a.py", "aa", "bb", Recorded.PATCHED, CheckedBy.HASH),
            FileStatus("srt/b.py", "cc", None, None),
        ],
        state=state,
        runtime=RuntimeCheck("/env/bin/python", TorchImport(False, error="no torch"), None, None, (), 3),
        left_out=[
            LeftOut("auto", "srt/b.py", 7, "auto_enable", "opt-in"),
            LeftOut("shut", "srt/c.py", None, "f", None),
        ],
    )
    data = to_json(outcome)
    assert data == {
        "schema": "sm120patch/1",
        "tool_version": __version__,
        "command": "apply",
        "ok": True,
        "exit_code": 0,
        "headline": "patched",
        "code": None,
        "sglang": tree_json(tree),
        "refusal": None,
        "patches": [
            {
                "id": "gate",
                "summary": "widen the gate",
                "requires": ["flag"],
                "file": "sglang/srt/a.py",
                "state": "pending",
                "state_after": "applied",
                "where": "apply_flashinfer_allreduce_fusion",
                "detail": "will widen",
                "evidence": [{"file": "sglang/srt/a.py", "line": 12, "text": "    if x:"}],
                "found_by": "anchor",
                "found_at": None,
            },
            {
                "id": "flag",
                "summary": "cache the flag",
                "requires": [],
                "file": "sglang/srt/a.py",
                "state": "applied",
                "state_after": "applied",  # nothing planned: as found
                "where": "",
                "detail": "there",
                "evidence": [],
                "found_by": "anchor",
                "found_at": None,
            },
        ],
        "files": [
            {
                "file": "sglang/srt/a.py",
                "sha256": "aa",
                "record_sha256": "bb",
                "pristine": False,
                "recorded": "patched",
                "checked_by": "hash",
            },
            {
                "file": "sglang/srt/b.py",
                "sha256": "cc",
                "record_sha256": None,
                "pristine": None,
                "recorded": None,
                "checked_by": "structure",
            },
        ],
        "state": {
            "dir": "/site/sglang/.sm120patch",
            "present": True,
            "sglang_version": "0.5.11",
            "tool_version": "1.0",
            "stale": False,
            "files": ["srt/a.py"],
            "interrupted": False,
        },
        "written": ["sglang/srt/a.py"],
        "messages": ["note"],
        "warnings": ["warn"],
        "sm_checks": [],
        "left_out": [
            {
                "patch": "auto",
                "file": "sglang/srt/b.py",
                "line": 7,
                "function": "auto_enable",
                "keeps_fused_path_shut": False,
            },
            {"patch": "shut", "file": "sglang/srt/c.py", "line": None, "function": "f", "keeps_fused_path_shut": True},
        ],
        "runtime": {
            "python": "/env/bin/python",
            "torch": {"ok": False, "error": "no torch"},
            "sglang": None,
            "probe": None,
            "modules": [],
            "exit_code": 3,
        },
        "diff": "--- a/sglang/srt/a.py\n+++ b/sglang/srt/a.py\n@@ -1 +1 @@\n-a\n+b\n",
        "token_limit": None,  # a tree of facts only: no gate module to read a limit from
    }
    assert type(data["exit_code"]) is int


def test_an_outcome_with_nothing_found_yet() -> None:
    data = to_json(Outcome(Command.VERIFY, a_tree(), ExitCode.NOT_AS_ASKED, "not patched"))
    assert (data["command"], data["ok"], data["exit_code"]) == ("verify", False, 1)
    assert type(data["exit_code"]) is int
    assert data["patches"] == [] and data["refusal"] is None and data["files"] == []
    assert data["state"] == {} and data["runtime"] is None and data["diff"] == ""
    assert data["written"] == [] and data["messages"] == [] and data["warnings"] == []


def test_a_refused_release_lists_every_patch_as_refused_for_that_reason() -> None:
    tree = a_tree("0.5.3")
    refusal = "sglang 0.5.3 has no FlashInfer allreduce fusion"
    data = to_json(Outcome(Command.LIST, tree, ExitCode.OK, refusal, Plan(tree, [], refusal)))
    assert data["refusal"] == refusal
    assert data["patches"] == [
        {
            "id": p.id,
            "summary": p.summary,
            "requires": list(p.requires),
            "file": None,
            "state": "refused",
            "state_after": "refused",
            "where": "",
            "detail": refusal,
            "evidence": [],
            "found_by": "anchor",
            "found_at": None,
        }
        for p in all_patches()
    ]


def test_an_error() -> None:
    data = error_json("no such interpreter", ExitCode.ENVIRONMENT, "bad-python")
    assert data == {
        "schema": "sm120patch/1",
        "tool_version": __version__,
        "ok": False,
        "exit_code": 2,
        "error": "no such interpreter",
        "code": "bad-python",
    }
    assert type(data["exit_code"]) is int


def test_doctor_with_and_without_an_sglang() -> None:
    findings = [HostFinding("kernel", Severity.ERROR, "no kernel", "upgrade", "comm.py")]
    gpus = (Gpu(0, "RTX PRO 6000", (12, 0)),)
    report = DoctorReport(findings, gpus, "refused")
    assert doctor_json(None, report) == {
        "schema": "sm120patch/1",
        "tool_version": __version__,
        "command": "doctor",
        "ok": False,
        "exit_code": 1,
        "headline": "1 error stands between this host and the fused allreduce: kernel",
        "sglang": None,
        "findings": [f.to_json() for f in findings],
        "refusal": "refused",
        "gpus": [gpus[0].to_json()],
    }
    data = doctor_json(a_tree(), DoctorReport([HostFinding("gpus", Severity.OK, "fine")]))
    assert (data["ok"], data["exit_code"], data["sglang"], data["refusal"]) == (True, 0, tree_json(a_tree()), None)


def test_print_json_writes_one_indented_document_and_a_newline(capsys: pytest.CaptureFixture[str]) -> None:
    print_json({"a": [1], "b": "\x1b"})
    out = capsys.readouterr().out
    assert out == '{\n  "a": [\n    1\n  ],\n  "b": "\\u001b"\n}\n'
    assert json.loads(out) == {"a": [1], "b": "\x1b"}


def test_doctor_with_a_problem_is_an_error_object_whose_ok_follows_its_exit_code() -> None:
    """Why no sglang was found makes doctor exit 2; the document says so as every error
    object does (``ok`` false, ``error`` why), beside the findings, whatever they judged."""
    report = DoctorReport([HostFinding("gpus", Severity.OK, "fine")])
    data = DoctorResult(None, report, problem="no sglang found in /usr/bin/python3").to_json()
    assert (data["ok"], data["exit_code"], data["error"]) == (False, 2, "no sglang found in /usr/bin/python3")
    assert data["findings"] == [report.findings[0].to_json()]
