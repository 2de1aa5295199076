"""The typed host: ``host_facts``'s answer parsed, odd or missing fields included."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sm120patch.doctor.host import (
    STEP,
    DeviceFacts,
    DriverFacts,
    Host,
    HostFacts,
    PeerAccess,
    TorchFacts,
    parse_host_facts,
    read_host,
    run_host_facts,
)
from sm120patch.runner.gpus import GpuReport
from tests.doctor.facts import TWO_SM120
from tests.support.fakes import RTX_PRO_6000

ANSWER: dict = {
    "python": "/env/bin/python",
    "torch": {"ok": True, "version": "2.9.0", "cuda": "12.9"},
    "gpus": [{"index": i, "name": RTX_PRO_6000, "capability": [12, 0]} for i in (0, 1)],
    "p2p": [[0, 1, True], [1, 0, False]],
    "driver": {"ok": True, "module": "cuda.bindings.driver"},
    "devices": [{"index": 0, "multicast": 0, "gdr_vmm": 1}, {"index": 1, "multicast": 1, "gdr_vmm": 0}],
}


def answer(**changes: object) -> dict:
    return {**ANSWER, **changes}


def test_a_full_answer_is_typed() -> None:
    facts = parse_host_facts(ANSWER)
    assert facts == HostFacts(
        TorchFacts(True, "2.9.0", "12.9"),
        TWO_SM120,
        (PeerAccess(0, 1, True), PeerAccess(1, 0, False)),
        DriverFacts(True, "cuda.bindings.driver"),
        (DeviceFacts(0, False, True), DeviceFacts(1, True, False)),
    )
    assert facts.torch_answered and facts.driver_answered


def test_without_torch_nothing_else_was_asked() -> None:
    facts = parse_host_facts({"torch": {"ok": False, "error": "No module named 'torch'"}, "gpus": [], "driver": None})
    assert facts.torch == TorchFacts(False, error="No module named 'torch'")
    assert facts.driver == DriverFacts(False) and not facts.torch_answered and not facts.driver_answered


def test_an_empty_answer_is_not_answered() -> None:
    facts = parse_host_facts({})
    assert facts == HostFacts()
    assert facts.torch == TorchFacts(False) and facts.driver == DriverFacts(False) and facts.error is None


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_only_a_true_ok_is_ok(value: object) -> None:
    facts = parse_host_facts(answer(torch={"ok": value}, driver={"ok": value}))
    assert not facts.torch.ok and not facts.driver.ok


def test_odd_torch_and_driver_sections_say_so() -> None:
    facts = parse_host_facts(answer(torch="2.9", driver=[1]))
    assert facts.torch == TorchFacts(False, error='odd host_facts answer: torch: "2.9"')
    assert facts.driver == DriverFacts(False, error="odd host_facts answer: driver: [1]")


def test_text_fields_of_another_type_become_text() -> None:
    facts = parse_host_facts(answer(torch={"ok": True, "version": 2.9, "cuda": None}))
    assert facts.torch == TorchFacts(True, "2.9", None)


@pytest.mark.parametrize(
    ("changes", "odd"),
    [
        ({"gpus": [{"index": 0, "name": RTX_PRO_6000}]}, "gpus[0].capability: null"),
        ({"gpus": [{"index": 0, "name": RTX_PRO_6000, "capability": [12, 0, 1]}]}, "gpus[0].capability: [12, 0, 1]"),
        ({"gpus": [{"index": 0, "name": RTX_PRO_6000, "capability": ["12", 0]}]}, 'gpus[0].capability: "12"'),
        ({"gpus": [{"index": True, "name": RTX_PRO_6000, "capability": [12, 0]}]}, "gpus[0].index: true"),
        ({"gpus": [{"index": 0, "name": None, "capability": [12, 0]}]}, "gpus[0].name: null"),
        ({"gpus": ["GPU 0"]}, 'gpus[0]: "GPU 0"'),
        ({"gpus": {"0": RTX_PRO_6000}}, 'gpus: {"0": "' + RTX_PRO_6000 + '"}'),
        ({"p2p": [[0, 1]]}, "p2p[0]: [0, 1]"),
        ({"p2p": [[0, 1, "yes"]]}, 'p2p[0]: "yes"'),
    ],
)
def test_odd_gpus_or_peer_access_spoil_torch_s_answer(changes: dict, odd: str) -> None:
    facts = parse_host_facts(answer(**changes))
    assert facts.torch == TorchFacts(False, "2.9.0", "12.9", f"odd host_facts answer: {odd}")
    assert facts.gpus == () and facts.p2p == ()
    assert facts.driver.ok and len(facts.devices) == 2  # the driver's answer stands
    assert not facts.torch_answered and not facts.driver_answered


def test_an_odd_gpu_list_keeps_torch_s_own_error() -> None:
    facts = parse_host_facts(answer(torch={"ok": False, "error": "CUDA error"}, gpus=[None]))
    assert facts.torch == TorchFacts(False, error="CUDA error")


@pytest.mark.parametrize(
    ("devices", "odd"),
    [
        ([{"index": 0, "gdr_vmm": 1}], "devices[0].multicast: null"),
        ([{"index": 0, "multicast": "1", "gdr_vmm": 1}], 'devices[0].multicast: "1"'),
        ([{"index": 0, "multicast": 1}], "devices[0].gdr_vmm: null"),
        ([{"multicast": 1, "gdr_vmm": 1}], "devices[0].index: null"),
        ("two", 'devices: "two"'),
    ],
)
def test_odd_devices_spoil_the_driver_s_answer(devices: object, odd: str) -> None:
    facts = parse_host_facts(answer(devices=devices))
    assert facts.driver == DriverFacts(False, "cuda.bindings.driver", f"odd host_facts answer: {odd}")
    assert facts.devices == ()
    assert facts.torch_answered and not facts.driver_answered  # torch's answer stands
    assert len(facts.gpus) == 2


def test_peer_access_and_attributes_may_be_bools_or_numbers() -> None:
    facts = parse_host_facts(
        answer(p2p=[[0, 1, 1], [1, 0, 0]], devices=[{"index": 0, "multicast": True, "gdr_vmm": False}])
    )
    assert facts.p2p == (PeerAccess(0, 1, True), PeerAccess(1, 0, False))
    assert facts.devices == (DeviceFacts(0, True, False),)


def test_a_probe_error_is_not_answered() -> None:
    facts = HostFacts(TorchFacts(True), error="could not run /env/bin/python")
    assert not facts.torch_answered and not facts.driver_answered


def test_gpus_from_nvidia_smi_first() -> None:
    facts = parse_host_facts(answer(gpus=[{"index": 0, "name": "other", "capability": [9, 0]}]))
    host = Host(GpuReport(TWO_SM120, "nvidia-smi"), facts, "/env/bin/python", None)
    assert host.visible_gpus() == (TWO_SM120, "nvidia-smi")


@pytest.mark.parametrize(
    ("facts", "answered"),
    [
        (parse_host_facts(ANSWER), "answered"),
        (parse_host_facts({"torch": {"ok": False, "error": "No module named 'torch'"}}), "did not answer: No module"),
        (HostFacts(error="could not run /env/bin/python"), "did not answer: could not run /env/bin/python"),
    ],
)
def test_gpus_from_torch_when_nvidia_smi_is_missing(facts: HostFacts, answered: str) -> None:
    host = Host(GpuReport((), "nvidia-smi", "nvidia-smi is not on PATH"), facts, "/env/bin/python", None)
    gpus, source = host.visible_gpus()
    assert gpus == facts.gpus
    assert source.startswith("nvidia-smi (nvidia-smi is not on PATH); torch.cuda in /env/bin/python (" + answered)


def fake_python(tmp_path: Path, body: str) -> str:
    """An executable that stands for an interpreter and answers ``body`` (a shell script)."""
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return str(exe)


@pytest.mark.offline
def test_a_probe_that_cannot_run_is_an_answer(tmp_path: Path) -> None:
    facts = run_host_facts(str(tmp_path / "no-python"))
    assert facts.error == f"could not run {tmp_path / 'no-python'} to {STEP}: No such file or directory"
    assert not facts.torch_answered


@pytest.mark.offline
def test_a_probe_without_json_is_an_answer(tmp_path: Path) -> None:
    python = fake_python(tmp_path, "echo 'Segmentation fault' >&2; exit 139")
    facts = run_host_facts(python)
    assert facts.error == f"{python} could not {STEP}: Segmentation fault"


@pytest.mark.offline
def test_a_probe_that_answers_no_object_is_an_answer(tmp_path: Path) -> None:
    facts = run_host_facts(fake_python(tmp_path, "echo '[1, 2]'"))
    assert facts.error is not None and facts.error.endswith(f"could not {STEP}: it printed a JSON list, not an object")


@pytest.mark.offline
def test_the_probe_in_this_interpreter_answers() -> None:
    facts = run_host_facts(sys.executable)
    assert facts.error is None
    assert facts.torch.ok or facts.torch.error  # torch is optional here: either way it is said


@pytest.mark.offline
def test_read_host_takes_the_allocator_setting_from_the_environment() -> None:
    host = read_host(sys.executable, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert host.alloc_conf == "expandable_segments:True" and host.python == sys.executable
    assert read_host(sys.executable, {}).alloc_conf is None
