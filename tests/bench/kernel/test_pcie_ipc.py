"""0.5.23's PCIe-IPC allreduce as a third path: when bench measures it, and how it shows."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
from rich.console import Console

from sm120patch.bench.kernel import measure, render
from sm120patch.bench.kernel.measure import PCIE_IPC_FLAG, Timing, combine_unfused, pcie_ipc_pass, with_pcie_ipc
from sm120patch.runner.ranks import RankLog
from tests.bench.kernel.test_render import SGLANG, result


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
    assert base.with_timing(measure.PCIE_IPC, Timing(4.0, 4.5)).fastest == "pcie-ipc"
    assert base.with_timing(measure.FUSED, Timing(30.0, 31.0)).fastest == "unfused"


def test_json_and_text_say_which_path_is_fastest_per_size() -> None:
    shown = result(baseline=SGLANG)
    shown.rows = [shown.rows[0].with_timing(measure.PCIE_IPC, Timing(4.0, 4.5), "PCIe-IPC"), *shown.rows[1:]]
    data = json.loads(json.dumps(render.to_json(shown)))
    first, second = data["rows"][0], data["rows"][1]
    assert (first["pcie_ipc"], first["pcie_ipc_allreduce"], first["fastest"]) == (
        {"median_us": 4.0, "p90_us": 4.5},
        "PCIe-IPC",
        "pcie-ipc",
    )
    assert (second["pcie_ipc"], second["pcie_ipc_allreduce"], second["fastest"]) == (None, None, "fused")
    buffer = io.StringIO()
    render.render(shown, Console(file=buffer, width=80, color_system=None, force_terminal=True))
    text = " ".join(buffer.getvalue().split())
    assert all(len(line.rstrip()) <= 80 for line in buffer.getvalue().splitlines())
    assert (
        f"fastest per token count, of fused / unfused / {PCIE_IPC_FLAG}=1: 1: {PCIE_IPC_FLAG}=1 (fusion off) "
        "(PCIe-IPC 4.0 µs); 128: fusion on (PCIe-IPC not measured); 2048: fusion on (PCIe-IPC not measured)"
    ) in text
    assert measure.PCIE_IPC_FLAG == "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"


def test_a_routed_allreduce_is_read_from_every_rank_and_said() -> None:
    def event(rank_us: float, routed: float | None) -> dict:
        timing = {"median_us": rank_us, "p90_us": rank_us + 1}
        found = {
            "event": "row",
            "tokens": 16,
            "fused": timing,
            "unfused": timing,
            "allreduce": {"median_us": 9.0, "p90_us": 9.5},
            "max_abs_error": {"norm": 0.01, "residual": 0.0},
            "tolerance": {"atol": 0.03, "rtol": 0.03},
            "ok": True,
        }
        if routed is not None:
            found["allreduce_on"] = {"median_us": routed, "p90_us": routed + 0.5}
        return found

    (row,) = measure.combine([RankLog(0, events=[event(5.0, 6.0)]), RankLog(1, events=[event(5.0, 7.0)])])
    assert row.allreduce_on == Timing(7.0, 7.5)
    (alone,) = measure.combine([RankLog(0, events=[event(5.0, 6.0)]), RankLog(1, events=[event(5.0, None)])])
    assert alone.allreduce_on is None  # a rank that did not time it: not known, never half-known
    assert measure.routed_note([row]) == (
        "with fusion on, this release also sends plain allreduces (attention-TP and MoE groups) to FlashInfer's "
        "kAllReduce instead of its own allreduce: 7.0 vs 9.0 µs at 16 tokens"
    )
    assert render.to_json(replace(result(baseline=SGLANG), rows=[row]))["rows"][0]["allreduce_fusion_on"] == {
        "median_us": 7.0,
        "p90_us": 7.5,
    }
