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
from tests.doctor.facts import PYTHON, TWO_SM120, host_with

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
    ok = only(checks.p2p(host_with(), TWO_SM120, blocking))
    assert ok.severity is Severity.OK and ok.summary == "P2P access between all 2 GPU pairs"
    missing = only(checks.p2p(host_with(p2p=(True, False)), TWO_SM120, blocking))
    assert missing.severity is blocking and missing.summary == "no P2P access between GPUs 1->0"
    one = only(checks.p2p(host_with(), TWO_SM120[:1], blocking))
    assert one.severity is Severity.INFO and one.summary.startswith("one GPU")
    assert checks.p2p(host_with(), (), blocking) == []
    assert checks.p2p(host_with(torch=TorchFacts(False)), TWO_SM120, blocking) == []


@pytest.mark.parametrize("blocking", BLOCKING)
def test_multicast(blocking: Severity) -> None:
    present = only(checks.multicast(host_with(multicast=(True, True)), {}, blocking))
    assert present.severity is Severity.OK
    for preflight in (State.APPLIED, State.NOT_NEEDED):
        covered = only(checks.multicast(host_with(), {"workspace-preflight": preflight}, blocking))
        assert covered.severity is Severity.INFO and covered.summary == "no multicast on GPU(s) [0, 1]"
        assert covered.detail.startswith(f"workspace-preflight is {preflight.value}: ")
    for states in ({}, {"workspace-preflight": State.PENDING}, {"workspace-preflight": State.DRIFT}):
        blocked = only(checks.multicast(host_with(multicast=(True, False)), states, blocking))
        assert blocked.severity is blocking and blocked.summary == "no multicast on GPU(s) [1]"
        assert blocked.source.endswith("via cuda.bindings.driver; sglang#32330")
    assert checks.multicast(host_with(driver=DriverFacts(False)), {}, blocking) == []
    assert checks.multicast(host_with(torch=TorchFacts(False)), {}, blocking) == []


@pytest.mark.parametrize("blocking", BLOCKING)
def test_gdr(blocking: Severity) -> None:
    assert only(checks.gdr(host_with(), blocking)).severity is Severity.OK
    missing = only(checks.gdr(host_with(gdr_vmm=(False, True)), blocking))
    assert missing.severity is blocking and missing.summary == "no GPUDirect RDMA with VMM on GPU(s) [0]"
    assert missing.source.endswith("; flashinfer#4634")
    assert checks.gdr(host_with(driver=DriverFacts(False)), blocking) == []


def test_no_device_listed_means_no_attribute_finding() -> None:
    host = host_with()
    bare = replace(host, facts=replace(host.facts, devices=()))
    assert checks.multicast(bare, {}, Severity.ERROR) == [] and checks.gdr(bare, Severity.ERROR) == []


@pytest.mark.parametrize("blocking", BLOCKING)
@pytest.mark.parametrize(
    ("conf", "severity", "summary"),
    [
        (None, Severity.OK, "PYTORCH_CUDA_ALLOC_CONF is not set"),
        ("", Severity.OK, "PYTORCH_CUDA_ALLOC_CONF is not set"),
        ("max_split_size_mb:512", Severity.OK, "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512"),
        ("expandable_segments:True", None, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
        ("max_split_size_mb:64, Expandable_Segments : true", None, None),
    ],
)
def test_alloc_conf(blocking: Severity, conf: str | None, severity: Severity | None, summary: str | None) -> None:
    finding = only(checks.alloc_conf(conf, blocking))
    assert finding.severity is (severity or blocking)
    assert finding.summary == (summary or f"PYTORCH_CUDA_ALLOC_CONF={conf}")
    assert finding.source == "environment variable PYTORCH_CUDA_ALLOC_CONF"
