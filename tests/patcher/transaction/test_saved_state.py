"""What sm120patch keeps on disk: the manifest's per-file record (plan.trust.CheckedFile, built
from PatchReport.to_json) and the journal; formats unchanged, old files still load."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan.trust import CheckedFile
from sm120patch.patcher.plan.types import Evidence, PatchReport
from sm120patch.patcher.transaction.fsutil import sha256
from sm120patch.patcher.transaction.journal import Change, Entry, Journal, Op, stage, unchanged
from sm120patch.patcher.transaction.state_dir import FileRecord, Manifest, StateDir

COMM = "srt/layers/communicator.py"

#: A report as sm120patch 0.2.0 wrote it into manifest.json (``checked``), before PatchReport
#: had a serializer of its own.
SAVED_REPORT = {
    "id": "communicator-flag",
    "summary": "cache _is_sm120_supported right after _is_sm100_supported, same shape",
    "requires": ["communicator-import"],
    "state": "applied",
    "detail": "_is_sm120_supported is assigned",
    "where": "",
    "evidence": [[40, "_is_sm100_supported = _is_cuda and is_sm100_supported()"]],
    "found_by": "anchor",
}
SAVED_MANIFEST = {
    "checked": {COMM: {"reports": [SAVED_REPORT], "sha256": "a" * 64}},
    "created": "2026-11-01T10:00:00+0000",
    "files": {
        COMM: {
            "backup": f"backups/{COMM}",
            "patches": ["communicator-flag"],
            "sha256_after": "a" * 64,
            "sha256_before": "b" * 64,
        }
    },
    "fingerprint": "f" * 64,
    "format": 2,
    "patch_set": ["communicator-flag"],
    "registry": ["communicator-flag"],
    "seal": "s" * 64,
    "sglang_location": "/site/sglang",
    "sglang_version": "0.5.9",
    "tool_version": "0.2.0",
    "updated": "2026-11-01T10:00:00+0000",
}


def report(state: State, state_after: State | None) -> PatchReport:
    return PatchReport(
        "communicator-flag",
        SAVED_REPORT["summary"],
        ("communicator-import",),
        COMM,
        state,
        "_is_sm120_supported is assigned",
        "",
        [Evidence(40, "_is_sm100_supported = _is_cuda and is_sm100_supported()")],
        state_after,
    )


def test_a_report_is_saved_as_the_file_stands_after_the_change() -> None:
    assert report(State.PENDING, State.APPLIED).to_json() == SAVED_REPORT
    assert report(State.APPLIED, None).to_json() == SAVED_REPORT


def test_a_saved_report_reads_back_as_the_state_found_and_after() -> None:
    read = PatchReport.from_json(COMM, SAVED_REPORT)
    assert read == report(State.APPLIED, State.APPLIED)
    assert read.to_json() == SAVED_REPORT


@pytest.mark.parametrize(
    "damage",
    [
        lambda r: r.pop("detail"),
        lambda r: r.update(state="half-applied"),
        lambda r: r.update(evidence=[[1, "a", "extra"]]),
        lambda r: r.update(requires=None),
    ],
)
def test_a_damaged_saved_report_raises_what_trust_catches(damage) -> None:
    data = copy.deepcopy(SAVED_REPORT)
    damage(data)
    with pytest.raises((KeyError, TypeError, ValueError)):
        PatchReport.from_json(COMM, data)


def test_checked_file_round_trips_through_the_manifest_shape() -> None:
    data = SAVED_MANIFEST["checked"][COMM]
    checked = CheckedFile.from_json(COMM, data)
    assert checked.sha256 == "a" * 64
    assert [r.file for r in checked.reports] == [COMM]
    assert checked.to_json() == data


def test_an_old_manifest_loads_and_is_written_back_unchanged(tmp_path: Path) -> None:
    manifest = Manifest.from_json(copy.deepcopy(SAVED_MANIFEST))
    assert manifest.files[COMM] == FileRecord("b" * 64, "a" * 64, ["communicator-flag"], f"backups/{COMM}")
    assert manifest.to_json() == SAVED_MANIFEST
    state = StateDir(tmp_path)
    state.save(manifest)
    written = json.loads(state.manifest_path.read_text())
    assert written.keys() == SAVED_MANIFEST.keys()
    assert {k: v for k, v in written.items() if k != "updated"} == {
        k: v for k, v in SAVED_MANIFEST.items() if k != "updated"
    }


@pytest.mark.parametrize("checked", [[], {COMM: ["a", []]}])
def test_a_manifest_whose_record_is_not_objects_is_corrupted(tmp_path: Path, checked: object) -> None:
    state = StateDir(tmp_path)
    state.make()
    state.manifest_path.write_text(json.dumps({**SAVED_MANIFEST, "checked": checked}))
    with pytest.raises(EnvironmentProblem, match="is corrupted"):
        state.load()


OLD_JOURNAL = {
    "entries": [{"after": "a" * 64, "before": "b" * 64, "path": "/site/sglang/x.py", "rel": "x.py", "source": "x"}],
    "format": 1,
    "manifest": None,
    "op": "revert",
    "pid": 42,
    "started": "2026-11-01T10:00:00+0000",
}


def test_the_journal_keeps_its_op_as_the_same_string() -> None:
    journal = Journal.from_json(copy.deepcopy(OLD_JOURNAL))
    assert journal.op is Op.REVERT
    assert journal.entries == [Entry("x.py", "/site/sglang/x.py", "b" * 64, "a" * 64, "x")]
    assert journal.to_json() == OLD_JOURNAL
    assert json.loads(json.dumps(Journal(Op.APPLY, [], None).to_json()))["op"] == "apply"


def test_a_journal_with_an_unknown_op_is_corrupted() -> None:
    with pytest.raises(EnvironmentProblem, match="corrupted"):
        Journal.from_json({**OLD_JOURNAL, "op": "upgrade"})


def test_unchanged_compares_bytes_and_absence(tmp_path: Path) -> None:
    present, absent = tmp_path / "a.py", tmp_path / "b.py"
    present.write_bytes(b"x = 1\n")
    assert unchanged([(present, b"x = 1\n"), (absent, None)])
    assert not unchanged([(present, b"x = 2\n")])
    assert not unchanged([(absent, b"")])
    assert not unchanged([(present, None)])


def test_stage_backs_up_once_and_records_the_patches_of_each_change(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "sglang")
    manifest = Manifest("0.5.9", str(tmp_path / "sglang"))
    target = tmp_path / "sglang" / COMM
    first = Change(COMM, target, b"original\n", b"patched once\n", ("communicator-import",))
    (entry,) = stage(state, [first], manifest)
    assert entry == Entry(COMM, str(target), sha256(b"original\n"), sha256(b"patched once\n"), f"staged/{COMM}")
    assert state.backup_path(COMM).read_bytes() == b"original\n"
    assert state.staged_path(COMM).read_bytes() == b"patched once\n"
    assert manifest.files[COMM].patches == ["communicator-import"]
    # A later apply on top of sm120patch's own result keeps the first backup.
    again = Change(COMM, target, b"patched once\n", b"patched twice\n", ("communicator-flag",))
    stage(state, [again], manifest)
    assert state.backup_path(COMM).read_bytes() == b"original\n"
    record = manifest.files[COMM]
    assert record.patches == ["communicator-flag", "communicator-import"]
    assert (record.sha256_before, record.sha256_after) == (sha256(b"original\n"), sha256(b"patched twice\n"))
