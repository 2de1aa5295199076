"""What the serving process will see, end to end through ``read_host`` and ``diagnose`` with
fakes of only what lies outside Python: ``FakeNvidiaSmi`` on PATH, and the serving
interpreter with ``StubTorch`` and ``StubDriver`` honouring CUDA_VISIBLE_DEVICES
(tests/doctor/hostfakes.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sm120patch.doctor.diagnose import diagnose
from sm120patch.doctor.findings import DoctorReport, HostFinding, Severity
from sm120patch.doctor.host import read_host
from sm120patch.patcher.kit.model import State
from tests.doctor.hostfakes import H200, FakeGpu, fake_nvidia_smi, serving_python, stub_torch, two_rtx

pytestmark = pytest.mark.offline  # each test starts processes: the slow tier (tests/conftest.py)

PENDING = {"communicator-fusion-gate": State.PENDING, "workspace-preflight": State.APPLIED}


class Box:
    """A host: nvidia-smi's GPUs, and a serving interpreter whose torch sees them through
    CUDA_VISIBLE_DEVICES."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root, self.monkeypatch = root, monkeypatch
        monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
        for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
            monkeypatch.delenv(name, raising=False)

    def run(
        self,
        gpus: list[FakeGpu],
        visible: str | None = None,
        tp: int | None = None,
        states: dict[str, State] = PENDING,
        **smi: object,
    ) -> tuple[DoctorReport, dict[str, HostFinding]]:
        fake_nvidia_smi(self.root / "bin", gpus, **smi)  # type: ignore[arg-type]
        python = serving_python(self.root / "env", stub_torch(self.root / "stub", gpus))
        if visible is not None:
            self.monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        report = diagnose(None, None, states, read_host(python), tp)
        return report, {f.id: f for f in report.findings}


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Box:
    return Box(tmp_path, monkeypatch)


def test_na_capability_with_torch_seeing_two_sm12x_is_an_sm12x_host(box: Box) -> None:
    report, found = box.run(two_rtx("[N/A]"))
    gpus = found["gpus"]
    assert gpus.severity is Severity.OK and gpus.summary == "2 SM12x GPUs: the patches matter here"
    assert "(cc 12.0 per torch, same UUID; nvidia-smi says [N/A])" in gpus.detail
    assert gpus.source.endswith("; torch.cuda.get_device_capability in " + str(box.root / "env/python"))
    assert [g.capability for g in report.gpus] == [(12, 0), (12, 0)]
    assert found["patch:communicator-fusion-gate"].severity is Severity.ERROR  # judged as on SM12x
    assert found["p2p"].severity is Severity.OK and found["multicast"].severity is Severity.INFO
    assert report.exit_code == 1


def test_na_capability_that_nothing_tells_is_a_warning_not_silence(box: Box) -> None:
    report, found = box.run(two_rtx("[N/A]"), visible="")
    assert found["gpus"].severity is Severity.WARNING
    assert found["gpus"].summary.startswith("compute capability unknown for GPUs 0, 1: blockers below are warnings")
    assert "no NVIDIA GPU seen" not in {f.summary for f in report.findings}
    assert found["patch:communicator-fusion-gate"].severity is Severity.WARNING


def test_empty_cuda_visible_devices(box: Box) -> None:
    report, found = box.run(two_rtx(), visible="", tp=2)
    assert found["cuda-visible-devices"].summary == 'CUDA_VISIBLE_DEVICES=""'
    assert found["cuda-visible-devices"].severity is Severity.INFO
    torch = found["torch-gpus"]
    assert torch.severity is Severity.WARNING and torch.summary == "torch sees 0 of the 2 GPUs nvidia-smi lists"
    assert torch.detail.startswith('hidden: GPUs 0, 1; CUDA_VISIBLE_DEVICES="" hides every GPU from CUDA')
    assert found["p2p"].summary == "P2P: torch sees 0 GPUs, no pair to check"
    assert found["p2p"].severity is Severity.WARNING  # --tp 2 asks for a pair
    skipped = found["host-checks"]
    assert skipped.severity is Severity.WARNING and skipped.summary == "skipped: multicast, GPUDirect RDMA with VMM"
    assert 'lists no GPU (CUDA_VISIBLE_DEVICES="")' in skipped.detail
    assert found["tp-gpus"].severity is Severity.ERROR and found["tp-gpus"].summary == "TP 2 needs 2 GPUs, 0 visible"
    errors = {f.id for f in report.findings if f.severity is Severity.ERROR}
    assert {"patch:communicator-fusion-gate", "tp-gpus"} <= errors and "nothing stands" not in report.headline


def test_a_uuid_that_matches_nothing(box: Box) -> None:
    _, found = box.run(two_rtx(), visible="GPU-deadbeef")
    torch = found["torch-gpus"]
    assert torch.summary == "torch sees 0 of the 2 GPUs nvidia-smi lists"
    assert "GPU-deadbeef matches no GPU nvidia-smi lists, so CUDA ignores it" in torch.detail
    assert found["gpus"].severity is Severity.OK  # nvidia-smi's capabilities still stand


def test_a_uuid_prefix_that_matches_one_gpu(box: Box) -> None:
    _, found = box.run(two_rtx(), visible="GPU-00000001")
    assert found["torch-gpus"].detail.startswith("hidden: GPU 0; CUDA_VISIBLE_DEVICES=GPU-00000001 shows GPU 1 only")
    assert found["torch-gpus"].severity is Severity.INFO


def test_index_zero_on_a_two_gpu_box(box: Box) -> None:
    _, found = box.run(two_rtx(), visible="0")
    assert found["cuda-visible-devices"].detail == "CUDA_VISIBLE_DEVICES=0 shows GPU 0 only to CUDA"
    torch = found["torch-gpus"]
    assert torch.severity is Severity.INFO and torch.detail.startswith("hidden: GPU 1; ")
    p2p = found["p2p"]
    assert p2p.severity is Severity.INFO and p2p.summary == "P2P: torch sees 1 GPU, no pair to check"
    assert "tp-gpus" not in found


def test_tp_8_on_two_gpus_is_an_error_on_sm12x_and_a_warning_elsewhere(box: Box) -> None:
    _, found = box.run(two_rtx(), tp=8, states={})
    assert found["tp-gpus"].severity is Severity.ERROR and found["tp-gpus"].summary == "TP 8 needs 8 GPUs, 2 visible"
    hopper = [FakeGpu(H200, "9.0", (9, 0)), FakeGpu(H200, "9.0", (9, 0))]
    _, found = box.run(hopper, tp=8, states={})
    assert found["tp-gpus"].severity is Severity.WARNING


def test_the_serving_interpreter_may_see_another_cuda_visible_devices(box: Box) -> None:
    fake_nvidia_smi(box.root / "bin", two_rtx())
    python = serving_python(
        box.root / "env", stub_torch(box.root / "stub", two_rtx()), env={"CUDA_VISIBLE_DEVICES": "1"}
    )
    found = {f.id: f for f in diagnose(None, None, {}, read_host(python)).findings}
    visible = found["cuda-visible-devices"]
    assert visible.summary == "CUDA_VISIBLE_DEVICES=1"
    assert visible.detail.startswith(
        "doctor has CUDA_VISIBLE_DEVICES unset, the serving interpreter CUDA_VISIBLE_DEVICES=1"
    )
    assert found["torch-gpus"].detail.startswith("hidden: GPU 0; ")


@pytest.mark.parametrize(
    ("alloc_names", "variable", "severity"),
    [
        (("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"), "PYTORCH_ALLOC_CONF", Severity.ERROR),
        (("PYTORCH_CUDA_ALLOC_CONF",), "PYTORCH_ALLOC_CONF", Severity.INFO),  # a torch before the new spelling
        (("PYTORCH_CUDA_ALLOC_CONF",), "PYTORCH_CUDA_ALLOC_CONF", Severity.ERROR),
        (None, "PYTORCH_ALLOC_CONF", Severity.ERROR),  # no c10 library to read: both count
    ],
)
def test_the_allocator_variable_in_the_spellings_the_serving_torch_reads(
    box: Box, monkeypatch: pytest.MonkeyPatch, alloc_names: tuple[str, ...] | None, variable: str, severity: Severity
) -> None:
    fake_nvidia_smi(box.root / "bin", two_rtx())
    python = serving_python(box.root / "env", stub_torch(box.root / "stub", two_rtx(), alloc_names=alloc_names))
    monkeypatch.setenv(variable, "expandable_segments:True")
    host = read_host(python)
    assert host.facts.torch.alloc_reads == alloc_names
    finding = {f.id: f for f in diagnose(None, None, {}, host).findings}["alloc-conf"]
    assert finding.severity is severity and finding.summary.startswith(f"{variable}=expandable_segments:True")


def test_a_patched_tree_with_every_gpu_hidden_never_reads_as_clear(box: Box) -> None:
    applied = {"communicator-fusion-gate": State.APPLIED, "workspace-preflight": State.APPLIED}
    report, found = box.run(two_rtx(), visible="", states=applied)
    assert {f.id for f in report.findings if f.severity is Severity.ERROR} == {"sglang"}  # no tree in this test
    assert {"torch-gpus", "host-checks"} <= {f.id for f in report.findings if f.severity is Severity.WARNING}
    assert found["p2p"].severity is Severity.INFO and found["host-checks"].severity is Severity.WARNING
    assert not [f for f in report.findings if f.severity is Severity.OK and f.id in ("p2p", "multicast", "gdr")]


def test_the_cli_with_na_capability_and_tp_8(mini: Path, tmp_path: Path) -> None:
    """The whole command: FakeNvidiaSmi says [N/A], StubTorch in the serving interpreter sees
    two SM12x GPUs, sglang is the miniature release on that interpreter's path."""
    fake_nvidia_smi(tmp_path / "bin", two_rtx("[N/A]"))
    python = serving_python(tmp_path / "env", stub_torch(tmp_path / "stub", two_rtx()), mini.parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "CUDA_"))}
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    proc = subprocess.run(
        [sys.executable, "-m", "sm120patch", "doctor", "--python", python, "--tp", "8", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    data = json.loads(proc.stdout)
    found = {f["id"]: f for f in data["findings"]}
    assert proc.returncode == 1 and data["exit_code"] == 1, proc.stderr
    assert found["gpus"]["severity"] == "ok" and [g["capability"] for g in data["gpus"]] == [[12, 0], [12, 0]]
    assert {g["capability_from"] for g in data["gpus"]} == {"torch, same UUID"}
    assert {g["raw_capability"] for g in data["gpus"]} == {"[N/A]"}
    assert found["tp-gpus"]["severity"] == "error" and found["p2p"]["severity"] == "ok"
