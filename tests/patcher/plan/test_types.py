"""The patch report as the manifest keeps it (``plan.trust``): read back, it is the report
verify shows for a file it trusts by hash, so every field must come back."""

from __future__ import annotations

from sm120patch.patcher.kit.model import FOUND_BY_ANCHOR, State
from sm120patch.patcher.plan.types import Evidence, PatchReport


def test_a_report_comes_back_from_its_json_as_the_file_stands_after_the_change() -> None:
    report = PatchReport(
        id="communicator-fusion-gate",
        summary="widen the fusion gate",
        requires=("communicator-flag",),
        file="srt/layers/communicator.py",
        state=State.PENDING,
        detail="apply_flashinfer_allreduce_fusion: will widen",
        where="apply_flashinfer_allreduce_fusion",
        evidence=[Evidence(167, "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)")],
        state_after=State.APPLIED,
    )
    back = PatchReport.from_json(report.file, report.to_json())
    assert back == PatchReport(
        id=report.id,
        summary=report.summary,
        requires=report.requires,
        file=report.file,
        state=State.APPLIED,  # one state: the file as the change leaves it
        detail=report.detail,
        where=report.where,
        evidence=report.evidence,
        state_after=State.APPLIED,
    )


def test_a_report_saved_before_role_finds_reads_back_as_found_by_its_anchor() -> None:
    """A manifest written before role finds has no ``found_by`` nor ``found_at``: such a
    target was found where a known layout keeps it."""
    saved = {
        "id": "communicator-flag",
        "summary": "define the SM120 flag",
        "requires": [],
        "state": "applied",
        "detail": "",
        "where": "",
        "evidence": [],
    }
    back = PatchReport.from_json("srt/layers/communicator.py", saved)
    assert (back.found_by, back.found_at) == (FOUND_BY_ANCHOR, "")
    assert back.to_json()["found_by"] == "anchor"
