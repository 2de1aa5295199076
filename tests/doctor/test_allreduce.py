"""doctor's allreduce finding: which allreduce sglang runs with fusion off, per host and TP.

The host facts are built directly (tests/doctor/facts.py): they stand for what torch and
NVML answer in the serving interpreter.  The release's PCIe-IPC option is a file in the
tree, written here as 0.5.23's wheel has it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sm120patch.doctor.allreduce import PCIE_IPC_SOURCE, SOURCE, allreduce, pcie_ipc
from sm120patch.doctor.findings import HostFinding, Severity
from sm120patch.doctor.host import Host, PeerAccess, TorchFacts
from sm120patch.runner.gpus import Gpu
from sm120patch.sglang.options import PCIE_IPC_MODULE
from sm120patch.sglang.tree import InstallKind, SglangTree
from tests.doctor.facts import host_with
from tests.doctor.hostfakes import RTX_PRO_6000

H200 = "NVIDIA H200"


def tree(tmp_path: Path, version: str, pcie_ipc: bool = False) -> SglangTree:
    package = tmp_path / "sglang"
    if pcie_ipc:
        (package / PCIE_IPC_MODULE).parent.mkdir(parents=True)
        (package / PCIE_IPC_MODULE).write_text("# sglang 0.5.23's PCIe-IPC allreduce\n")
    package.mkdir(exist_ok=True)
    return SglangTree(package, version, InstallKind.WHEEL, None, "test")


def gpus(count: int, name: str = RTX_PRO_6000, cc: tuple[int, int] = (12, 0)) -> tuple[Gpu, ...]:
    return tuple(Gpu(i, name, cc) for i in range(count))


def host(count: int, nvlink: bool | None, p2p: bool = True, name: str = RTX_PRO_6000, **env: str) -> Host:
    base = host_with(torch_gpus=gpus(count, name, (9, 0) if name == H200 else (12, 0)), smi=gpus(count, name))
    pairs = [(i, j) for i in range(count) for j in range(count) if i != j]
    links = None if nvlink is None else tuple(PeerAccess(i, j, nvlink) for i, j in pairs)
    facts = replace(base.facts, p2p=tuple(PeerAccess(i, j, p2p) for i, j in pairs), nvlink=links, environ=env or None)
    return replace(base, facts=facts)


def one(finding: list[HostFinding]) -> tuple[str, str]:
    (only,) = finding
    assert only.id == "allreduce" and only.severity is Severity.INFO and only.source == SOURCE
    return only.summary, only.detail


def test_tp2_on_pcie_keeps_the_custom_allreduce(tmp_path: Path) -> None:
    assert one(allreduce(tree(tmp_path, "0.5.9"), host(2, nvlink=False), 2)) == (
        "sglang 0.5.9 allreduce at TP 2: custom allreduce up to 8 MiB, NCCL above",
        "no full NVLink; at TP 2 sglang keeps its custom allreduce over PCIe (up to 585 tokens at hidden 7168, bf16)",
    )


def test_tp4_on_pcie_is_nccl_and_points_at_the_pcie_ipc_option_where_the_release_has_it(tmp_path: Path) -> None:
    summary, detail = one(allreduce(tree(tmp_path, "0.5.23", pcie_ipc=True), host(4, nvlink=False), 4))
    assert summary == "sglang 0.5.23 allreduce at TP 4: NCCL"
    assert detail == (
        "no full NVLink: sglang turns its custom allreduce off with more than 2 GPUs without full NVLink; this "
        "release has SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1 (FlashInfer's PCIe-IPC allreduce for decode-sized batches, "
        "sglang#34528), a competitor to fusion on this host: `SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1 sm120patch bench "
        "kernel --tp 4` measures it"
    )


def test_the_option_set_in_the_serving_environment_is_said(tmp_path: Path) -> None:
    found = host(4, nvlink=False, SGLANG_ENABLE_PCIE_IPC_ALLREDUCE="1")
    _, detail = one(allreduce(tree(tmp_path, "0.5.23", pcie_ipc=True), found, 4))
    assert "sglang#34528) (set here), a competitor" in detail


def test_a_release_without_the_option_does_not_mention_it(tmp_path: Path) -> None:
    _, detail = one(allreduce(tree(tmp_path, "0.5.20"), host(4, nvlink=False), None))
    assert "PCIE_IPC" not in detail


@pytest.mark.parametrize(
    ("version", "name"), [("0.5.13", "custom allreduce V2 (up to 16 MiB)"), ("0.5.9", "custom allreduce (up to 8 MiB)")]
)
def test_full_nvlink_keeps_custom_allreduce_at_any_tp(tmp_path: Path, version: str, name: str) -> None:
    summary, detail = one(allreduce(tree(tmp_path, version), host(8, nvlink=True, name=H200), 8))
    assert summary == f"sglang {version} allreduce at TP 8: {name}, NCCL above"
    assert detail == "every GPU pair has NVLink (NVML), so sglang keeps its custom allreduce at any TP"


def test_no_p2p_is_nccl_even_at_tp2(tmp_path: Path) -> None:
    assert one(allreduce(tree(tmp_path, "0.5.23"), host(2, nvlink=False, p2p=False), 2)) == (
        "sglang 0.5.23 allreduce at TP 2: NCCL",
        "no full NVLink; the custom allreduce needs P2P between the GPUs and these lack it",
    )


def test_nvlink_unknown_reads_as_pcie_and_says_so(tmp_path: Path) -> None:
    summary, detail = one(allreduce(tree(tmp_path, "0.5.23"), host(4, nvlink=None), 4))
    assert summary == "sglang 0.5.23 allreduce at TP 4: NCCL"
    assert detail.startswith("NVLink not known (NVML did not answer; read as PCIe): sglang turns")


def test_one_gpu_or_no_torch_says_nothing(tmp_path: Path) -> None:
    assert allreduce(tree(tmp_path, "0.5.23"), host(1, nvlink=None), None) == []
    silent = host(2, nvlink=False)
    silent = replace(silent, facts=replace(silent.facts, torch=TorchFacts(ok=False, error="no torch")))
    assert allreduce(tree(tmp_path, "0.5.23"), silent, 2) == []


def test_only_the_first_tp_gpus_count(tmp_path: Path) -> None:
    found = host(4, nvlink=False)
    links = tuple(PeerAccess(p.source, p.target, p.source < 2 and p.target < 2) for p in found.facts.nvlink or ())
    found = replace(found, facts=replace(found.facts, nvlink=links))
    summary, _ = one(allreduce(tree(tmp_path, "0.5.23"), found, 2))
    assert summary == "sglang 0.5.23 allreduce at TP 2: custom allreduce V2 (up to 16 MiB), NCCL above"


@pytest.mark.parametrize(
    ("answer", "read"),
    [
        ([[0, 1, True], [1, 0, True]], (PeerAccess(0, 1, True), PeerAccess(1, 0, True))),
        ([[0, 1, "yes"]], None),  # odd: not told, never guessed
        (None, None),
    ],
)
def test_host_facts_nvlink_answer_is_typed(answer: object, read: object) -> None:
    from sm120patch.doctor.host import parse_host_facts

    data = {"torch": {"ok": True, "version": "2.11"}, "gpus": [], "p2p": [], "driver": {"ok": True}, "devices": []}
    if answer is not None:
        data["nvlink"] = answer
    assert parse_host_facts(data).nvlink == read


def with_p2p(found: Host, ok: object) -> Host:
    """``found`` with P2P between GPUs i and j as ``ok(i, j)`` says."""
    pairs = tuple(PeerAccess(p.source, p.target, bool(ok(p.source, p.target))) for p in found.facts.p2p)  # type: ignore[operator]
    return replace(found, facts=replace(found.facts, p2p=pairs))


@pytest.mark.parametrize(
    ("version", "release", "name"),
    [
        ("0.5.12.post1", "sglang 0.5.12.post1", "custom allreduce (up to 8 MiB)"),
        ("0.5.14", "sglang 0.5.14", "custom allreduce V2 (up to 16 MiB)"),
        ("main", "sglang main", "custom allreduce V2 (up to 16 MiB)"),  # not a version: the newest code
        ("", "sglang", "custom allreduce V2 (up to 16 MiB)"),
    ],
)
def test_the_release_names_the_nvlink_allreduce(tmp_path: Path, version: str, release: str, name: str) -> None:
    summary, _ = one(allreduce(tree(tmp_path, version), host(2, nvlink=True), 2))
    assert summary == f"{release} allreduce at TP 2: {name}, NCCL above"


def test_no_tree_is_sglang_with_the_newest_allreduce(tmp_path: Path) -> None:
    assert one(allreduce(None, host(4, nvlink=True), None)) == (
        "sglang allreduce at TP 4: custom allreduce V2 (up to 16 MiB), NCCL above",
        "every GPU pair has NVLink (NVML), so sglang keeps its custom allreduce at any TP",
    )
    assert one(allreduce(None, host(4, nvlink=False), None))[0] == "sglang allreduce at TP 4: NCCL"


def test_the_tp_asked_for_wins_over_the_gpus_seen(tmp_path: Path) -> None:
    assert one(allreduce(tree(tmp_path, "0.5.20"), host(4, nvlink=False), None)) == (
        "sglang 0.5.20 allreduce at TP 4: NCCL",
        "no full NVLink: sglang turns its custom allreduce off with more than 2 GPUs without full NVLink",
    )
    assert one(allreduce(tree(tmp_path, "0.5.20"), host(4, nvlink=False), 2))[0] == (
        "sglang 0.5.20 allreduce at TP 2: custom allreduce up to 8 MiB, NCCL above"
    )
    assert allreduce(tree(tmp_path, "0.5.20"), host(4, nvlink=False), 1) == []


def test_nvlink_on_some_pairs_only_or_some_pairs_unsaid_is_not_full(tmp_path: Path) -> None:
    found = host(4, nvlink=True)
    links = found.facts.nvlink or ()
    broken = tuple(replace(link, ok=(link.source, link.target) != (2, 3)) for link in links)
    unsaid = tuple(link for link in links if (link.source, link.target) != (3, 2))
    for nvlink in (broken, unsaid):
        odd = replace(found, facts=replace(found.facts, nvlink=nvlink))
        summary, detail = one(allreduce(tree(tmp_path, "0.5.20"), odd, 4))
        assert summary == "sglang 0.5.20 allreduce at TP 4: NCCL"
        assert detail.startswith("no full NVLink: sglang turns")


def test_p2p_only_among_the_first_tp_gpus_counts(tmp_path: Path) -> None:
    found = with_p2p(host(4, nvlink=False), lambda i, j: i < 2 and j < 2)
    assert one(allreduce(tree(tmp_path, "0.5.20"), found, 2))[0] == (
        "sglang 0.5.20 allreduce at TP 2: custom allreduce up to 8 MiB, NCCL above"
    )
    one_way = with_p2p(host(2, nvlink=False), lambda i, j: (i, j) == (0, 1))
    assert one(allreduce(tree(tmp_path, "0.5.20"), one_way, 2))[0] == "sglang 0.5.20 allreduce at TP 2: NCCL"
    unsaid = host(2, nvlink=False)
    unsaid = replace(unsaid, facts=replace(unsaid.facts, p2p=unsaid.facts.p2p[:1]))
    assert one(allreduce(tree(tmp_path, "0.5.20"), unsaid, 2))[0] == "sglang 0.5.20 allreduce at TP 2: NCCL"


@pytest.mark.parametrize("value", ["0", "true", ""])
def test_the_option_set_to_anything_but_1_is_not_said_to_be_set(tmp_path: Path, value: str) -> None:
    found = host(4, nvlink=False, SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=value)
    _, detail = one(allreduce(tree(tmp_path, "0.5.23", pcie_ipc=True), found, 4))
    assert "sglang#34528), a competitor to fusion on this host" in detail


def test_the_pcie_ipc_option_is_pointed_at_only_for_sm12x_gpus_in_the_tp(tmp_path: Path) -> None:
    release = tree(tmp_path, "0.5.23", pcie_ipc=True)
    hopper = host(4, nvlink=False, name=H200)
    _, detail = one(allreduce(release, hopper, 4))
    assert detail == "no full NVLink: sglang turns its custom allreduce off with more than 2 GPUs without full NVLink"
    mixed = host(4, nvlink=False)
    later = (*gpus(3, H200, (9, 0)), Gpu(3, RTX_PRO_6000, (12, 0)))
    mixed = replace(mixed, facts=replace(mixed.facts, gpus=later))
    _, detail = one(allreduce(release, mixed, 3))
    assert "PCIE_IPC" not in detail
    _, detail = one(allreduce(release, mixed, 4))
    assert detail.endswith("`SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1 sm120patch bench kernel --tp 4` measures it")


# --- the PCIe-IPC allreduce (0.5.21+) on a PCIe SM12x host -----------------------------------


def ipc(finding: list[HostFinding]) -> tuple[str, str]:
    (only,) = finding
    assert only.id == "pcie-ipc" and only.severity is Severity.INFO and only.source == PCIE_IPC_SOURCE
    return only.summary, only.detail


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_a_pcie_sm12x_host_hears_that_pcie_ipc_is_there_off_and_what_fusion_does_to_it(tmp_path: Path, tp: int) -> None:
    summary, detail = ipc(pcie_ipc(tree(tmp_path, "0.5.21", pcie_ipc=True), host(tp, nvlink=False), tp))
    assert summary == (
        "sglang 0.5.21 has a PCIe-IPC allreduce for PCIe SM12x hosts, off (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE is "
        "not set in the environment doctor sees; `SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1` turns it on)"
    )
    assert detail == (
        "with fusion on, plain allreduces leave the custom allreduce and PCIe-IPC for FlashInfer's kAllReduce "
        "(GroupCoordinator.all_reduce asks _can_use_flashinfer_allreduce first); "
        f"`sm120patch bench server --tp {tp}` decides between them on this host; upstream measured 12 KiB in "
        "5.3 µs vs NCCL's 205 µs, and at TP 8 with 8k context TPOT 21.1 -> 13.6 ms (35 -> 48 tok/s, +37 %)"
    )


@pytest.mark.parametrize(("value", "on"), [("1", True), ("true", True), ("0", False)])
def test_pcie_ipc_set_in_the_environment_doctor_sees_reads_as_on(tmp_path: Path, value: str, on: bool) -> None:
    found = host(4, nvlink=False, SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=value)
    summary, _ = ipc(pcie_ipc(tree(tmp_path, "0.5.23", pcie_ipc=True), found, 4))
    assert summary.endswith(f", on (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE={value} in the environment doctor sees)") == on
    assert (", off (" in summary) != on


def test_pcie_ipc_is_not_mentioned_without_the_module_with_nvlink_or_on_other_gpus(tmp_path: Path) -> None:
    assert pcie_ipc(tree(tmp_path, "0.5.20"), host(4, nvlink=False), 4) == []
    (tmp_path / "b").mkdir()
    with_module = tree(tmp_path / "b", "0.5.23", pcie_ipc=True)
    assert pcie_ipc(with_module, host(4, nvlink=True), 4) == []
    assert pcie_ipc(with_module, host(4, nvlink=False, name=H200), 4) == []
    assert pcie_ipc(with_module, host(1, nvlink=None), None) == []
    assert pcie_ipc(None, host(4, nvlink=False), 4) == []


def test_a_release_of_unknown_version_is_this_sglang(tmp_path: Path) -> None:
    unknown = replace(tree(tmp_path, "0.5.23", pcie_ipc=True), version=None)
    summary, _ = ipc(pcie_ipc(unknown, host(2, nvlink=False), 2))
    assert summary.startswith("this sglang has a PCIe-IPC allreduce for PCIe SM12x hosts")
