"""The call counts of a run, read from the files the hook wrote (hand-written here: one JSON
file per process, as probes/server_hook.py writes them), and how they are said."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sm120patch.bench.server.counter import ENTRY, FUSION_MODULE, Calls, Counts, Logits, _is_fused, read

KERNEL = "flashinfer.allreduce_fusion"
LEGACY = "flashinfer.trtllm_allreduce_fusion"


def write(directory: Path, name: str, data: Any) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(json.dumps(data))


def test_calls_add_what_is_there_and_zero_for_what_is_not() -> None:
    calls = Calls()
    calls.add({"eager": 2, "capture": 3, "fell_back": 1})
    calls.add({"eager": "4"})  # a count the hook wrote as text still counts; a missing one is 0
    assert (calls.eager, calls.capture, calls.fell_back, calls.total) == (6, 3, 1, 9)
    assert calls.as_json() == {"eager": 6, "capture": 3, "fell_back": 1}
    empty = Calls()
    empty.add({})
    assert empty.as_json() == {"eager": 0, "capture": 0, "fell_back": 0}


@pytest.mark.parametrize(
    ("key", "fused"),
    [
        (KERNEL, True),  # no pattern recorded: the unified API's call is the fused one
        (f"{KERNEL}[pattern=1]", True),
        (f"{LEGACY}[pattern=1]", True),
        (f"{KERNEL}[pattern=2]", False),
        (f"{LEGACY}[pattern=10]", False),
        (f"{KERNEL}[pattern=1X]", False),
        (f"{KERNEL}[pattern=]", False),
        ("flashinfer.allreduce", None),
        (ENTRY, None),
        ("", None),
    ],
)
def test_which_keys_are_the_fused_kernel(key: str, fused: bool | None) -> None:
    assert _is_fused(key) is fused


def test_the_fused_path_ran_by_the_kernel_or_by_an_entry_that_did_not_fall_back() -> None:
    assert not Counts().ran and Counts().calls == 0
    kernel = Counts(fused=Calls(eager=1))
    assert kernel.ran and kernel.calls == 1
    captured = Counts(fused=Calls(capture=1))
    assert captured.ran and captured.calls == 1
    entry = Counts(entry=Calls(eager=3, capture=2, fell_back=4))
    assert entry.ran and entry.calls == 1  # 5 calls, 4 fell back
    all_fell_back = Counts(entry=Calls(eager=3, capture=1, fell_back=4))
    assert not all_fell_back.ran and all_fell_back.calls == 0
    both = Counts(fused=Calls(eager=2, capture=8), entry=Calls(eager=7))
    assert both.calls == 10  # the kernel's count, where it has one


def test_each_way_a_run_is_described() -> None:
    assert Counts().describe() == "the fused kernel was never called"
    assert Counts(entry=Calls(eager=2, capture=4, fell_back=6)).describe() == (
        "sglang's fused entry was called 6x and fell back every time"
    )
    assert Counts(fused=Calls(eager=2, capture=16), ranks_fused=2).describe() == (
        "fused kernel called 18x in 2 processes (2 eager, 16 in graph capture)"
    )
    assert Counts(fused=Calls(eager=1, capture=4), ranks_fused=1).describe() == (
        "fused kernel called 5x in 1 process (1 eager, 4 in graph capture)"
    )
    # the entry returned results but the kernel's launch was not seen: no process named
    assert Counts(entry=Calls(eager=3)).describe() == "fused kernel called 3x (0 eager, 0 in graph capture)"


def test_the_json_of_a_run_names_every_count() -> None:
    counts = Counts(
        processes=3,
        sglang_processes=2,
        fused=Calls(1, 2, 0),
        entry=Calls(3, 4, 5),
        other_kernel=Calls(6, 7, 0),
        ranks_fused=2,
        multicast_guarded=True,
        logits=Logits(40, 2, {"decode": {"head": [1.0]}}, ["boom"], 0),
        allreduce={"PCIe-IPC": Calls(3, 4, 0)},
    )
    assert counts.as_json() == {
        "processes": 3,
        "sglang_processes": 2,
        "fused_kernel": {"eager": 1, "capture": 2, "fell_back": 0},
        "sglang_entry": {"eager": 3, "capture": 4, "fell_back": 5},
        "other_flashinfer_allreduce": {"eager": 6, "capture": 7, "fell_back": 0},
        "ranks_with_fused_calls": 2,
        "ran": True,
        "multicast_guarded": True,
        "logits": {
            "forwards": 40,
            "nonfinite_forwards": 2,
            "first": {"decode": {"head": [1.0]}},
            "rank": 0,
            "errors": ["boom"],
        },
        "allreduce": {"PCIe-IPC": {"eager": 3, "capture": 4, "fell_back": 0}},
    }
    assert Counts().as_json()["ran"] is False and Counts().as_json()["multicast_guarded"] is False


def test_read_sums_the_processes_of_a_run(tmp_path: Path) -> None:
    counts_dir = tmp_path / "counts"
    write(
        counts_dir,
        "100.json",
        {
            "loaded": [FUSION_MODULE, "sglang.srt.server_args"],
            "counts": {
                ENTRY: {"eager": 1, "capture": 4, "fell_back": 0},
                f"{KERNEL}[pattern=1]": {"eager": 1, "capture": 4},
                f"{KERNEL}[pattern=3]": {"eager": 2, "capture": 0},
                "torch.distributed.all_reduce": {"eager": 50},
            },
        },
    )
    write(
        counts_dir,
        "101.json",
        {
            "loaded": [FUSION_MODULE],
            "multicast_guarded": True,
            "counts": {f"{LEGACY}[pattern=1]": {"capture": 4}, ENTRY: {"eager": 2, "fell_back": 2}},
        },
    )
    write(counts_dir, "102.json", {"loaded": None, "counts": None})  # the launcher: hooked, nothing called
    # keys with no call make no fused rank
    write(counts_dir, "103.json", {"loaded": [FUSION_MODULE], "counts": {KERNEL: {"eager": 0}, LEGACY: {"capture": 0}}})
    # files that are not the hook's, sorted first: each is passed over, the rest still read
    write(counts_dir, "0-list.json", [1, 2])
    (counts_dir / "0-half.json").write_text("{half")
    (counts_dir / "0-dir.json").mkdir()  # cannot be read
    write(counts_dir, "107.txt", {"counts": {KERNEL: {"eager": 9}}})  # not a .json file
    counts = read(counts_dir)
    assert counts.processes == 4
    assert counts.sglang_processes == 3
    assert counts.multicast_guarded is True
    assert counts.fused.as_json() == {"eager": 1, "capture": 8, "fell_back": 0}
    assert counts.entry.as_json() == {"eager": 3, "capture": 4, "fell_back": 2}
    assert counts.other_kernel.as_json() == {"eager": 2, "capture": 0, "fell_back": 0}
    assert counts.ranks_fused == 2


def test_read_of_an_empty_or_missing_directory_is_no_process(tmp_path: Path) -> None:
    assert read(tmp_path) == Counts()
    assert read(tmp_path / "missing") == Counts()
    write(tmp_path, "1.json", {"multicast_guarded": False})
    assert read(tmp_path) == Counts(processes=1)


def test_a_process_is_a_fused_rank_by_the_sum_of_its_fused_calls(tmp_path: Path) -> None:
    write(tmp_path, "1.json", {"counts": {KERNEL: {"eager": 1}}})  # one eager call is enough
    write(tmp_path, "2.json", {"counts": {KERNEL: {"capture": 1}}})  # so is one in capture
    write(tmp_path, "3.json", {"counts": {LEGACY: {"eager": 2}, KERNEL: {"eager": 0, "capture": 0}}})  # a later 0
    write(tmp_path, "4.json", {"counts": {KERNEL: {"eager": 0}}})
    counts = read(tmp_path)
    assert (counts.processes, counts.ranks_fused) == (4, 3)
    assert counts.fused.as_json() == {"eager": 3, "capture": 1, "fell_back": 0}
    assert counts.describe() == "fused kernel called 4x in 3 processes (3 eager, 1 in graph capture)"


def test_read_keeps_only_the_whole_number_limits_the_hook_set(tmp_path: Path) -> None:
    """The limits a run's processes set (``token_limit``, one entry per gate module); an entry
    that is not the hook's shape is passed over rather than read as a limit or a crash."""
    write(tmp_path, "1.json", {"token_limit": [{"module": "gate", "was": 2048, "now": 256}]})
    write(
        tmp_path,
        "2.json",
        {"token_limit": [512, ["now", 128], {"now": None}, {"now": "64"}, {"now": 32.0}, {"now": True}, {}]},
    )
    write(tmp_path, "3.json", {"token_limit": None})
    counts = read(tmp_path)
    assert (counts.processes, counts.token_limits) == (3, {256})
    assert counts.as_json()["token_limits"] == [256]
