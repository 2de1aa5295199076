"""``doctor.findings``: a finding's JSON keys, the report's exit code and headline."""

from __future__ import annotations

from sm120patch.doctor.findings import DoctorReport, HostFinding, Severity


def test_a_finding_keeps_its_json_keys() -> None:
    finding = HostFinding("p2p", Severity.ERROR, "no P2P", "why", "where")
    assert finding.to_json() == {
        "id": "p2p",
        "severity": "error",
        "summary": "no P2P",
        "detail": "why",
        "source": "where",
    }


def test_errors_decide_the_exit_code_and_lead_the_headline() -> None:
    report = DoctorReport(
        [
            HostFinding("gpus", Severity.OK, ""),
            HostFinding("tp", Severity.WARNING, ""),
            HostFinding("p2p", Severity.ERROR, ""),
            HostFinding("gdr", Severity.ERROR, ""),
        ]
    )
    assert report.exit_code == 1
    assert report.headline == "2 errors stand between this host and the fused allreduce: p2p, gdr"


def test_warnings_alone_exit_0() -> None:
    report = DoctorReport([HostFinding("tp", Severity.WARNING, ""), HostFinding("gpus", Severity.INFO, "")])
    assert report.exit_code == 0 and report.headline == "no blocking error; 1 warning to read"


def test_nothing_in_the_way() -> None:
    assert DoctorReport().exit_code == 0
    assert DoctorReport().headline == "nothing stands in the way of the fused allreduce"


def test_the_headline_counts_in_words_that_agree() -> None:
    one = DoctorReport([HostFinding("p2p", Severity.ERROR, "")])
    assert one.headline == "1 error stands between this host and the fused allreduce: p2p"
    two = DoctorReport([HostFinding("tp", Severity.WARNING, ""), HostFinding("gdr", Severity.WARNING, "")])
    assert two.headline == "no blocking error; 2 warnings to read"
