"""doctor on a release sm120patch refuses: the refusal and the upgrade in one finding, and no
patch, launch or bench advice.  The miniature release without ``is_sm120_supported`` stands
for sglang <= 0.5.3 in the fast tier; the slow tier runs the real 0.5.3 wheel."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sm120patch.doctor.diagnose import diagnose
from sm120patch.doctor.findings import Severity
from sm120patch.doctor.render import doctor_json
from sm120patch.patcher.exports import patch_states
from sm120patch.sglang.tree import from_directory
from tests.doctor.facts import host_with
from tests.doctor.hostfakes import fake_nvidia_smi, two_rtx
from tests.support.cli import run

ADVICE = ("apply --skip", "pip install", "sm120patch bench", "run `sm120patch apply`")


def refuse(package: Path) -> Path:
    """The miniature release without the SM12x probe, as releases before 0.5.4."""
    common = package / "srt/utils/common.py"
    text = common.read_text()
    start = text.index("def is_sm120_supported")
    common.write_text(text[:start] + text[text.index("\n\n\n", start) + 3 :])
    return package


def test_a_refused_release_is_one_finding_with_the_upgrade(mini: Path) -> None:
    tree = from_directory(refuse(mini))
    report = diagnose(tree, None, patch_states(tree), host_with(), tp=2)
    found = {f.id: f for f in report.findings}
    assert not [i for i in found if i.startswith("patch:")] and "launch" not in found and "tp" not in found
    patches = found["patches"]
    assert patches.severity is Severity.ERROR  # two SM12x GPUs here
    assert patches.summary == (
        f"sglang {tree.version} cannot be patched: upgrade to sglang >= 0.5.4 "
        "(>= 0.5.18 pins a FlashInfer with the SM12x kernel)"
    )
    assert "has no SM12x probe (sglang.srt.utils.is_sm120_supported, added in 0.5.4)" in patches.detail
    assert report.refusal == patches.detail and doctor_json(tree, report)["refusal"] == patches.detail
    assert found["tp-gpus"].severity is Severity.OK  # the host checks stand
    for finding in report.findings:
        text = " ".join((finding.summary, finding.detail))
        assert not any(advice in text for advice in ADVICE), finding


def doctor(package: Path, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """``sm120patch doctor`` (in this process) with FakeNvidiaSmi's two RTX PRO 6000 on PATH
    and no PYTORCH_/CUDA_ setting: (exit code, stdout, stderr)."""
    fake_nvidia_smi(tmp_path / "bin", two_rtx())
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("PYTORCH_", "CUDA_"))}
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    return run("doctor", "--sglang-path", str(package), *args, env=env)


def check_cli(package: Path, tmp_path: Path, version: str) -> None:
    code, _, err = doctor(package, tmp_path, "--tp", "2")
    assert "Traceback" not in err and code == 1, err
    assert f"patches: sglang {version} cannot be patched: upgrade to sglang >= 0.5.4" in err
    assert ": refused" not in err  # no rows of "refused" patches
    assert not any(advice in err for advice in ADVICE)
    _, out, _ = doctor(package, tmp_path, "--tp", "2", "--json")
    data = json.loads(out)
    assert data["exit_code"] == 1 and "Upgrade to sglang >= 0.5.4" in data["refusal"]
    assert [f["id"] for f in data["findings"] if f["id"].startswith("patch")] == ["patches"]


@pytest.mark.offline
def test_the_cli_on_a_refused_release(mini: Path, tmp_path: Path) -> None:
    check_cli(refuse(mini), tmp_path, from_directory(mini).version or "")


@pytest.mark.slow
def test_the_cli_on_sglang_0_5_3(release, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    check_cli(release("0.5.3"), tmp_path, "0.5.3")
