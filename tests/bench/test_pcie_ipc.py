"""0.5.23's PCIe-IPC allreduce as a third path: when bench measures it, and how it shows."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
from rich.console import Console

from sm120patch.bench import measure, render
from sm120patch.bench.launch import RankLog
from sm120patch.bench.measure import PCIE_IPC_FLAG, Timing, combine_unfused, pcie_ipc_pass, with_pcie_ipc
from tests.bench.test_render import SGLANG, result


@pytest.mark.parametrize(
    ("has_option", "done", "env", "runs"),
    [
        (True, {"source": "sglang", "full_nvlink": False}, {}, True),
        (False, {"source": "sglang", "full_nvlink": False}, {}, False),  # no such option before 0.5.23
        (True, {"source": "stand-in", "full_nvlink": False}, {}, False),  # only sglang's code runs it
        (True, {"source": "sglang", "full_nvlink": True}, {}, False),  # sglang keeps its custom allreduce
        (True, {"source": "sglang", "full_nvlink": False}, {PCIE_IPC_FLAG: "1"}, False),  # already the baseline
        (True, {"source": "sglang", "full_nvlink": False}, {PCIE_IPC_FLAG: "0"}, True),
    ],
)
def test_the_second_pass_runs_only_where_a_server_could_choose_it(
    has_option: bool, done: dict, env: dict, runs: bool
) -> None:
    why = pcie_ipc_pass(has_option, done, env)
    if runs:
        assert why == (
            f"this release has {PCIE_IPC_FLAG}=1 and these GPUs have no full NVLink: sglang's unfused path "
            "was measured again with it (column PCIe-IPC)"
        )
    else:
        assert why is None


def row_event(tokens: int, median: float, name: str) -> dict:
    return {
        "event": "row",
        "tokens": tokens,
        "unfused": {"median_us": median, "p90_us": median + 1},
        "allreduce": {"median_us": 1.0, "p90_us": 1.0},
        "allreduce_name": name,
    }


def test_the_second_pass_takes_the_slowest_rank_and_joins_by_token_count() -> None:
    ipc = "FlashInfer PCIe-IPC allreduce (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE)"
    logs = [
        RankLog(0, events=[row_event(1, 6.0, ipc), row_event(2048, 90.0, "NCCL")]),
        RankLog(1, events=[row_event(1, 7.5, ipc), row_event(2048, 80.0, "NCCL")]),
    ]
    second = combine_unfused(logs)
    assert second == {1: (Timing(7.5, 8.5), ipc), 2048: (Timing(90.0, 91.0), "NCCL")}
    rows = with_pcie_ipc(result(baseline=SGLANG).rows, second)
    assert [(r.tokens, r.pcie_ipc, r.pcie_ipc_name) for r in rows] == [
        (1, Timing(7.5, 8.5), ipc),
        (128, None, ""),
        (2048, Timing(90.0, 91.0), "NCCL"),
    ]


def test_the_fastest_of_three_paths() -> None:
    base = result(baseline=SGLANG).rows[0]  # fused 5.2, unfused 24.9
    assert base.fastest == "fused"
    assert replace(base, pcie_ipc=Timing(4.0, 4.5)).fastest == "pcie-ipc"
    assert replace(base, fused=Timing(30.0, 31.0)).fastest == "unfused"


def test_json_and_text_say_which_path_is_fastest_per_size() -> None:
    shown = result(baseline=SGLANG)
    shown.rows = [replace(shown.rows[0], pcie_ipc=Timing(4.0, 4.5), pcie_ipc_name="PCIe-IPC"), *shown.rows[1:]]
    data = json.loads(json.dumps(render.to_json(shown)))
    first, second = data["rows"][0], data["rows"][1]
    assert (first["pcie_ipc"], first["pcie_ipc_allreduce"], first["fastest"]) == (
        {"median_us": 4.0, "p90_us": 4.5},
        "PCIe-IPC",
        "pcie-ipc",
    )
    assert (second["pcie_ipc"], second["pcie_ipc_allreduce"], second["fastest"]) == (None, None, "fused")
    buffer = io.StringIO()
    render.render(shown, Console(file=buffer, width=80, no_color=True))
    text = " ".join(buffer.getvalue().split())
    assert all(len(line.rstrip()) <= 80 for line in buffer.getvalue().splitlines())
    assert (
        f"fastest per token count, of fused / unfused / {PCIE_IPC_FLAG}=1: 1: {PCIE_IPC_FLAG}=1 (fusion off) "
        "(PCIe-IPC 4.0 µs); 128: fusion on (PCIe-IPC not measured); 2048: fusion on (PCIe-IPC not measured)"
    ) in text
    assert measure.PCIE_IPC_FLAG == "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"
