"""``doctor.gpus``: nvidia-smi's answer read as bytes, any bytes, and a GPU of unknown
capability kept as a GPU.  The processes are ``FakeNvidiaSmi`` (tests/doctor/hostfakes.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sm120patch.doctor import gpus
from sm120patch.doctor.gpus import (
    Gpu,
    GpuReport,
    Reply,
    answer,
    from_nvidia_smi,
    parse_capability,
    parse_csv,
    read_answer,
)
from tests.doctor.hostfakes import RTX_PRO_6000, FakeGpu, fake_nvidia_smi, two_rtx, uuid_of

COMMAND = "nvidia-smi --query-gpu=index,name,compute_cap --format=csv,noheader"


@pytest.mark.parametrize(
    ("text", "capability"),
    [("12.0", (12, 0)), (" 8.9 ", (8, 9)), ("12", (12, 0)), ("[N/A]", None), ("[Not Supported]", None), ("", None)],
)
def test_parse_capability(text: str, capability: tuple[int, int] | None) -> None:
    assert parse_capability(text) == capability


def test_a_line_with_an_unreadable_capability_is_a_gpu_of_unknown_capability() -> None:
    text = f"0, {RTX_PRO_6000}, [N/A]\n1, {RTX_PRO_6000}, [Not Supported]\n2, NVIDIA H200, 9.0\n"
    found, unread = parse_csv(text)
    assert unread == []
    assert [(g.index, g.capability, g.raw_capability) for g in found] == [
        (0, None, "[N/A]"),
        (1, None, "[Not Supported]"),
        (2, (9, 0), None),
    ]
    assert found[0].describe() == f"GPU 0: {RTX_PRO_6000} (cc unknown: nvidia-smi says [N/A])"
    assert not found[0].sm12x and found[2].describe() == "GPU 2: NVIDIA H200 (cc 9.0)"


def test_names_may_hold_commas_and_lines_that_are_no_gpu_are_kept_aside() -> None:
    found, unread = parse_csv("0, Vendor, Model X, 12.0\nWARNING: infoROM is corrupted\n\nNo devices were found\n")
    assert found == [Gpu(0, "Vendor, Model X", (12, 0))]
    assert unread == ["WARNING: infoROM is corrupted"]


def test_uuids_tie_to_indices() -> None:
    assert gpus.parse_uuids("0, GPU-abc\n1, not-a-uuid\nx, GPU-def\n") == {0: "GPU-abc"}


def run(returncode: int, stdout: bytes, stderr: bytes = b"") -> GpuReport:
    return read_answer(COMMAND, answer(returncode, stdout, stderr))


replies = st.builds(answer, st.integers(min_value=-64, max_value=255), st.binary(max_size=300), st.binary(max_size=100))


@settings(max_examples=400, deadline=None)
@given(st.integers(min_value=-64, max_value=255), st.binary(max_size=400), st.binary(max_size=200))
def test_any_bytes_and_exit_code_read_without_an_exception(returncode: int, stdout: bytes, stderr: bytes) -> None:
    report = run(returncode, stdout, stderr)
    assert report.source == COMMAND
    if returncode != 0:
        assert report.gpus == ()
    for gpu in report.gpus:
        gpu.describe()  # every GPU can be said


@settings(max_examples=300, deadline=None)
@given(replies, st.none() | replies, st.none() | replies)
def test_any_three_replies_read_without_an_exception(main: Reply, names: Reply | None, uuids: Reply | None) -> None:
    report = read_answer(COMMAND, main, names, uuids)
    assert report.answered or report.error
    assert "; ".join(g.describe() for g in report.gpus) is not None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=30), st.binary(max_size=12)), max_size=6))
def test_any_name_and_capability_bytes_keep_the_gpu(rows: list[tuple[bytes, bytes]]) -> None:
    """A line with an index and a name is a GPU, whatever the bytes of its name and capability."""
    lines = [b"%d, N%s, %s" % (i, name, cap) for i, (name, cap) in enumerate(rows)]
    one_line = [line for line in lines if len(line.decode("utf-8", "replace").splitlines()) == 1]
    report = run(0, b"\n".join(one_line))
    assert {g.index for g in report.gpus} == {int(line.split(b",")[0]) for line in one_line}
    assert report.unread == ()


def test_failures_say_why() -> None:
    assert run(9, b"", b"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.").error == (
        "nvidia-smi failed: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    )
    assert run(-9, b"").error == "nvidia-smi failed: killed by signal 9"
    assert run(6, b"No devices were found\n") == GpuReport((), COMMAND)  # no GPU: an answer, not an error


# --- the real process: FakeNvidiaSmi on PATH -------------------------------------------------


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    return bin_dir


def test_fake_nvidia_smi_with_na_capability_and_uuids(on_path: Path) -> None:
    fake_nvidia_smi(on_path, two_rtx("[N/A]"))
    report = from_nvidia_smi()
    assert report.answered and report.source == COMMAND
    assert [(g.index, g.capability, g.uuid) for g in report.gpus] == [(i, None, uuid_of(FakeGpu(), i)) for i in (0, 1)]


def test_a_driver_without_the_compute_cap_field_is_asked_for_names(on_path: Path) -> None:
    fake_nvidia_smi(
        on_path, two_rtx(), main=b"", main_rc=2, main_err=b'Field "compute_cap" is not a valid field to query.'
    )
    report = from_nvidia_smi()
    assert report.answered and report.source == "nvidia-smi --query-gpu=index,name --format=csv,noheader"
    assert [(g.name, g.capability, g.raw_capability) for g in report.gpus] == [
        (RTX_PRO_6000, None, "no compute_cap field")
    ] * 2


def test_without_uuids_the_gpus_still_stand(on_path: Path) -> None:
    fake_nvidia_smi(on_path, two_rtx(), uuid_rc=9)
    report = from_nvidia_smi()
    assert [g.uuid for g in report.gpus] == [None, None] and all(g.sm12x for g in report.gpus)


def test_non_utf8_bytes_from_the_process(on_path: Path) -> None:
    fake_nvidia_smi(on_path, [], main=b"\xff\xfe0, \x80GPU\xff, 12.0\n1, N\xe9, [N/A]\xff\n", main_err=b"\xe9\xe8")
    report = from_nvidia_smi()
    assert [g.index for g in report.gpus] == [1] and report.gpus[0].name == "N\ufffd"
    assert report.unread == ("\ufffd\ufffd0, \ufffdGPU\ufffd, 12.0",)


def test_a_hanging_nvidia_smi_costs_the_limit_and_says_so(on_path: Path) -> None:
    script = on_path / "nvidia-smi"
    script.write_text("#!/bin/sh\nexec sleep 30\n")
    script.chmod(0o755)
    report = from_nvidia_smi(timeout=0.5)
    assert report.error == "nvidia-smi did not answer within 0.5 s"


def test_not_on_path(on_path: Path) -> None:
    assert from_nvidia_smi().error == "nvidia-smi is not on PATH"
