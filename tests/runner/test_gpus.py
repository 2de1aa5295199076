"""``doctor.gpus``: nvidia-smi's answer read as bytes, any bytes, and a GPU of unknown
capability kept as a GPU.  The processes are ``FakeNvidiaSmi`` (tests/doctor/hostfakes.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import strategies as st

from sm120patch.runner import gpus
from sm120patch.runner.gpus import (
    Gpu,
    GpuReport,
    Reply,
    answer,
    describe_all,
    from_nvidia_smi,
    parse_capability,
    parse_csv,
    read_answer,
)
from tests.doctor.hostfakes import RTX_PRO_6000, FakeGpu, fake_nvidia_smi, nvidia_smi_calls, two_rtx, uuid_of
from tests.support.properties import fast_and_slow

COMMAND = "nvidia-smi --query-gpu=index,name,compute_cap --format=csv,noheader"
NAMES_COMMAND = "nvidia-smi --query-gpu=index,name --format=csv,noheader"
NO_COMPUTE_CAP = b'Field "compute_cap" is not a valid field to query.'


@pytest.mark.parametrize(
    ("text", "capability"),
    [
        ("12.0", (12, 0)),
        (" 8.9 ", (8, 9)),
        ("12", (12, 0)),
        ("[N/A]", None),
        ("[Not Supported]", None),
        ("", None),
        ("12.\u0663", None),  # ARABIC-INDIC DIGIT THREE: a digit to str.isdigit, not to nvidia-smi
        ("12.x", None),
        ("\u0661\u0662.0", None),
    ],
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


def test_mig_uuids_count_and_a_uuid_with_a_space_or_a_huge_index_does_not() -> None:
    text = "0, MIG-1a2b\n1, mig-lower\n2, GPU-ab cd\n123456, GPU-huge\n12345, GPU-big\n"
    assert gpus.parse_uuids(text) == {0: "MIG-1a2b", 12345: "GPU-big"}


def test_the_uuid_is_everything_after_the_first_comma() -> None:
    assert gpus.parse_uuids("0,GPU-a,b\n") == {0: "GPU-a,b"}


def test_a_blank_line_between_gpus_skips_only_itself() -> None:
    found, unread = parse_csv(f"0, {RTX_PRO_6000}, 12.0\n\n  \nNo devices were found\n1, NVIDIA H200, 9.0\n")
    assert found == [Gpu(0, RTX_PRO_6000, (12, 0)), Gpu(1, "NVIDIA H200", (9, 0))] and unread == []


@pytest.mark.parametrize("line", ["0, , 12.0", "0,   ,[N/A]", "0, NAME", "0", "x, NAME, 12.0", "123456, NAME, 12.0"])
def test_a_line_without_index_name_and_capability_is_no_gpu(line: str) -> None:
    assert parse_csv(line + "\n") == ([], [line])


def test_a_names_only_line_is_a_gpu_whose_capability_was_not_asked() -> None:
    found = Gpu(3, "Old GPU, rev 2", None, raw_capability="no compute_cap field")
    assert parse_csv("3, Old GPU, rev 2\n0, \n0\n", with_capability=False) == ([found], ["0,", "0"])


def test_unread_lines_and_raw_capabilities_are_cut_after_60_characters() -> None:
    at_limit, over = "x" * 60, "y" * 61
    assert parse_csv(f"{at_limit}\n{over}\n") == ([], [at_limit, "y" * 59 + "…"])
    found, _ = parse_csv(f"0, N, {'c' * 60}\n1, N, {'d' * 61}\n")
    assert [g.raw_capability for g in found] == ["c" * 60, "d" * 59 + "…"]


def test_describe_says_what_is_known_and_who_said_it() -> None:
    assert Gpu(0, "X", None).describe() == "GPU 0: X (cc unknown)"
    assert Gpu(1, "X", None, raw_capability="[N/A]").describe() == "GPU 1: X (cc unknown: nvidia-smi says [N/A])"
    assert Gpu(2, "X", (12, 0), capability_from="torch").describe() == "GPU 2: X (cc 12.0 per torch)"
    assert (
        Gpu(3, "X", (12, 1), raw_capability="[N/A]", capability_from="torch").describe()
        == "GPU 3: X (cc 12.1 per torch; nvidia-smi says [N/A])"
    )
    assert Gpu(4, "X", (9, 0)).describe() == "GPU 4: X (cc 9.0)"


def test_to_json_holds_every_field() -> None:
    known = Gpu(0, RTX_PRO_6000, (12, 0), uuid="GPU-abc", raw_capability="[N/A]", capability_from="torch")
    assert known.to_json() == {
        "index": 0,
        "name": RTX_PRO_6000,
        "capability": [12, 0],
        "capability_from": "torch",
        "raw_capability": "[N/A]",
        "uuid": "GPU-abc",
    }
    assert Gpu(1, "X", None).to_json() == {
        "index": 1,
        "name": "X",
        "capability": None,
        "capability_from": None,
        "raw_capability": None,
        "uuid": None,
    }


def run(returncode: int, stdout: bytes, stderr: bytes = b"") -> GpuReport:
    return read_answer(COMMAND, answer(returncode, stdout, stderr))


replies = st.builds(answer, st.integers(min_value=-64, max_value=255), st.binary(max_size=300), st.binary(max_size=100))
#: The strategies each property test and its slow-tier twin share.
ANSWERS = (st.integers(min_value=-64, max_value=255), st.binary(max_size=400), st.binary(max_size=200))
THREE_REPLIES = (replies, st.none() | replies, st.none() | replies)
ROWS = st.lists(st.tuples(st.binary(max_size=30), st.binary(max_size=12)), max_size=6)


def check_bytes_and_exit_code(returncode: int, stdout: bytes, stderr: bytes) -> None:
    report = run(returncode, stdout, stderr)
    assert report.source == COMMAND
    if returncode != 0:
        assert report.gpus == ()
    for gpu in report.gpus:
        gpu.describe()  # every GPU can be said


test_any_bytes_and_exit_code_read_without_an_exception, test_many_more_bytes_and_exit_codes_read_without_one = (
    fast_and_slow(check_bytes_and_exit_code, *ANSWERS, fast=150, slow=400)
)


def check_three_replies(main: Reply, names: Reply | None, uuids: Reply | None) -> None:
    report = read_answer(COMMAND, main, names, uuids)
    assert report.answered or report.error
    assert "; ".join(g.describe() for g in report.gpus) is not None


test_any_three_replies_read_without_an_exception, test_many_more_three_replies_read_without_one = fast_and_slow(
    check_three_replies, *THREE_REPLIES, fast=100, slow=300
)


def check_name_and_capability_bytes(rows: list[tuple[bytes, bytes]]) -> None:
    """A line with an index and a name is a GPU, whatever the bytes of its name and capability."""
    lines = [b"%d, N%s, %s" % (i, name, cap) for i, (name, cap) in enumerate(rows)]
    one_line = [line for line in lines if len(line.decode("utf-8", "replace").splitlines()) == 1]
    report = run(0, b"\n".join(one_line))
    assert {g.index for g in report.gpus} == {int(line.split(b",")[0]) for line in one_line}
    assert report.unread == ()


test_any_name_and_capability_bytes_keep_the_gpu, test_many_more_name_and_capability_bytes_keep_the_gpu = fast_and_slow(
    check_name_and_capability_bytes, ROWS, fast=70, slow=200
)


def test_answer_says_the_exit_status_when_nothing_was_printed() -> None:
    assert answer(0, b"", b"") == Reply(0, "", "exit 0")
    assert answer(1, b" \n", b"") == Reply(1, " \n", "exit 1")
    assert answer(-15, b"", b"") == Reply(-15, "", "killed by signal 15")


def test_answer_cuts_the_why_after_200_characters() -> None:
    assert answer(3, b"", b"a" * 200).why == "a" * 200
    assert answer(3, b"", b"b" * 201).why == "b" * 199 + "…"
    assert answer(3, b"last of stdout\n", b"first\n").why == "last of stdout"


@pytest.mark.parametrize(
    "main",
    [
        Reply(6, "No devices were found\n", "exit 6"),  # said on stdout only
        Reply(6, "", "No devices were found"),  # said in the last line only
    ],
)
def test_no_devices_anywhere_is_an_answer_of_no_gpu(main: Reply) -> None:
    assert read_answer(COMMAND, main) == GpuReport((), COMMAND)


def test_a_timeout_is_the_error_itself() -> None:
    main = Reply(None, "", "nvidia-smi did not answer within 1 s")
    assert read_answer(COMMAND, main) == GpuReport((), COMMAND, "nvidia-smi did not answer within 1 s")


def test_the_names_query_stands_in_only_for_a_failed_main_query() -> None:
    names = Reply(0, "0, Old GPU\n", "0, Old GPU")
    old = Gpu(0, "Old GPU", None, raw_capability="no compute_cap field")
    assert read_answer(COMMAND, Reply(1, "", "compute_cap"), names) == GpuReport((old,), NAMES_COMMAND)
    main = Reply(0, "0, New GPU, 12.0\n", "0, New GPU, 12.0")
    assert read_answer(COMMAND, main, names) == GpuReport((Gpu(0, "New GPU", (12, 0)),), COMMAND)


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
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


@pytest.mark.offline
def test_fake_nvidia_smi_with_na_capability_and_uuids(on_path: Path) -> None:
    fake_nvidia_smi(on_path, two_rtx("[N/A]"))
    report = from_nvidia_smi()
    assert report.answered and report.source == COMMAND
    assert [(g.index, g.capability, g.uuid) for g in report.gpus] == [(i, None, uuid_of(FakeGpu(), i)) for i in (0, 1)]


@pytest.mark.offline
def test_a_driver_without_the_compute_cap_field_is_asked_for_names(on_path: Path) -> None:
    fake_nvidia_smi(
        on_path, two_rtx(), main=b"", main_rc=2, main_err=b'Field "compute_cap" is not a valid field to query.'
    )
    report = from_nvidia_smi()
    assert report.answered and report.source == "nvidia-smi --query-gpu=index,name --format=csv,noheader"
    assert [(g.name, g.capability, g.raw_capability) for g in report.gpus] == [
        (RTX_PRO_6000, None, "no compute_cap field")
    ] * 2


@pytest.mark.offline
def test_without_uuids_the_gpus_still_stand(on_path: Path) -> None:
    fake_nvidia_smi(on_path, two_rtx(), uuid_rc=9)
    report = from_nvidia_smi()
    assert [g.uuid for g in report.gpus] == [None, None] and all(g.sm12x for g in report.gpus)


@pytest.mark.offline
def test_non_utf8_bytes_from_the_process(on_path: Path) -> None:
    fake_nvidia_smi(on_path, [], main=b"\xff\xfe0, \x80GPU\xff, 12.0\n1, N\xe9, [N/A]\xff\n", main_err=b"\xe9\xe8")
    report = from_nvidia_smi()
    assert [g.index for g in report.gpus] == [1] and report.gpus[0].name == "N\ufffd"
    assert report.unread == ("\ufffd\ufffd0, \ufffdGPU\ufffd, 12.0",)


@pytest.mark.waits
@pytest.mark.offline
def test_a_hanging_nvidia_smi_costs_the_limit_and_says_so(on_path: Path) -> None:
    script = on_path / "nvidia-smi"
    script.write_text("#!/bin/sh\nexec sleep 30\n")
    script.chmod(0o755)
    report = from_nvidia_smi(timeout=0.5)
    assert report.error == "nvidia-smi did not answer within 0.5 s"


def test_not_on_path(on_path: Path) -> None:
    assert from_nvidia_smi() == GpuReport((), COMMAND, "nvidia-smi is not on PATH")


# --- _run: one query, bounded, never raising ---------------------------------------------------


@pytest.mark.offline
def test_run_a_missing_executable(tmp_path: Path) -> None:
    reply = gpus._run(str(tmp_path / "nvidia-smi"), gpus.QUERY, 1.0)
    assert reply == Reply(None, "", "could not run nvidia-smi: No such file or directory")


@pytest.mark.offline
def test_run_a_path_with_a_nul_byte() -> None:
    assert gpus._run("/usr/bin/nvidia\0smi", gpus.QUERY, 1.0) == Reply(
        None, "", "could not run nvidia-smi: embedded null byte"
    )


@pytest.mark.waits
@pytest.mark.offline
def test_run_a_query_past_its_limit(on_path: Path) -> None:
    exe = fake_nvidia_smi(on_path, two_rtx(), sleeps={"main": 30})
    started = time.monotonic()
    assert gpus._run(str(exe), gpus.QUERY, 0.5) == Reply(None, "", "nvidia-smi did not answer within 0.5 s")
    assert time.monotonic() - started < 10


@pytest.mark.offline
def test_run_gives_nvidia_smi_no_stdin(on_path: Path) -> None:
    """doctor's own stdin (a terminal, a pipe) never reaches nvidia-smi: it reads /dev/null."""
    exe = fake_nvidia_smi(on_path, [FakeGpu()], reads_stdin=True)
    read_end, write_end = os.pipe()
    os.write(write_end, b"typed at the terminal\n")
    os.close(write_end)
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        reply = gpus._run(str(exe), gpus.QUERY, 5.0)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read_end)
    assert reply.stdout == f"0, {RTX_PRO_6000}, 12.0\n"


# --- which queries from_nvidia_smi asks, and how long it waits ------------------------------------


@pytest.mark.offline
def test_a_failure_not_about_compute_cap_asks_nothing_more(on_path: Path) -> None:
    fake_nvidia_smi(on_path, two_rtx(), main=b"", main_rc=9, main_err=b"Driver/library version mismatch")
    report = from_nvidia_smi()
    assert report == GpuReport((), COMMAND, "nvidia-smi failed: Driver/library version mismatch")
    assert nvidia_smi_calls(on_path) == ["main"]


@pytest.mark.offline
def test_an_empty_answer_asks_no_uuids(on_path: Path) -> None:
    fake_nvidia_smi(on_path, [])
    assert from_nvidia_smi() == GpuReport((), COMMAND)
    assert nvidia_smi_calls(on_path) == ["main"]


@pytest.mark.parametrize("main_rc", [1, 2])
@pytest.mark.offline
def test_a_names_only_answer_gets_its_uuids(on_path: Path, main_rc: int) -> None:
    fake_nvidia_smi(on_path, two_rtx(), main=b"", main_rc=main_rc, main_err=NO_COMPUTE_CAP)
    report = from_nvidia_smi(timeout=5.0)
    assert nvidia_smi_calls(on_path) == ["main", "names", "uuid"]
    old = "no compute_cap field"
    assert report == GpuReport(
        tuple(Gpu(i, RTX_PRO_6000, None, uuid_of(FakeGpu(), i), old) for i in (0, 1)), NAMES_COMMAND
    )


@pytest.mark.offline
def test_with_a_second_left_the_uuids_are_asked(on_path: Path) -> None:
    fake_nvidia_smi(on_path, two_rtx())
    report = from_nvidia_smi(timeout=1.0)
    assert nvidia_smi_calls(on_path) == ["main", "uuid"]
    assert [g.uuid for g in report.gpus] == [uuid_of(FakeGpu(), i) for i in (0, 1)]


@pytest.mark.waits
@pytest.mark.offline
def test_with_little_time_left_the_uuids_are_not_asked(on_path: Path) -> None:
    fake_nvidia_smi(on_path, two_rtx(), sleeps={"main": 0.85})
    report = from_nvidia_smi(timeout=1.2)  # under 0.35 s left after the main query
    assert nvidia_smi_calls(on_path) == ["main"]
    assert report == GpuReport((Gpu(0, RTX_PRO_6000, (12, 0)), Gpu(1, RTX_PRO_6000, (12, 0))), COMMAND)


@pytest.mark.waits
@pytest.mark.offline
def test_the_names_query_gets_only_the_time_left(on_path: Path) -> None:
    fake_nvidia_smi(
        on_path, two_rtx(), main=b"", main_rc=2, main_err=NO_COMPUTE_CAP, sleeps={"main": 0.85, "names": 0.7}
    )
    report = from_nvidia_smi(timeout=1.2)  # under 0.35 s left for the names query, which takes 0.7 s
    assert nvidia_smi_calls(on_path) == ["main", "names"]
    assert report == GpuReport((), COMMAND, f"nvidia-smi failed: {NO_COMPUTE_CAP.decode()}")


@pytest.mark.waits
@pytest.mark.offline
def test_a_hanging_names_query_is_bounded_by_the_overall_timeout(on_path: Path) -> None:
    fake_nvidia_smi(on_path, two_rtx(), main=b"", main_rc=2, main_err=NO_COMPUTE_CAP, sleeps={"names": 30})
    started = time.monotonic()
    report = from_nvidia_smi(timeout=0.6)
    assert time.monotonic() - started < 10
    assert report == GpuReport((), COMMAND, f"nvidia-smi failed: {NO_COMPUTE_CAP.decode()}")


@pytest.mark.waits
@pytest.mark.offline
def test_a_hanging_uuid_query_is_bounded_by_the_overall_timeout(on_path: Path) -> None:
    fake_nvidia_smi(on_path, two_rtx(), sleeps={"uuid": 30})
    started = time.monotonic()
    report = from_nvidia_smi(timeout=0.6)
    assert time.monotonic() - started < 10
    assert nvidia_smi_calls(on_path) == ["main", "uuid"]
    assert report == GpuReport((Gpu(0, RTX_PRO_6000, (12, 0)), Gpu(1, RTX_PRO_6000, (12, 0))), COMMAND)


def test_gpus_of_one_name_and_capability_are_said_once() -> None:
    """Eight of one card were eight "GPU i: NVIDIA RTX PRO 6000 ... (cc 12.0)" in a paragraph."""
    rtx = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    eight = [Gpu(i, rtx, (12, 0)) for i in range(8)]
    assert describe_all(eight) == f"8× {rtx} (cc 12.0): GPUs 0-7"
    mixed = [*eight[:3], Gpu(3, "NVIDIA H200", (9, 0)), eight[5], Gpu(6, rtx, None, raw_capability="[N/A]")]
    assert describe_all(mixed) == (
        f"4× {rtx} (cc 12.0): GPUs 0-2, 5; GPU 3: NVIDIA H200 (cc 9.0); "
        f"GPU 6: {rtx} (cc unknown: nvidia-smi says [N/A])"
    )
    assert describe_all([]) == ""
