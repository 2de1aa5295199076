"""The typed host in this process: which environment the server gets, whose GPUs doctor
judges (and who told their capability), what ``read_host`` passes on, and each odd field of
``host_facts``'s answer word for word.  Hosts are built directly (tests/doctor/facts.py);
``read_host``'s two readers are replaced by recording stand-ins (``Recorder`` below) or, for
the probe gate, a ``serving_python`` shell script (tests/doctor/hostfakes.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from sm120patch import runner as probes
from sm120patch.doctor import host as host_module
from sm120patch.doctor.host import (
    STEP,
    DriverFacts,
    Host,
    HostFacts,
    PeerAccess,
    TorchFacts,
    from_answer,
    parse_host_facts,
    read_host,
    shown,
)
from sm120patch.runner import Answer
from sm120patch.runner.gpus import Gpu, GpuReport, same_uuid
from tests.doctor.facts import PYTHON, TORCH, TWO_SM120, host_with
from tests.doctor.hostfakes import RTX_PRO_6000, serving_python

UNKNOWN = tuple(Gpu(i, RTX_PRO_6000, None, f"GPU-{i}abc", raw_capability="[N/A]") for i in (0, 1))


# --- environments ---------------------------------------------------------------------------------


def test_doctor_s_env_is_its_environ_else_the_allocator_setting() -> None:
    facts = HostFacts(TORCH)
    smi = GpuReport(TWO_SM120, "nvidia-smi")
    assert Host(smi, facts, PYTHON, "x", {"CUDA_VISIBLE_DEVICES": "0"}).env == {"CUDA_VISIBLE_DEVICES": "0"}
    assert Host(smi, facts, PYTHON, "x", {}).env == {}
    assert Host(smi, facts, PYTHON, "expandable_segments:True").env == {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"
    }
    assert Host(smi, facts, PYTHON, None).env == {}


def test_the_serving_env_is_the_serving_interpreter_s_where_it_told() -> None:
    told_nothing = host_with(environ={"CUDA_VISIBLE_DEVICES": "0"}, serving_environ={})
    assert told_nothing.serving_env == {}
    not_told = host_with(environ={"CUDA_VISIBLE_DEVICES": "0"})
    assert not_told.serving_env == {"CUDA_VISIBLE_DEVICES": "0"}


def test_torch_gpus_only_where_torch_answered() -> None:
    assert host_with().torch_gpus == TWO_SM120
    assert host_with(error="could not run").torch_gpus == ()
    assert host_with(torch=TorchFacts(False, error="E")).torch_gpus == ()


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("GPU-ABC-1", "abc-1", True),
        ("GPU-abc-1", "GPU-ABC-1", True),
        ("abc-1", "abc-1", True),
        ("GPU-abc-1", "abc-2", False),
        ("GPU-abc-1", "abc-1x", False),
        (None, "abc", False),
        ("abc", None, False),
        ("", "", False),
        (None, None, False),
    ],
)
def test_same_uuid(a: str | None, b: str | None, same: bool) -> None:
    assert same_uuid(a, b) is same


def test_answered_needs_no_probe_error_and_the_part_s_ok() -> None:
    assert HostFacts(TorchFacts(True), driver=DriverFacts(True)).driver_answered
    assert not HostFacts(TorchFacts(True), driver=DriverFacts(False)).driver_answered
    assert not HostFacts(TorchFacts(False), driver=DriverFacts(True)).driver_answered
    assert not HostFacts(TorchFacts(True), driver=DriverFacts(True), error="E").driver_answered
    assert HostFacts().environ is None and HostFacts().nvlink is None


# --- whose GPUs, and who told their capability -------------------------------------------------


def test_nvidia_smi_s_gpus_with_capabilities_filled_in_say_where_from() -> None:
    torch = tuple(Gpu(i, "other name", (12, 0), f"{i}ABC") for i in (0, 1))
    gpus, source = host_with(smi=UNKNOWN, torch_gpus=torch[::-1]).visible_gpus()
    assert [(g.index, g.capability, g.capability_from) for g in gpus] == [
        (0, (12, 0), "torch, same UUID"),
        (1, (12, 0), "torch, same UUID"),
    ]
    assert source == f"nvidia-smi; torch.cuda.get_device_capability in {PYTHON}"


def test_a_known_capability_is_never_replaced() -> None:
    smi = (Gpu(0, RTX_PRO_6000, (12, 0), "GPU-0abc"),)
    torch = (Gpu(0, RTX_PRO_6000, (9, 0), "0abc"),)
    assert host_with(smi=smi, torch_gpus=torch).visible_gpus() == (smi, "nvidia-smi")


def test_the_same_name_with_one_capability_fills_in() -> None:
    torch = (Gpu(0, RTX_PRO_6000, (12, 0)), Gpu(1, "NVIDIA H200", (9, 0)))
    gpus, _ = host_with(smi=UNKNOWN, torch_gpus=torch).visible_gpus()
    assert [(g.capability, g.capability_from) for g in gpus] == [((12, 0), "torch, same name")] * 2
    two_caps = (Gpu(0, RTX_PRO_6000, (12, 0)), Gpu(1, RTX_PRO_6000, (12, 1)))
    gpus, source = host_with(smi=UNKNOWN, torch_gpus=two_caps, serving_environ={}).visible_gpus()
    assert [g.capability for g in gpus] == [None, None] and source == "nvidia-smi"


def test_torch_seeing_them_all_alike_fills_in_unless_the_variable_picks() -> None:
    torch = (Gpu(0, "a", (12, 1)), Gpu(1, "b", (12, 1)))
    gpus, _ = host_with(smi=UNKNOWN, torch_gpus=torch, serving_environ={}).visible_gpus()
    assert [(g.capability, g.capability_from) for g in gpus] == [((12, 1), "torch, which sees them all")] * 2
    unlike = (Gpu(0, "a", (12, 1)), Gpu(1, "b", (12, 0)))
    assert [g.capability for g in host_with(smi=UNKNOWN, torch_gpus=unlike).visible_gpus()[0]] == [None, None]
    picked = host_with(smi=UNKNOWN, torch_gpus=torch, serving_environ={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert [g.capability for g in picked.visible_gpus()[0]] == [None, None]
    assert [g.capability for g in host_with(smi=UNKNOWN, torch_gpus=()).visible_gpus()[0]] == [None, None]


def test_torch_s_gpus_where_nvidia_smi_lists_none() -> None:
    listed_none = replace(host_with(torch_gpus=TWO_SM120), gpus=GpuReport((), "nvidia-smi"))
    assert listed_none.visible_gpus() == (
        TWO_SM120,
        f"nvidia-smi (listed no GPU); torch.cuda in {PYTHON} (answered)",
    )
    nobody = replace(host_with(torch_gpus=()), gpus=GpuReport((), "nvidia-smi"))
    assert nobody.visible_gpus() == ((), "nvidia-smi")
    failed = replace(host_with(error="boom", torch=TorchFacts(False)), gpus=GpuReport((), "nvidia-smi", "gone"))
    assert failed.visible_gpus() == (TWO_SM120, f"nvidia-smi (gone); torch.cuda in {PYTHON} (did not answer: boom)")
    torch_said = replace(host_with(torch=TorchFacts(False, error="E"), error="boom"), gpus=GpuReport((), "s", "x"))
    assert torch_said.visible_gpus()[1] == f"s (x); torch.cuda in {PYTHON} (did not answer: E)"


# --- read_host ------------------------------------------------------------------------------------


class Recorder:
    """Stand-ins for nvidia-smi and the host_facts probe that record how they were asked."""

    def __init__(self, raises: BaseException | None = None) -> None:
        self.calls: list[tuple[str, object]] = []
        self.raises = raises

    def smi(self, timeout: float) -> GpuReport:
        self.calls.append(("smi", timeout))
        return GpuReport(TWO_SM120, "nvidia-smi")

    def facts(self, python: str, timeout: float) -> HostFacts:
        self.calls.append(("facts", (python, timeout)))
        if self.raises is not None:
            raise self.raises
        return HostFacts(TORCH, TWO_SM120)

    def end_all(self) -> None:
        self.calls.append(("end_all", None))


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(host_module, "from_nvidia_smi", rec.smi)
    monkeypatch.setattr(host_module, "run_host_facts", rec.facts)
    monkeypatch.setattr(host_module, "end_all", rec.end_all)
    return rec


def test_read_host_passes_the_limit_and_keeps_the_variables_that_matter(recorder: Recorder) -> None:
    env = {"CUDA_VISIBLE_DEVICES": "1", "PYTORCH_CUDA_ALLOC_CONF": "x", "HOME": "/root", "PYTORCH_ALLOC_CONF": "y"}
    host = read_host("/py", env, timeout=7.5)
    assert sorted(recorder.calls, key=str) == [("facts", ("/py", 7.5)), ("smi", 7.5)]
    assert host == Host(
        GpuReport(TWO_SM120, "nvidia-smi"),
        HostFacts(TORCH, TWO_SM120),
        "/py",
        "x",
        {"CUDA_VISIBLE_DEVICES": "1", "PYTORCH_CUDA_ALLOC_CONF": "x", "PYTORCH_ALLOC_CONF": "y"},
    )


def test_read_host_reads_this_process_s_environment_by_default(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    host = read_host("/py")
    assert host.environ == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"} and host.alloc_conf is None
    assert ("facts", ("/py", probes.DEFAULT_TIMEOUT_S)) in recorder.calls


class Interrupted(BaseException):
    """Stands for Ctrl-C's KeyboardInterrupt (which pytest would take for its own)."""


def test_an_interrupted_read_ends_nvidia_smi_too(recorder: Recorder) -> None:
    recorder.raises = Interrupted()
    with pytest.raises(Interrupted):
        read_host("/py", {})
    assert recorder.calls[-1] == ("end_all", None)


@pytest.mark.offline
def test_read_host_runs_probes_again_after_an_earlier_command_was_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")  # no nvidia-smi
    python = serving_python(tmp_path / "env", body='echo \'{"torch": {"ok": false, "error": "no torch"}}\'; exit 0')
    probes.end_all()
    try:
        host = read_host(python, {})
    except KeyboardInterrupt:  # what run_isolated raises while probes are stopped
        pytest.fail("read_host did not allow probes again")
    finally:
        probes.allow_probes()
    assert host.facts.error is None and host.facts.torch == TorchFacts(False, error="no torch")


# --- the answer, field by field ------------------------------------------------------------------


def test_a_probe_error_names_the_interpreter_and_the_step() -> None:
    assert from_answer(PYTHON, Answer(1, "", "boom\n")) == HostFacts(error=f"{PYTHON} could not {STEP}: boom")
    assert from_answer(PYTHON, Answer(0, "[1]", "")).error == (
        f"{PYTHON} could not {STEP}: it printed a JSON list, not an object"
    )
    assert STEP == "read the host facts (torch, the CUDA driver)"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("é", '"é"'),
        ([1, None, True], "[1, null, true]"),
        ({1, 2}, "set"),
        ("x" * 78, '"' + "x" * 78 + '"'),  # 80 characters: kept
        ("x" * 79, '"' + "x" * 78 + "…"),  # 81: cut to 80
    ],
)
def test_shown(value: object, text: str) -> None:
    assert shown(value) == text


def test_shown_with_another_limit() -> None:
    assert shown("abcdef", 5) == '"abc…' and shown("abc", 5) == '"abc"'


def test_torch_s_fields() -> None:
    facts = parse_host_facts(
        {
            "torch": {
                "ok": True,
                "version": "2.9.0",
                "cuda": "12.9",
                "path": "/site/torch",
                "alloc_conf": {"reads": ["PYTORCH_CUDA_ALLOC_CONF"], "evidence": "libc10.so"},
            }
        }
    )
    assert facts.torch == TorchFacts(
        True, "2.9.0", "12.9", None, "/site/torch", ("PYTORCH_CUDA_ALLOC_CONF",), "libc10.so"
    )
    odd = parse_host_facts({"torch": {"ok": True, "alloc_conf": {"reads": ["A", 1], "evidence": None}}}).torch
    assert (odd.alloc_reads, odd.alloc_evidence) == (None, None)
    assert parse_host_facts({"torch": {"ok": True, "alloc_conf": {"reads": "A"}}}).torch.alloc_reads is None
    assert parse_host_facts({"torch": {"ok": True, "alloc_conf": ["A"]}}).torch.alloc_reads is None
    assert parse_host_facts({"torch": {"ok": True, "alloc_conf": {"reads": []}}}).torch.alloc_reads == ()


def test_gpu_uuids_and_peer_fields() -> None:
    facts = parse_host_facts(
        {
            "torch": {"ok": True},
            "gpus": [
                {"index": 0, "name": "a", "capability": [12, 0], "uuid": "0abc"},
                {"index": 1, "name": "b", "capability": [12, 1], "uuid": 5},
            ],
            "p2p": [[0, 1, 2], [1, 0, 0]],
        }
    )
    assert facts.gpus == (Gpu(0, "a", (12, 0), "0abc"), Gpu(1, "b", (12, 1)))
    assert facts.p2p == (PeerAccess(0, 1, True), PeerAccess(1, 0, False))


@pytest.mark.parametrize(
    ("changes", "odd"),
    [
        ({"gpus": [{"name": "a", "capability": [12, 0]}]}, "gpus[0].index: null"),
        ({"gpus": [{"index": 0, "name": "a", "capability": [12, "0"]}]}, 'gpus[0].capability: "0"'),
        ({"gpus": [{"index": 0, "name": "a", "capability": "12.0"}]}, 'gpus[0].capability: "12.0"'),
        ({"p2p": [["0", 1, True]]}, 'p2p[0]: "0"'),
        ({"p2p": [[0, 1.0, True]]}, "p2p[0]: 1.0"),
        ({"p2p": [[0, 1, 1.0]]}, "p2p[0]: 1.0"),
        ({"p2p": [0, 1, True]}, "p2p[0]: 0"),
        ({"p2p": "none"}, 'p2p: "none"'),
    ],
)
def test_odd_gpu_and_peer_fields_word_for_word(changes: dict, odd: str) -> None:
    gpus = [{"index": 0, "name": "a", "capability": [12, 0]}]
    facts = parse_host_facts({"torch": {"ok": True}, "gpus": gpus, "p2p": [], **changes})
    assert facts.torch.error == f"odd host_facts answer: {odd}" and not facts.torch.ok


def test_an_odd_device_list_keeps_the_driver_s_own_error() -> None:
    facts = parse_host_facts({"driver": {"ok": False, "error": "no bindings"}, "devices": [None]})
    assert facts.driver == DriverFacts(False, error="no bindings")


def test_the_driver_names_its_bindings() -> None:
    facts = parse_host_facts({"driver": {"ok": True, "module": "cuda.cuda", "error": None}})
    assert facts.driver == DriverFacts(True, "cuda.cuda", None)


@pytest.mark.parametrize(
    ("nvlink", "read"),
    [
        (None, None),
        ([], ()),
        ([[0, 1, True], [1, 0, 0]], (PeerAccess(0, 1, True), PeerAccess(1, 0, False))),
        ([[0, 1]], None),  # an odd answer is no answer
        ("yes", None),
    ],
)
def test_nvlink(nvlink: object, read: tuple[PeerAccess, ...] | None) -> None:
    facts = parse_host_facts({"torch": {"ok": True}, "nvlink": nvlink})
    assert facts.nvlink == read
    assert facts.torch == TorchFacts(True)  # an odd NVLink answer spoils nothing else


@pytest.mark.parametrize(
    ("environ", "read"),
    [
        (None, None),
        ("CUDA_VISIBLE_DEVICES=0", None),
        ({}, {}),
        ({"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": None, "X": 1}, {"CUDA_VISIBLE_DEVICES": "0"}),
    ],
)
def test_the_serving_environ(environ: object, read: Mapping[str, str] | None) -> None:
    assert parse_host_facts({"environ": environ}).environ == read
