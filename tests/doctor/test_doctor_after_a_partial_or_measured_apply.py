"""What doctor's report says after an apply that left a patch out (``--skip``) or lowered the
fusion token limit to a measured crossover: the miniature release, a real apply (in process),
then ``diagnose`` on host facts built directly (no probe, no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.doctor.diagnose import diagnose
from sm120patch.doctor.findings import HostFinding, Severity
from sm120patch.patcher.exports import patch_states
from sm120patch.runner.gpus import Gpu
from sm120patch.sglang.tree import from_directory
from tests.cli.test_fuse_up_to import LIMITED, save_recorded
from tests.doctor.facts import TWO_SM120, host_with
from tests.support.cli import jrun
from tests.support.mini_sglang import COMM, FILES, write_mini_sglang

#: The GPUs of the H200 bench run that ``save_recorded`` saves as this tree's last result.
H200S = (Gpu(0, "NVIDIA H200", (9, 0)), Gpu(1, "NVIDIA H200", (9, 0)))


def test_a_patch_the_last_apply_left_out_is_told_and_not_held_against_the_host(mini: Path) -> None:
    """A patch left out on purpose is information (never a blocker, even on an SM12x host),
    and the finding says how it was left out and how to add it."""
    code, out = jrun("apply", "--sglang-path", str(mini), "--skip", "server-args-auto-enable")
    assert code == 0, out
    tree = from_directory(mini)
    report = diagnose(tree, None, patch_states(tree), host_with(), tp=2)
    found = {f.id: f for f in report.findings}
    assert found["patch:server-args-auto-enable"] == HostFinding(
        "patch:server-args-auto-enable",
        Severity.INFO,
        "skipped",
        "the last apply was asked to leave it out (--only / --skip); a plain `sm120patch apply` adds it",
        f"sm120patch verify ({mini})",
    )


@pytest.mark.parametrize(("sm12x", "severity"), [(True, Severity.ERROR), (False, Severity.WARNING)])
def test_a_patch_left_out_that_keeps_the_fused_path_shut_blocks_as_pending_does(
    mini: Path, sm12x: bool, severity: Severity
) -> None:
    """The preflight left out: the sweep has no SM check of it to report, the patch's finding
    is what says the fused path stays shut (an error on an SM12x host), and how to add it."""
    assert jrun("apply", "--sglang-path", str(mini), "--skip", "workspace-preflight")[0] == 0
    tree = from_directory(mini)
    gpus = TWO_SM120 if sm12x else H200S
    host = host_with(smi=gpus, torch_gpus=gpus)
    found = {f.id: f for f in diagnose(tree, None, patch_states(tree), host, tp=2).findings}
    assert found["patch:workspace-preflight"] == HostFinding(
        "patch:workspace-preflight",
        severity,
        "workspace-preflight: skipped",
        "the last apply was asked to leave it out (--only / --skip), and the fused path stays shut on SM12x "
        "without it; `sm120patch apply --only workspace-preflight` adds it",
        f"sm120patch verify ({mini})",
    )


@pytest.fixture
def measured(tmp_path: Path) -> Path:
    """The miniature release with sglang's fusion token limit, lowered by
    ``apply --fuse-up-to measured --tp 2`` to the crossover of the saved H200 bench run."""
    package = write_mini_sglang(tmp_path / "site", files={**FILES, COMM: LIMITED})
    save_recorded(package)
    code, out = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "measured", "--tp", "2")
    assert code == 0, out
    return package


def token_limit_finding(package: Path, smi: tuple[Gpu, ...], tp: int | None) -> HostFinding:
    """doctor's token-limit finding on a host whose nvidia-smi and torch list ``smi``."""
    tree = from_directory(package)
    report = diagnose(tree, None, patch_states(tree), host_with(smi=smi, torch_gpus=smi), tp=tp)
    (finding,) = [f for f in report.findings if f.id == "token-limit"]
    return finding


def test_doctor_says_the_measured_limit_matches_the_host_it_was_measured_on(measured: Path) -> None:
    finding = token_limit_finding(measured, H200S, tp=2)
    # the GPUs and the TP doctor was given are both compared: nothing is left "not compared"
    assert finding.severity is Severity.OK
    assert finding.summary.endswith("; the measurement matches this host")


def test_doctor_compares_the_measured_limit_with_the_tp_it_was_given(measured: Path) -> None:
    finding = token_limit_finding(measured, H200S, tp=4)
    assert finding.severity is Severity.WARNING
    assert "the bench result was measured at TP 2, not TP 4" in finding.summary
    assert finding.detail == (
        "measure again here: `sm120patch bench kernel`, then `sm120patch apply --fuse-up-to measured`"
    )


def test_doctor_compares_the_measured_limit_with_the_gpus_it_sees(measured: Path) -> None:
    finding = token_limit_finding(measured, TWO_SM120, tp=2)
    assert finding.severity is Severity.WARNING
    assert "not on this host's GPUs" in finding.summary
