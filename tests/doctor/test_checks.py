"""Each check of ``doctor.checks`` on its own, on facts built directly."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sm120patch.doctor import checks
from sm120patch.doctor.findings import HostFinding, Severity
from sm120patch.doctor.gpus import Gpu
from sm120patch.doctor.host import DriverFacts, Host, TorchFacts
from sm120patch.locate.tree import InstallKind, SglangTree
from sm120patch.patchkit.model import State
from tests.doctor.facts import PYTHON, TORCH, TWO_SM120, host_with
from tests.doctor.hostfakes import RTX_PRO_6000

BLOCKING = (Severity.ERROR, Severity.WARNING)


def only(found: list[HostFinding]) -> HostFinding:
    assert len(found) == 1, found
    return found[0]


def tree(flashinfer: str | None = None, version: str = "0.5.9") -> SglangTree:
    return SglangTree(Path("/site/sglang"), version, InstallKind.WHEEL, None, "test", flashinfer=flashinfer)


# --- gpus, sglang, flashinfer, patches --------------------------------------------------------


def test_gpus() -> None:
    none = only(checks.gpus((), "nvidia-smi (not on PATH)"))
    assert (none.severity, none.summary, none.source) == (
        Severity.INFO,
        "no NVIDIA GPU seen",
        "nvidia-smi (not on PATH)",
    )
    sm12x = only(checks.gpus((*TWO_SM120, Gpu(2, "NVIDIA H200", (9, 0))), "nvidia-smi"))
    assert sm12x.severity is Severity.OK and sm12x.summary == "2 SM12x GPU(s): the patches matter here"
    assert sm12x.detail.endswith("; GPU 2: NVIDIA H200 (cc 9.0)")
    other = only(checks.gpus((Gpu(0, "NVIDIA H200", (9, 0)),), "nvidia-smi"))
    assert other.severity is Severity.INFO and other.summary.startswith("no SM12x GPU")


def test_sglang() -> None:
    missing = only(checks.sglang(None, "no sglang found in this interpreter"))
    assert (missing.severity, missing.detail, missing.source) == (
        Severity.ERROR,
        "no sglang found in this interpreter",
        "sm120patch locate",
    )
    found = only(checks.sglang(tree(), None))
    assert found.severity is Severity.INFO and found.summary == "sglang 0.5.9 (wheel)"
    assert found.detail == "/site/sglang" and found.source == "test"


@pytest.mark.parametrize("blocking", BLOCKING)
def test_flashinfer(blocking: Severity) -> None:
    absent = only(checks.flashinfer(tree(), blocking))
    assert absent.severity is blocking and absent.summary == "FlashInfer is not installed beside sglang"
    assert absent.detail.startswith("sglang 0.5.9 pins ")
    assert only(checks.flashinfer(tree("0.6.18"), blocking)).severity is Severity.OK
    unknown = only(checks.flashinfer(tree("not-a-version"), blocking))
    assert unknown.severity is Severity.WARNING and "cannot tell" in unknown.summary
    old = only(checks.flashinfer(tree("0.6.3"), blocking))
    assert old.severity is blocking and "lacks the SM12x allreduce kernel (>= 0.6.17 needed)" in old.summary
    assert old.source.endswith("; flashinfer#3903")


@pytest.mark.parametrize("blocking", BLOCKING)
def test_patches(blocking: Severity) -> None:
    states = {
        "a": State.APPLIED,
        "b": State.NOT_NEEDED,
        "c": State.PENDING,
        "d": State.DRIFT,
        "e": State.REFUSED,
    }
    found = {f.id: f for f in checks.patches(tree(), states, blocking)}
    assert list(found) == ["patch:a", "patch:b", "patch:c", "patch:d", "patch:e"]
    assert found["patch:a"].severity is Severity.OK and found["patch:a"].summary == "a: applied"
    assert found["patch:b"].severity is Severity.OK and found["patch:b"].summary == "b: not-needed"
    assert found["patch:c"].severity is blocking and found["patch:c"].summary == "c: pending (not applied)"
    assert found["patch:c"].detail == "run `sm120patch apply`"
    assert found["patch:d"].severity is blocking and found["patch:d"].summary == "d: drift"
    assert found["patch:e"].severity is blocking and found["patch:e"].summary == "e: refused"
    assert {f.source for f in found.values()} == {"sm120patch verify (/site/sglang)"}
    assert only(checks.patches(None, {"a": State.APPLIED}, blocking)).source == "sm120patch verify"


# --- the host -------------------------------------------------------------------------------


def test_skipped_says_nothing_when_everything_answered() -> None:
    assert checks.skipped(host_with()) == []


@pytest.mark.parametrize(
    ("host", "names", "reason"),
    [
        (host_with(error="could not run it"), "P2P access, multicast, GPUDirect RDMA with VMM", "could not run it"),
        (
            host_with(torch=TorchFacts(False, error="No module named 'torch'")),
            "P2P access, multicast, GPUDirect RDMA with VMM",
            "No module named 'torch'",
        ),
        (host_with(torch=TorchFacts(False)), "P2P access, multicast, GPUDirect RDMA with VMM", "torch did not answer"),
        (
            host_with(driver=DriverFacts(False, error="No module named 'cuda'")),
            "multicast, GPUDirect RDMA with VMM",
            "No module named 'cuda'",
        ),
        (
            host_with(driver=DriverFacts(False)),
            "multicast, GPUDirect RDMA with VMM",
            "the CUDA driver bindings did not answer",
        ),
    ],
)
def test_skipped_names_what_could_not_be_judged(host: Host, names: str, reason: str) -> None:
    finding = only(checks.skipped(host))
    assert finding.severity is Severity.WARNING and finding.summary == f"skipped: {names}"
    assert finding.detail == f"torch / cuda.bindings did not import or answer in {PYTHON}: {reason}"
    assert finding.source == f"{PYTHON} (sm120patch.probes.host_facts)"


@pytest.mark.parametrize("blocking", BLOCKING)
def test_p2p(blocking: Severity) -> None:
    ok = only(checks.p2p(host_with(), blocking))
    assert ok.severity is Severity.OK and ok.summary == "P2P access between all 2 GPU pairs"
    missing = only(checks.p2p(host_with(p2p=(True, False)), blocking))
    assert missing.severity is blocking and missing.summary == "no P2P access between GPUs 1->0"
    assert checks.p2p(host_with(torch=TorchFacts(False)), blocking) == []


@pytest.mark.parametrize("blocking", BLOCKING)
@pytest.mark.parametrize(
    ("seen", "tp", "severity"),
    [(0, None, Severity.INFO), (1, None, Severity.INFO), (1, 1, Severity.INFO), (1, 2, Severity.WARNING)],
)
def test_p2p_over_fewer_than_two_gpus_is_never_ok(
    blocking: Severity, seen: int, tp: int | None, severity: Severity
) -> None:
    finding = only(checks.p2p(host_with(torch_gpus=TWO_SM120[:seen]), blocking, tp))
    assert finding.severity is severity
    assert finding.summary == f"P2P: torch sees {seen} GPU{'' if seen == 1 else 's'}, no pair to check"
    assert finding.detail == (f"--tp {tp} needs peer access between {tp} GPUs" if severity is Severity.WARNING else "")


def test_p2p_checked_part_way_is_not_ok() -> None:
    host = host_with(torch=replace(TORCH, error="RuntimeError: CUDA error"))
    partial = replace(host, facts=replace(host.facts, p2p=host.facts.p2p[:1]))
    finding = only(checks.p2p(partial, Severity.ERROR))
    assert finding.severity is Severity.WARNING and finding.summary == "P2P: 1 of 2 GPU pairs checked"
    assert finding.detail == "torch failed part way: RuntimeError: CUDA error"


@pytest.mark.parametrize("blocking", BLOCKING)
def test_multicast(blocking: Severity) -> None:
    present = only(checks.multicast(host_with(multicast=(True, True)), {}, blocking))
    assert present.severity is Severity.OK
    for preflight in (State.APPLIED, State.NOT_NEEDED):
        covered = only(checks.multicast(host_with(), {"workspace-preflight": preflight}, blocking))
        assert covered.severity is Severity.INFO and covered.summary == "no multicast on GPUs 0, 1"
        assert covered.detail.startswith(f"workspace-preflight is {preflight.value}: ")
    for states in ({}, {"workspace-preflight": State.PENDING}, {"workspace-preflight": State.DRIFT}):
        blocked = only(checks.multicast(host_with(multicast=(True, False)), states, blocking))
        assert blocked.severity is blocking and blocked.summary == "no multicast on GPU 1"
        assert blocked.source.endswith("via cuda.bindings.driver; sglang#32330")
    assert checks.multicast(host_with(driver=DriverFacts(False)), {}, blocking) == []
    assert checks.multicast(host_with(torch=TorchFacts(False)), {}, blocking) == []


@pytest.mark.parametrize("blocking", BLOCKING)
def test_gdr(blocking: Severity) -> None:
    assert only(checks.gdr(host_with(), blocking)).severity is Severity.OK
    missing = only(checks.gdr(host_with(gdr_vmm=(False, True)), blocking))
    assert missing.severity is blocking and missing.summary == "no GPUDirect RDMA with VMM on GPU 0"
    assert missing.source.endswith("; flashinfer#4634")
    assert checks.gdr(host_with(driver=DriverFacts(False)), blocking) == []


@pytest.mark.parametrize(("smi", "severity"), [(TWO_SM120, Severity.WARNING), ((), Severity.INFO)])
def test_no_device_listed_skips_the_attribute_checks_and_says_so(smi: tuple[Gpu, ...], severity: Severity) -> None:
    """torch and the driver answered, but under CUDA_VISIBLE_DEVICES="" they list no GPU."""
    host = host_with(torch_gpus=(), smi=smi, serving_environ={"CUDA_VISIBLE_DEVICES": ""})
    assert checks.multicast(host, {}, Severity.ERROR) == [] and checks.gdr(host, Severity.ERROR) == []
    finding = only(checks.skipped(host))
    assert finding.severity is severity and finding.summary == "skipped: multicast, GPUDirect RDMA with VMM"
    assert finding.detail.startswith(f'the CUDA driver in {PYTHON} lists no GPU (CUDA_VISIBLE_DEVICES=""): ')
    assert finding.detail.endswith(", while nvidia-smi lists 2 GPUs") is bool(smi)


# --- the allocator variable ------------------------------------------------------------------

BOTH = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
LIB = "/env/lib/torch/lib/libc10.so"


def torch_reading(*names: str) -> TorchFacts:
    return replace(TORCH, alloc_reads=names, alloc_evidence=LIB)


@pytest.mark.parametrize("blocking", BLOCKING)
@pytest.mark.parametrize(
    ("environ", "reads", "severity", "summary"),
    [
        ({}, BOTH, Severity.OK, "PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF are not set"),
        ({}, BOTH[:1], Severity.OK, "PYTORCH_CUDA_ALLOC_CONF is not set"),
        (
            {"PYTORCH_CUDA_ALLOC_CONF": ""},
            BOTH,
            Severity.OK,
            "PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF are not set",
        ),
        (
            {"PYTORCH_ALLOC_CONF": "max_split_size_mb:512"},
            BOTH,
            Severity.OK,
            "PYTORCH_ALLOC_CONF=max_split_size_mb:512",
        ),
        (
            {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
            BOTH,
            None,
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        ),
        ({"PYTORCH_ALLOC_CONF": "max_split_size_mb:64, Expandable_Segments : true"}, BOTH, None, None),
        ({"PYTORCH_ALLOC_CONF": "expandable_segments:True"}, BOTH[:1], Severity.INFO, None),
        ({"PYTORCH_ALLOC_CONF": "expandable_segments:True"}, None, None, None),  # cannot tell: both count
    ],
)
def test_alloc_conf_in_each_spelling_the_serving_torch_reads(
    blocking: Severity, environ: dict, reads: tuple[str, ...] | None, severity: Severity | None, summary: str | None
) -> None:
    torch = torch_reading(*reads) if reads is not None else TORCH
    finding = only(checks.alloc_conf(host_with(torch=torch, environ=environ), blocking))
    assert finding.severity is (severity or blocking)
    [(name, value)] = environ.items() or [("", "")]
    if summary is None:
        summary = f"{name}={value}" + (" (not read by this torch)" if severity is Severity.INFO else "")
    assert finding.summary == summary
    assert finding.source.startswith(
        f"PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF in doctor's environment and in {PYTHON}"
    )
    if reads is None:
        assert finding.detail.endswith("could not be told: both are checked")
    else:
        assert f"torch 2.9.0 in {PYTHON} reads {' and '.join(reads)}" in finding.detail
        assert finding.source.endswith(f"; the names found in {LIB}")


def test_alloc_conf_set_only_in_the_serving_interpreter_counts() -> None:
    host = host_with(torch=torch_reading(*BOTH), serving_environ={"PYTORCH_ALLOC_CONF": "expandable_segments:True"})
    finding = only(checks.alloc_conf(host, Severity.ERROR))
    assert finding.severity is Severity.ERROR and finding.summary == "PYTORCH_ALLOC_CONF=expandable_segments:True"


def test_alloc_conf_without_torch_checks_both_spellings() -> None:
    host = host_with(torch=TorchFacts(False), environ={"PYTORCH_ALLOC_CONF": "expandable_segments:True"})
    finding = only(checks.alloc_conf(host, Severity.WARNING))
    assert finding.severity is Severity.WARNING
    assert finding.detail.endswith(f"torch did not answer in {PYTHON}: both spellings are checked")


# --- what the serving process will see ---------------------------------------------------------


def test_gpus_of_unknown_capability_are_gpus() -> None:
    unknown = tuple(Gpu(i, RTX_PRO_6000, None, raw_capability="[N/A]") for i in (0, 1))
    told = only(checks.gpus(unknown, "nvidia-smi", TWO_SM120))
    assert told.severity is Severity.OK and told.summary == "torch sees 2 SM12x GPU(s): the patches matter here"
    untold = only(checks.gpus(unknown, "nvidia-smi"))
    assert untold.severity is Severity.WARNING
    assert untold.summary == (
        "compute capability unknown for GPUs 0, 1: blockers below are warnings, errors if they are SM12x GPUs"
    )
    assert untold.detail.startswith(f"GPU 0: {RTX_PRO_6000} (cc unknown: nvidia-smi says [N/A]); GPU 1: ")


def test_unreadable_lines_of_nvidia_smi_are_said() -> None:
    garbage = only(checks.gpus((), "nvidia-smi", unread=("\ufffd\ufffd",)))
    assert garbage.severity is Severity.WARNING and garbage.summary == "nvidia-smi answered, but no line reads as a GPU"
    assert "no NVIDIA GPU seen" not in garbage.summary


def test_cuda_visible_devices_is_reported_when_set() -> None:
    assert checks.cuda_visible_devices(host_with()) == []
    finding = only(
        checks.cuda_visible_devices(host_with(environ={"CUDA_VISIBLE_DEVICES": "0"}, torch_gpus=TWO_SM120[:1]))
    )
    assert (finding.id, finding.severity, finding.summary) == (
        "cuda-visible-devices",
        Severity.INFO,
        "CUDA_VISIBLE_DEVICES=0",
    )
    assert finding.detail == "CUDA_VISIBLE_DEVICES=0 shows GPU 0 only to CUDA"
    assert finding.source == "CUDA_VISIBLE_DEVICES in doctor's environment (the server inherits it)"
    differs = only(
        checks.cuda_visible_devices(
            host_with(environ={"CUDA_VISIBLE_DEVICES": "0"}, serving_environ={"CUDA_VISIBLE_DEVICES": ""})
        )
    )
    assert differs.summary == 'CUDA_VISIBLE_DEVICES=""'
    assert differs.detail.startswith(
        'doctor has CUDA_VISIBLE_DEVICES=0, the serving interpreter CUDA_VISIBLE_DEVICES=""'
    )
    assert differs.source.endswith(f"and in os.environ of {PYTHON}")


@pytest.mark.parametrize(
    ("environ", "seen", "severity", "hidden", "why"),
    [
        ({"CUDA_VISIBLE_DEVICES": "0"}, 1, Severity.INFO, "GPU 1", "CUDA_VISIBLE_DEVICES=0 shows GPU 0 only to CUDA"),
        ({"CUDA_VISIBLE_DEVICES": ""}, 0, Severity.WARNING, "GPUs 0, 1", 'CUDA_VISIBLE_DEVICES="" hides every GPU'),
        ({}, 1, Severity.WARNING, None, f"CUDA_VISIBLE_DEVICES is not set in {PYTHON}"),
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, 1, Severity.WARNING, None, "yet torch sees 1: something else hides GPUs"),
    ],
)
def test_torch_seeing_fewer_gpus_says_which_and_why(
    environ: dict, seen: int, severity: Severity, hidden: str | None, why: str
) -> None:
    host = host_with(torch_gpus=TWO_SM120[:seen], serving_environ=environ)
    finding = only(checks.torch_gpus(host))
    assert finding.id == "torch-gpus" and finding.severity is severity
    assert finding.summary == f"torch sees {seen} of the 2 GPUs nvidia-smi lists"
    if hidden:
        assert finding.detail.startswith(f"hidden: {hidden}; ")
    assert why in finding.detail
    assert checks.torch_gpus(host_with()) == []


@pytest.mark.parametrize("blocking", BLOCKING)
def test_tp_above_the_gpus_visible_blocks(blocking: Severity) -> None:
    assert checks.tp_gpus(host_with(), None, blocking) == []
    fits = only(checks.tp_gpus(host_with(), 2, blocking))
    assert fits.severity is Severity.OK and fits.summary == f"TP 2: torch in {PYTHON} shows 2 GPUs"
    above = only(checks.tp_gpus(host_with(), 8, blocking))
    assert above.severity is blocking and above.summary == "TP 8 needs 8 GPUs, 2 visible"
    hidden = only(checks.tp_gpus(host_with(torch_gpus=TWO_SM120[:1]), 2, blocking))
    assert hidden.severity is blocking and hidden.detail.endswith(
        "shows 1 GPU of the 2 nvidia-smi lists (see torch-gpus)"
    )
    no_torch = only(checks.tp_gpus(host_with(torch=TorchFacts(False)), 4, blocking))
    assert no_torch.severity is blocking and no_torch.detail == "sglang needs one GPU per rank; nvidia-smi shows 2 GPUs"


def test_a_refused_release_is_one_finding_with_the_upgrade() -> None:
    finding = only(checks.refused(tree(version="0.5.3"), "sglang 0.5.3 has no SM12x probe", Severity.ERROR))
    assert finding.id == "patches" and finding.severity is Severity.ERROR
    assert finding.summary.startswith("sglang 0.5.3 cannot be patched: upgrade to sglang >= 0.5.4")
    assert finding.detail == "sglang 0.5.3 has no SM12x probe"
    old = only(checks.flashinfer(tree("0.4.0", version="0.5.3"), Severity.ERROR, refused=True))
    assert "pip install" not in old.detail and old.detail.startswith("sglang >= 0.5.18 pins a FlashInfer")


def test_tp_without_torch_counts_what_cuda_visible_devices_leaves() -> None:
    host = host_with(torch=TorchFacts(False), environ={"CUDA_VISIBLE_DEVICES": "0"})
    finding = only(checks.tp_gpus(host, 2, Severity.ERROR))
    assert finding.severity is Severity.ERROR and finding.summary == "TP 2 needs 2 GPUs, 1 visible"
    assert finding.detail == (
        "sglang needs one GPU per rank; CUDA under CUDA_VISIBLE_DEVICES=0 shows 1 GPU of the 2 nvidia-smi lists; "
        "CUDA_VISIBLE_DEVICES=0 shows GPU 0 only to CUDA"
    )
