"""doctor.diagnose and `sm120patch doctor`: what blocks the fused path, on real environments
(slow) and on read facts (fast).

The environments are real venvs with sglang and FlashInfer pip-installed.  The GPUs come
from ``fake_nvidia_smi`` (tests/support/fakes.py), an ``nvidia-smi`` on PATH that answers the
query with two RTX PRO 6000 (cc 12.0), or from nothing (no ``nvidia-smi``: no GPU).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from sm120patch.doctor.diagnose import diagnose, refusal
from sm120patch.doctor.findings import DoctorReport, HostFinding, Severity
from sm120patch.doctor.host import DriverFacts, Host, parse_host_facts
from sm120patch.doctor.render import doctor_json
from sm120patch.patcher.exports import patch_states
from sm120patch.patcher.kit.model import State
from sm120patch.runner.gpus import Gpu, GpuReport
from sm120patch.sglang.options import PCIE_IPC_MODULE
from sm120patch.sglang.tree import from_directory
from tests.doctor.facts import host_with
from tests.support.cli import jrun_process, process_env
from tests.support.fakes import RTX_PRO_6000, fake_flashinfer, fake_nvidia_smi
from tests.support.realtrees import serving_env


def run_doctor(python: Path, path_dirs: list[Path], *extra: str) -> tuple[int, dict]:
    """``sm120patch doctor --python PYTHON --json`` with only ``path_dirs`` (and the system's
    bin directories) on PATH, PYTORCH_CUDA_ALLOC_CONF unset."""
    path = os.pathsep.join([*map(str, path_dirs), os.environ["PATH"]])
    env = process_env(drop=["PYTORCH_CUDA_ALLOC_CONF"], PATH=path)
    code, data, _ = jrun_process("doctor", "--python", python, *extra, env=env)
    return code, data


def by_id(data: dict) -> dict[str, dict]:
    return {f["id"]: f for f in data["findings"]}


@pytest.mark.slow
def test_no_gpu_and_an_old_flashinfer_are_warnings_not_errors(tmp_path: Path) -> None:
    """sglang 0.5.9 + FlashInfer 0.6.3 on a machine without a GPU."""
    python = serving_env(tmp_path / "env", "0.5.9", "0.6.3")
    code, data = run_doctor(python, [tmp_path / "empty-bin"])
    found = by_id(data)
    assert code == 0 and data["exit_code"] == 0
    assert found["gpus"]["severity"] == "info" and found["gpus"]["summary"] == "no NVIDIA GPU seen"
    assert "nvidia-smi is not on PATH" in found["gpus"]["source"]
    assert found["sglang"]["summary"] == "sglang 0.5.9 (wheel)"
    fi = found["flashinfer"]
    assert fi["severity"] == "warning" and "FlashInfer 0.6.3 lacks the SM12x allreduce kernel" in fi["summary"]
    assert ">= 0.6.17" in fi["summary"]
    assert "supported_major_versions=[9, 10]" in fi["source"] and "flashinfer/jit/comm.py" in fi["source"]
    assert found["launch"]["summary"] == "turn fusion on with --enable-flashinfer-allreduce-fusion"
    assert found["patch:communicator-fusion-gate"]["severity"] == "warning"  # pending, but no SM12x here
    assert found["host-checks"]["severity"] == "warning" and "No module named 'torch'" in found["host-checks"]["detail"]
    assert all(f["source"] for f in data["findings"])


@pytest.mark.slow
def test_two_rtx_pro_6000_nothing_applied_is_an_error(tmp_path: Path) -> None:
    python = serving_env(tmp_path / "env", "0.5.9", "0.6.3")
    bin_dir = tmp_path / "bin"
    fake_nvidia_smi(bin_dir, [(RTX_PRO_6000, "12.0"), (RTX_PRO_6000, "12.0")])
    code, data = run_doctor(python, [bin_dir], "--tp", "2")
    found = by_id(data)
    assert code == 1 and data["ok"] is False
    assert found["gpus"]["severity"] == "ok"
    assert found["gpus"]["detail"] == f"2× {RTX_PRO_6000} (cc 12.0): GPUs 0-1"
    assert found["gpus"]["source"] == "nvidia-smi --query-gpu=index,name,compute_cap --format=csv,noheader"
    errors = {f["id"] for f in data["findings"] if f["severity"] == "error"}
    assert errors == {
        "patch:communicator-import",
        "patch:communicator-flag",
        "patch:communicator-fusion-gate",
        "patch:server-args-auto-enable",
        "flashinfer",
    }
    assert "flashinfer" in data["headline"] and "patch:communicator-fusion-gate" in data["headline"]
    assert found["tp"]["severity"] == "info" and "+5.2 %" in found["tp"]["summary"]
    assert "sglang#30700" in found["tp"]["source"]


@pytest.mark.slow
def test_two_rtx_pro_6000_with_a_patched_new_release_have_no_error(tmp_path: Path) -> None:
    python = serving_env(tmp_path / "env", "0.5.20", "0.6.18")
    bin_dir = tmp_path / "bin"
    fake_nvidia_smi(bin_dir, [(RTX_PRO_6000, "12.0")] * 4)  # --tp 4 below needs 4 GPUs
    code, applied, err = jrun_process("apply", "--python", python)
    assert code == 0, err
    assert applied["warnings"] == []  # FlashInfer 0.6.18 has the kernel
    code, data = run_doctor(python, [bin_dir], "--tp", "4")
    found = by_id(data)
    assert found["flashinfer"]["severity"] == "ok"
    assert "supported_major_versions=[9, 10, 12]" in found["flashinfer"]["source"]
    assert all(
        found[f"patch:{pid}"]["severity"] == "ok"
        for pid in (
            "communicator-flag",
            "communicator-fusion-gate",
            "fusion-backend-resolver",
            "workspace-preflight",
            "server-args-auto-enable",
        )
    )
    assert not [f for f in data["findings"] if f["severity"] == "error"]
    assert code == 0
    assert found["launch"]["summary"] == "turn fusion on with --flashinfer-allreduce-fusion-backend trtllm"
    assert "--enforce-disable-flashinfer-allreduce-fusion" in found["launch"]["detail"]
    assert found["tp"]["severity"] == "warning" and "sglang#32330" in found["tp"]["source"]


# --- the judgement on read facts (no processes) ---------------------------------------------

TWO_SM120 = GpuReport((Gpu(0, RTX_PRO_6000, (12, 0)), Gpu(1, RTX_PRO_6000, (12, 0))), "nvidia-smi")
NO_SMI = GpuReport((), "nvidia-smi", "nvidia-smi is not on PATH")


def host(
    gpus: GpuReport = TWO_SM120,
    p2p: bool = True,
    multicast: int = 0,
    gdr: int = 1,
    alloc_conf: str | None = None,
    torch_ok: bool = True,
    torch_gpus: list[dict] | None = None,
) -> Host:
    """Facts as host_facts reports them on a PCIe box (no multicast by default)."""
    probe: dict = {"torch": {"ok": torch_ok, "error": None if torch_ok else "No module named 'torch'"}}
    if torch_ok:
        probe["gpus"] = torch_gpus or [
            {"index": g.index, "name": g.name, "capability": list(g.capability or ())} for g in gpus.gpus
        ]
        probe["p2p"] = [[0, 1, p2p], [1, 0, p2p]]
        probe["driver"] = {"ok": True, "module": "cuda.bindings.driver"}
        probe["devices"] = [{"index": i, "multicast": multicast, "gdr_vmm": gdr} for i in (0, 1)]
    return Host(gpus, parse_host_facts(probe), "/env/bin/python", alloc_conf)


APPLIED = {"workspace-preflight": State.APPLIED, "communicator-fusion-gate": State.APPLIED}


def severities(report: DoctorReport) -> dict[str, Severity]:
    return {f.id: f.severity for f in report.findings}


def test_healthy_pcie_box_has_no_host_error() -> None:
    report = diagnose(None, None, APPLIED, host())
    found = severities(report)
    # tree=None adds the "no sglang" error; everything the host said is fine or informative.
    assert found["p2p"] is Severity.OK and found["gdr"] is Severity.OK
    assert found["multicast"] is Severity.INFO  # absent, but the preflight patch covers it
    assert found["sglang"] is Severity.ERROR and report.exit_code == 1


@pytest.mark.parametrize(
    ("facts", "states", "blocked"),
    [
        (dict(p2p=False), APPLIED, "p2p"),
        (dict(gdr=0), APPLIED, "gdr"),
        (dict(alloc_conf="expandable_segments:True"), APPLIED, "alloc-conf"),
        (dict(), {"workspace-preflight": State.PENDING}, "multicast"),
    ],
)
def test_what_blocks_fusion_is_an_error_only_with_sm12x(facts: dict, states: dict, blocked: str) -> None:
    assert severities(diagnose(None, None, states, host(**facts)))[blocked] is Severity.ERROR
    other = GpuReport((Gpu(0, "NVIDIA H200", (9, 0)), Gpu(1, "NVIDIA H200", (9, 0))), "nvidia-smi")
    assert severities(diagnose(None, None, states, host(other, **facts)))[blocked] is Severity.WARNING


def test_multicast_present_is_fine_whatever_the_preflight() -> None:
    found = severities(diagnose(None, None, {"workspace-preflight": State.PENDING}, host(multicast=1)))
    assert found["multicast"] is Severity.OK


def test_without_torch_one_warning_names_the_skipped_checks() -> None:
    report = diagnose(None, None, APPLIED, host(torch_ok=False))
    skipped = [f for f in report.findings if f.id == "host-checks"]
    assert len(skipped) == 1 and skipped[0].severity is Severity.WARNING
    assert skipped[0].summary == "skipped: P2P access, multicast, GPUDirect RDMA with VMM"
    assert not {"p2p", "multicast", "gdr"} & {f.id for f in report.findings}


def test_no_gpu_is_an_answer_not_an_error() -> None:
    report = diagnose(None, None, {"communicator-fusion-gate": State.PENDING}, host(NO_SMI, torch_ok=False))
    found = {f.id: f for f in report.findings}
    assert found["gpus"].severity is Severity.INFO and found["gpus"].summary == "no NVIDIA GPU seen"
    assert found["patch:communicator-fusion-gate"].severity is Severity.WARNING


def test_the_gpus_come_from_torch_when_nvidia_smi_is_missing() -> None:
    facts = host(NO_SMI, torch_gpus=[{"index": 0, "name": RTX_PRO_6000, "capability": [12, 0]}])
    found = {f.id: f for f in diagnose(None, None, APPLIED, facts).findings}
    assert found["gpus"].severity is Severity.OK and "cc 12.0" in found["gpus"].detail
    assert "torch.cuda in /env/bin/python" in found["gpus"].source


@pytest.mark.parametrize(("tp", "severity"), [(2, Severity.INFO), (4, Severity.WARNING), (8, Severity.WARNING)])
def test_the_tp_finding_points_to_bench(mini: Path, tp: int, severity: Severity) -> None:
    from sm120patch.sglang.tree import from_directory

    tree = from_directory(mini)
    finding = {f.id: f for f in diagnose(tree, None, APPLIED, host(), tp).findings}["tp"]
    assert finding.severity is severity
    assert f"`sm120patch bench kernel --tp {tp}`" in finding.detail


# --- one report, in order, and what decides error against warning (no processes) ------------------

PATCH_IDS = [
    "patch:communicator-import",
    "patch:communicator-flag",
    "patch:communicator-fusion-gate",
    "patch:fusion-token-limit",
    "patch:fusion-backend-resolver",
    "patch:workspace-preflight",
    "patch:server-args-auto-enable",
]
H200S = tuple(Gpu(i, "NVIDIA H200", (9, 0)) for i in (0, 1))


def test_the_report_on_the_miniature_release_in_its_order(mini: Path) -> None:
    tree = from_directory(mini)
    report = diagnose(tree, None, patch_states(tree), host_with(), tp=2)
    assert [f.id for f in report.findings] == [
        "gpus", "sglang", "flashinfer", *PATCH_IDS, "p2p", "allreduce", "multicast", "gdr", "alloc-conf",
        "tp-gpus", "launch", "tp",
    ]  # fmt: skip
    assert report.gpus == TWO_SM120.gpus and report.refusal is None


def test_the_variable_torch_and_the_skipped_checks_have_their_places(mini: Path) -> None:
    tree = from_directory(mini)
    host = host_with(
        torch_gpus=TWO_SM120.gpus[:1],
        serving_environ={"CUDA_VISIBLE_DEVICES": "0"},
        driver=DriverFacts(False, error="no bindings"),
    )
    report = diagnose(tree, None, patch_states(tree), host)
    assert [f.id for f in report.findings] == [
        "gpus", "sglang", "cuda-visible-devices", "torch-gpus", "flashinfer", *PATCH_IDS, "host-checks", "p2p",
        "alloc-conf", "launch",
    ]  # fmt: skip


def test_without_a_tree_no_flashinfer_launch_or_tp_advice() -> None:
    states = {"communicator-fusion-gate": State.PENDING}
    report = diagnose(None, "no sglang found", states, host_with(), tp=2)
    assert [f.id for f in report.findings] == [
        "gpus", "sglang", "patch:communicator-fusion-gate", "p2p", "allreduce", "multicast", "gdr", "alloc-conf",
        "tp-gpus",
    ]  # fmt: skip
    assert report.refusal is None  # nothing to refuse without a tree, whatever the states say
    refused = diagnose(None, "no sglang found", {"communicator-fusion-gate": State.REFUSED}, host_with())
    assert refused.refusal is None and "patch:communicator-fusion-gate" in {f.id for f in refused.findings}


def test_an_sm12x_gpu_that_only_torch_sees_makes_blockers_errors(mini: Path) -> None:
    tree = from_directory(mini)
    states = patch_states(tree)

    def judged(torch_gpus: tuple[Gpu, ...]) -> dict[str, Severity]:
        host = host_with(smi=H200S, torch_gpus=torch_gpus, p2p=(False, False))
        return {f.id: f.severity for f in diagnose(tree, None, states, host).findings}

    hopper, blackwell = judged(H200S), judged(TWO_SM120.gpus)
    for blocker in ("flashinfer", "patch:communicator-fusion-gate", "p2p", "multicast"):
        assert (hopper[blocker], blackwell[blocker]) == (Severity.WARNING, Severity.ERROR), blocker


def test_refusal(mini: Path) -> None:
    tree = from_directory(mini)
    assert refusal(None, {"communicator-flag": State.REFUSED}) is None
    assert refusal(tree, {"communicator-flag": State.PENDING, "workspace-preflight": State.DRIFT}) is None
    assert refusal(tree, {}) is None
    # the states say refused, the release's code does not tell why: the generic word
    assert refusal(tree, {"communicator-flag": State.APPLIED, "workspace-preflight": State.REFUSED}) == (
        "sm120patch refuses this release (see `sm120patch apply`)"
    )
    common = mini / "srt/utils/common.py"
    text = common.read_text()
    start = text.index("def is_sm120_supported")
    common.write_text(text[:start] + text[text.index("\n\n\n", start) + 3 :])
    os.utime(common, ns=(10**18, 10**18))  # read again, however fast the edit came
    assert refusal(tree, {"communicator-flag": State.REFUSED}) == (
        f"sglang {tree.version} has no SM12x probe (sglang.srt.utils.is_sm120_supported, added in 0.5.4), so its "
        "fusion gates cannot be widened without adding GPU detection to sglang. Upgrade to sglang >= 0.5.4."
    )


# --- what each check is handed: the tree, the error, the TP, the refusal (no processes) ----------

GPU_DETAIL = f"2× {RTX_PRO_6000} (cc 12.0): GPUs 0-1"  # one name, said once
FLASHINFER_LACKS = "FlashInfer 0.6.3 lacks the SM12x allreduce kernel (>= 0.6.17 needed)"


def test_nvidia_smi_s_unread_lines_and_the_locate_error_reach_the_report() -> None:
    facts = host_with()
    unread = replace(facts, gpus=GpuReport(facts.gpus.gpus, "nvidia-smi", unread=("No devices were found",)))
    report = diagnose(None, "no sglang in /env/bin/python", {}, unread)
    assert report.findings[:2] == [
        HostFinding(
            "gpus",
            Severity.OK,
            "2 SM12x GPUs: the patches matter here",
            f"{GPU_DETAIL}; nvidia-smi also printed: No devices were found",
            "nvidia-smi",
        ),
        HostFinding("sglang", Severity.ERROR, "no sglang found", "no sglang in /env/bin/python", "sm120patch locate"),
    ]


def test_the_tree_reaches_the_sglang_patch_and_allreduce_findings_and_the_tp_the_allreduce(mini: Path) -> None:
    """The miniature release with FlashInfer 0.6.3 beside it (``fake_flashinfer``), at --tp 4
    on a host where torch sees 2 GPUs."""
    fake_flashinfer(mini.parent, "0.6.3", [9, 10])
    tree = from_directory(mini)
    found = {f.id: f for f in diagnose(tree, None, patch_states(tree), host_with(), tp=4).findings}
    assert found["sglang"] == HostFinding("sglang", Severity.INFO, "sglang 0.5.11 (wheel)", str(mini), tree.how_found)
    assert found["flashinfer"].summary == FLASHINFER_LACKS
    assert found["flashinfer"].detail == (
        "the fused path fails at JIT on SM12x (sglang#15650); `pip install -U 'flashinfer-python>=0.6.17'`"
    )
    assert found["patch:communicator-flag"].source == f"sm120patch verify ({mini})"
    assert found["allreduce"].summary == "sglang 0.5.11 allreduce at TP 4: NCCL"
    assert found["allreduce"].detail == (
        "NVLink not known (NVML did not answer; read as PCIe); the custom allreduce needs P2P between the GPUs "
        "and these lack it"
    )


def test_a_refused_release_keeps_the_findings_before_it_and_points_flashinfer_at_the_upgrade(mini: Path) -> None:
    """The miniature release with FlashInfer 0.6.3 beside it (``fake_flashinfer``); the states
    say refused, so the generic refusal stands."""
    fake_flashinfer(mini.parent, "0.6.3", [9, 10])
    tree = from_directory(mini)
    report = diagnose(tree, None, {"communicator-flag": State.REFUSED}, host_with())
    assert [f.id for f in report.findings] == [
        "gpus", "sglang", "flashinfer", "patches", "p2p", "allreduce", "multicast", "gdr", "alloc-conf",
    ]  # fmt: skip
    found = {f.id: f for f in report.findings}
    assert (found["flashinfer"].summary, found["flashinfer"].detail) == (
        FLASHINFER_LACKS,
        "sglang >= 0.5.18 pins a FlashInfer that has it",
    )
    assert found["patches"].detail == "sm120patch refuses this release (see `sm120patch apply`)"


def test_a_release_with_pcie_ipc_on_a_pcie_sm12x_host_says_so_after_the_allreduce_in_the_json(mini: Path) -> None:
    """The miniature release with sglang's PCIe-IPC module (0.5.21+) on two SM120 GPUs whose
    NVLink NVML did not tell (read as PCIe): the finding follows the allreduce one, in --json too."""
    (mini / PCIE_IPC_MODULE).parent.mkdir(parents=True, exist_ok=True)
    (mini / PCIE_IPC_MODULE).write_text("# sglang's PCIe-IPC allreduce\n")
    tree = from_directory(mini)
    report = diagnose(tree, None, patch_states(tree), host_with(), tp=2)
    ids = [f.id for f in report.findings]
    assert ids[ids.index("allreduce") + 1] == "pcie-ipc"
    (found,) = [f for f in doctor_json(tree, report)["findings"] if f["id"] == "pcie-ipc"]
    assert "PCIe-IPC allreduce for PCIe SM12x hosts, off (" in found["summary"]
    assert "GroupCoordinator.all_reduce asks _can_use_flashinfer_allreduce first" in found["detail"]
    assert "`sm120patch bench server --tp 2` decides between them" in found["detail"]


def test_the_pcie_ipc_finding_names_the_tp_asked_not_every_gpu(mini: Path) -> None:
    """Four PCIe SM120 GPUs, doctor asked about TP 2: the bench it points at runs at TP 2."""
    (mini / PCIE_IPC_MODULE).parent.mkdir(parents=True, exist_ok=True)
    (mini / PCIE_IPC_MODULE).write_text("# sglang's PCIe-IPC allreduce\n")
    tree = from_directory(mini)
    four = tuple(Gpu(i, RTX_PRO_6000, (12, 0)) for i in range(4))
    report = diagnose(tree, None, patch_states(tree), host_with(torch_gpus=four, smi=four), tp=2)
    (found,) = [f for f in report.findings if f.id == "pcie-ipc"]
    assert "`sm120patch bench server --tp 2` decides between them" in found.detail
