"""The patch report as the manifest keeps it (``plan.trust``): read back, it is the report
verify shows for a file it trusts by hash, so every field must come back."""

from __future__ import annotations

from sm120patch.patcher.kit.model import State
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
