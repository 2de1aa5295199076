"""What bench shows: the JSON object, the table on an 80-column terminal, the plot file."""

from __future__ import annotations

import io
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from sm120patch.bench.kernel import measure, render
from sm120patch.bench.kernel.estimate import Model
from sm120patch.bench.kernel.measure import Baseline, BaselineSource, BenchResult, Settings, Timing
from sm120patch.bench.kernel.verdict import judge
from sm120patch.sglang.fusion_call import read_call
from tests.bench.kernel.rows import measured_row

CA = "sglang custom allreduce (CustomAllreduce)"
NCCL = "NCCL (PyNccl under CUDA graphs, torch.distributed eager)"
TORCH_NORM = "torch (add + RMSNorm as separate ops)"
STANDIN = Baseline(
    BaselineSource.STAND_IN,
    ("torch.distributed all_reduce (nccl)",),
    TORCH_NORM,
    "FlashInfer allreduce_fusion",
    ("no sglang",),
)
SGLANG = Baseline(
    BaselineSource.SGLANG, (CA, NCCL), "sglang 0.5.13 RMSNorm.forward", "sglang's flashinfer_allreduce_residual_rmsnorm"
)


def result(ok: bool = True, baseline: Baseline = STANDIN, model: Model | None = None) -> BenchResult:
    settings = Settings(sys.executable, 2, (1, 128, 2048), 7168, "bf16", 300.0)
    names = [(baseline.allreduce[0], ""), (baseline.allreduce[0], ""), (baseline.allreduce[-1], "")]
    if baseline is SGLANG:
        names[-1] = (NCCL, "29360128 bytes is over custom allreduce's limit of 8388608")
    # The 2x H200 figures of the first run (research notes), as rows.
    rows = [
        measured_row(
            1,
            Timing(5.2, 5.6),
            Timing(24.9, 26.0),
            Timing(8.2, 8.9),
            {"norm": 0.01, "residual": 0.0},
            {},
            True,
            *names[0],
        ),
        measured_row(
            128,
            Timing(10.4, 11.0),
            Timing(64.9, 66.0),
            Timing(27.4, 28.0),
            {"norm": 0.016, "residual": 0.0},
            {},
            ok,
            *names[1],
        ),
        measured_row(
            2048,
            Timing(137.1, 140.0),
            Timing(369.4, 371.0),
            Timing(120.4, 122.0),
            {"norm": 0.0, "residual": 0.0},
            {},
            True,
            *names[2],
        ),
    ]
    probe = {"gpus": [{"index": i, "name": "NVIDIA H200", "capability": [9, 0]} for i in range(4)]}
    return BenchResult(
        settings,
        2,
        read_call(None, None),
        probe,
        rows,
        baseline,
        {"torch": "2.11.0+cu130", "flashinfer": "0.6.18", "nccl": "2.27.7", "driver": "13.0", "torch_cuda": "13.0"},
        judge([r.point for r in rows], 2, indicative=baseline.why if baseline.indicative else ()),
        model=model,
    )


def crossing(baseline: Baseline = STANDIN, model: Model | None = None) -> BenchResult:
    """``result`` where the unfused side at 2048 tokens costs what the allreduce alone did
    (120.4 µs against fused 137.1): fusion wins at 1 and 128 tokens, not at 2048."""
    found = result(baseline=baseline, model=model)
    rows = [*found.rows[:2], found.rows[2].with_timing(measure.UNFUSED, Timing(120.4, 122.0))]
    why = baseline.why if baseline.indicative else ()
    return replace(found, rows=rows, verdict=judge([r.point for r in rows], 2, indicative=why))


def test_json_holds_rows_baseline_gpus_versions_and_verdict() -> None:
    data = json.loads(json.dumps(render.to_json(result())))  # plain JSON types only
    assert data["command"] == "bench" and data["exit_code"] == 0 and data["ok"] is True and data["tp"] == 2
    assert [r["tokens"] for r in data["rows"]] == [1, 128, 2048]
    first = data["rows"][0]
    assert first["fused"] == {"median_us": 5.2, "p90_us": 5.6}
    assert first["fused_vs_unfused_pct"] == round((5.2 - 24.9) / 24.9 * 100, 2)
    assert first["compare"] == "faster"
    assert len(data["gpus"]) == 2  # the GPUs measured, not every GPU seen
    assert data["call"]["backend"] == "trtllm" and data["call"]["launch_with_pdl"] is True
    assert data["baseline"] == {
        "source": "stand-in",
        "allreduce": ["torch.distributed all_reduce (nccl)"],
        "norm": TORCH_NORM,
        "fused": "FlashInfer allreduce_fusion",
        "indicative": True,
        "why": ["no sglang"],
    }
    assert data["versions"]["flashinfer"] == "0.6.18"
    assert data["verdict"]["kind"] == "pays" and data["verdict"]["crossover_tokens"] is None
    assert data["verdict"]["indicative"] is True
    assert data["verdict"]["advice"].startswith("indicative only (no sglang): fusion pays here at TP 2")
    assert data["estimate"] is None


def test_sglangs_own_baseline_is_named_per_size_and_not_indicative() -> None:
    data = render.to_json(result(baseline=SGLANG))
    assert data["baseline"]["source"] == "sglang" and data["baseline"]["indicative"] is False
    assert [(r["allreduce_name"], r["allreduce_why"]) for r in data["rows"]] == [
        (CA, ""),
        (CA, ""),
        (NCCL, "29360128 bytes is over custom allreduce's limit of 8388608"),
    ]
    assert data["verdict"]["advice"].startswith("fusion pays here")
    assert render.allreduce_spans(result(baseline=SGLANG).rows) == (
        f"{CA} at 1-128 tokens; {NCCL} at 2048 tokens (29360128 bytes is over custom allreduce's limit of 8388608)"
    )


def test_the_estimate_multiplies_by_two_sites_a_layer() -> None:
    model = Model(61, 7168, True, "config.json (DeepseekV3ForCausalLM)")
    data = render.to_json(result(baseline=SGLANG, model=model))
    estimate = data["estimate"]
    assert estimate["sites_per_step"] == 122
    first = estimate["steps"][0]
    assert first == {
        "tokens": 1,
        "fused_applies": True,
        "off_us": round(122 * 24.9, 1),
        "on_us": round(122 * 5.2, 1),
        "saved_us": round(122 * (24.9 - 5.2), 1),
        "saved_pct": round((24.9 - 5.2) / 24.9 * 100, 2),
    }
    assert estimate["summary"].endswith("saves up to 28,341 µs a step (63 %, 2048 tokens)")


def test_a_wrong_row_makes_exit_1_and_the_verdict_wrong() -> None:
    wrong = result(ok=False)
    wrong.verdict = judge([r.point for r in wrong.rows], 2)
    data = render.to_json(wrong)
    assert data["exit_code"] == 1 and data["ok"] is False and data["verdict"]["kind"] == "wrong"
    assert [r["ok"] for r in data["rows"]] == [True, False, True]


def test_the_table_fits_80_columns() -> None:
    buffer = io.StringIO()
    render.render(result(), Console(file=buffer, width=80, color_system=None, force_terminal=True))
    lines = buffer.getvalue().splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines)
    table = [line for line in lines if line.startswith("│")]
    assert [cell.strip() for cell in table[1].strip("│").split("│")] == [
        "128",
        "10.4/11.0",
        "64.9/66.0",
        "27.4/28.0",
        "-84.0 %",
        "0.016",
    ]
    assert "…" not in buffer.getvalue()
    assert " ".join(buffer.getvalue().split()).endswith(
        "indicative only (no sglang): fusion pays here at TP 2: 63 % to 84 % faster at 1 to 2048 tokens: leave it on"
    )


def test_the_estimate_table_fits_80_columns_and_says_the_sites() -> None:
    buffer = io.StringIO()
    model = Model(78, 7168, True, "config.json")
    render.render(
        result(baseline=SGLANG, model=model), Console(file=buffer, width=80, color_system=None, force_terminal=True)
    )
    text = buffer.getvalue()
    assert all(len(line.rstrip()) <= 80 for line in text.splitlines())
    assert "per step, 156 sites" in text
    assert f"unfused (sglang's own code): {CA} at 1-128 tokens" in " ".join(text.split())


def test_the_plot_is_a_png(tmp_path: Path) -> None:
    target = tmp_path / "bench.png"
    render.plot(result(), target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_combine_takes_the_slowest_rank_and_the_largest_error() -> None:
    from sm120patch.runner.ranks import RankLog

    def row(fused: float, error: float, ok: bool) -> dict:
        timing = {"median_us": fused, "p90_us": fused + 1}
        return {
            "event": "row",
            "tokens": 8,
            "fused": timing,
            "unfused": timing,
            "allreduce": timing,
            "max_abs_error": {"norm": error, "residual": 0.0},
            "tolerance": {"atol": 0.03, "rtol": 0.03},
            "ok": ok,
        }

    logs = [RankLog(0, events=[row(5.0, 0.5, False)]), RankLog(1, events=[row(7.0, 0.1, True)])]
    (combined,) = measure.combine(logs)
    assert combined.fused == Timing(7.0, 8.0)
    assert combined.max_abs_error == {"norm": 0.5, "residual": 0.0}
    assert combined.ok is False


def test_a_baseline_that_is_not_sglangs_kernel_is_said_with_the_allreduce_alone() -> None:
    data = render.to_json(result())
    assert data["baseline"]["source"] == "stand-in"
    assert data["rows"][0]["fused_vs_allreduce_pct"] == round((5.2 - 8.2) / 8.2 * 100, 2)
    note = measure.floor_note(result().rows, "torch (add + RMSNorm as separate ops)")
    assert note == (
        "unfused ran torch (add + RMSNorm as separate ops), not sglang's sgl_kernel.fused_add_rmsnorm (not importable "
        "in this interpreter), so fused vs unfused overstates the gain; against this allreduce alone (not sglang's "
        "custom allreduce, which can be faster), fused is -37 % at 1 and +14 % at 2048 tokens"
    )


def small_result() -> BenchResult:
    """Two rows, the second wrong, on the first two of four GPUs, with a model for the estimate."""
    from sm120patch.bench.kernel.verdict import Kind, Verdict
    from sm120patch.sglang.fusion_call import SglangCall

    rows = [
        measured_row(
            1, Timing(5.0, 6.0), Timing(15.03, 22.0), Timing(4.0, 4.5), {"norm": 0.01}, {"atol": 0.03}, True, "custom"
        ),
        measured_row(
            4096,
            Timing(300.0, 310.0),
            Timing(200.0, 210.0),
            Timing(150.0, 155.0),
            {"norm": 0.5, "residual": 0.25},
            {"atol": 0.03},
            False,
            "NCCL",
            "over 8 MiB",
        ),
    ]
    return BenchResult(
        Settings("/env/bin/python", 2, (1, 4096), 1024, "fp16", 60.0, calls=5, replays=30),
        2,
        SglangCall({"max_token_num": 2048, "use_oneshot": True}, "sglang 0.5.9 (f.py:1, f)", ("use_oneshot",)),
        {"gpus": [{"index": i, "name": "G", "capability": [12, 0]} for i in range(4)]},
        rows,
        Baseline(BaselineSource.STAND_IN, ("custom", "NCCL"), "torch", "fi", ("no sglang",)),
        {"torch": "2.11"},
        Verdict(Kind.MIXED, "advice", 4096, ("why",)),
        ["a note"],
        Model(2, 64, None, "flags"),
    )


def test_the_whole_json_of_a_result() -> None:
    from sm120patch import __version__

    timing = {"median_us": 5.0, "p90_us": 6.0}
    assert render.to_json(small_result()) == {
        "schema": "sm120patch-bench/2",
        "tool_version": __version__,
        "command": "bench",
        "exit_code": 1,
        "ok": False,
        "tp": 2,
        "hidden": 1024,
        "dtype": "fp16",
        "tokens": [1, 4096],
        "timing": {
            "method": "eager warm-up, CUDA graph of calls, timed replays with CUDA events",
            "calls_per_graph": 5,
            "replays": 30,
            "statistic": "median and p90 per call; the slowest rank's",
        },
        "python": "/env/bin/python",
        "call": {
            "mirrors": "sglang 0.5.9 (f.py:1, f)",
            "defaulted": ["use_oneshot"],
            "backend": "trtllm",
            "max_token_num": 2048,
            "use_oneshot": True,
        },
        "baseline": {
            "source": "stand-in",
            "allreduce": ["custom", "NCCL"],
            "norm": "torch",
            "fused": "fi",
            "indicative": True,
            "why": ["no sglang"],
        },
        "gpus": [{"index": 0, "name": "G", "capability": [12, 0]}, {"index": 1, "name": "G", "capability": [12, 0]}],
        "versions": {"torch": "2.11"},
        "variants": {
            v.name: {"measures": v.measures, "launchable": v.launchable, "since": v.since, "always": v.always}
            for v in measure.VARIANTS
        },
        "rows": [
            {
                "tokens": 1,
                "fused": timing,
                "unfused": {"median_us": 15.03, "p90_us": 22.0},
                "allreduce": {"median_us": 4.0, "p90_us": 4.5},
                "fused_vs_unfused_pct": -66.73,
                "fused_vs_allreduce_pct": 25.0,
                "compare": "faster",
                "allreduce_name": "custom",
                "allreduce_why": "",
                "allreduce_fusion_on": None,
                "pcie_ipc": None,
                "pcie_ipc_allreduce": None,
                "fastest": "fused",
                "max_abs_error": {"norm": 0.01},
                "tolerance": {"atol": 0.03},
                "ok": True,
                "variants": {
                    "fused": {**timing, "allreduce": None, "allreduce_why": None},
                    "unfused": {"median_us": 15.03, "p90_us": 22.0, "allreduce": "custom", "allreduce_why": None},
                    "allreduce": {"median_us": 4.0, "p90_us": 4.5, "allreduce": None, "allreduce_why": None},
                },
            },
            {
                "tokens": 4096,
                "fused": {"median_us": 300.0, "p90_us": 310.0},
                "unfused": {"median_us": 200.0, "p90_us": 210.0},
                "allreduce": {"median_us": 150.0, "p90_us": 155.0},
                "fused_vs_unfused_pct": 50.0,
                "fused_vs_allreduce_pct": 100.0,
                "compare": "slower",
                "allreduce_name": "NCCL",
                "allreduce_why": "over 8 MiB",
                "allreduce_fusion_on": None,
                "pcie_ipc": None,
                "pcie_ipc_allreduce": None,
                "fastest": "unfused",
                "max_abs_error": {"norm": 0.5, "residual": 0.25},
                "tolerance": {"atol": 0.03},
                "ok": False,
                "variants": {
                    "fused": {"median_us": 300.0, "p90_us": 310.0, "allreduce": None, "allreduce_why": None},
                    "unfused": {
                        "median_us": 200.0,
                        "p90_us": 210.0,
                        "allreduce": "NCCL",
                        "allreduce_why": "over 8 MiB",
                    },
                    "allreduce": {"median_us": 150.0, "p90_us": 155.0, "allreduce": None, "allreduce_why": None},
                },
            },
        ],
        "verdict": {
            "kind": "mixed",
            "advice": "indicative only (why): advice",
            "indicative": True,
            "crossover_tokens": 4096,
        },
        "estimate": {
            "model": {"layers": 2, "hidden": 64, "moe": None, "source": "flags"},
            "sites_per_step": 4,
            "fusion_max_tokens": 2048,
            "steps": [
                {
                    "tokens": 1,
                    "fused_applies": True,
                    "off_us": 60.1,
                    "on_us": 20.0,
                    "saved_us": 40.1,
                    "saved_pct": 66.73,
                },
                {
                    "tokens": 4096,
                    "fused_applies": False,
                    "off_us": 800.0,
                    "on_us": 800.0,
                    "saved_us": 0.0,
                    "saved_pct": 0.0,
                },
            ],
            "summary": "2 layers (a model, hidden 64): 4 allreduce + add + RMSNorm sites a step; fusion on runs them "
            "as 4 fused kernels instead of 4 allreduces and 4 norm kernels, up to 2048 tokens a batch (unfused "
            "above); saves up to 40 µs a step (67 %, 1 token)",
        },
        "notes": ["a note"],
        "crossover": {
            "reach": "never",
            "tokens": None,
            "limit": None,
            "margin_pct": None,
            "next_tokens": None,
            "next_pct": None,
            "against": "the stand-in unfused path",
            "noise_pct": 3.0,
            "wrong": True,
            "indicative": True,
            "text": "indicative only (no sglang): crossover: none: a fused result was wrong, so fusion wins nowhere; "
            "keep fusion off",
        },
    }


def test_the_whole_text_of_a_result() -> None:
    buffer = io.StringIO()
    render.render(small_result(), Console(file=buffer, width=200, no_color=True))
    assert [line.rstrip() for line in buffer.getvalue().splitlines()] == [
        "allreduce + RMSNorm, TP 2, hidden 1024, fp16: µs per call,",
        "median/p90 of the slowest rank",
        "┏━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━┓",
        "┃ tokens ┃   fused ┃   unfused ┃ AR alone ┃ vs unfused ┃   max err ┃",
        "┡━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━┩",
        "│      1 │ 5.0/6.0 │ 15.0/22.0 │  4.0/4.5 │    -66.7 % │      0.01 │",
        "│   4096 │ 300/310 │   200/210 │  150/155 │    +50.0 % │ 0.5 WRONG │",
        "└────────┴─────────┴───────────┴──────────┴────────────┴───────────┘",
        "GPUs: 2× G (cc 12.0)",
        "fused: fi; FlashInfer None trtllm, arguments of sglang 0.5.9 (f.py:1, f)",
        "unfused (stand-ins (sglang's code did not run here)): custom at 1 token; NCCL at 4096 tokens (over 8 MiB); "
        "then torch",
        "torch 2.11 (CUDA None), NCCL None, driver None",
        "a note",
        "per step, 4 sites: allreduce + norm µs,",
        "fusion off / on",
        "┏━━━━━━━━┳━━━━━━┳━━━━━━┳━━━━━━━━┳━━━━━━━┓",
        "┃ tokens ┃  off ┃   on ┃  saved ┃       ┃",
        "┡━━━━━━━━╇━━━━━━╇━━━━━━╇━━━━━━━━╇━━━━━━━┩",
        "│      1 │ 60.1 │ 20.0 │ +40 µs │ +67 % │",
        "│   4096 │  800 │  800 │  +0 µs │  +0 % │",
        "└────────┴──────┴──────┴────────┴───────┘",
        "2 layers (a model, hidden 64): 4 allreduce + add + RMSNorm sites a step; fusion on runs them as 4 fused "
        "kernels instead of 4 allreduces and 4 norm kernels, up to 2048 tokens a batch (unfused above); "
        "saves up to 40 µs a step (67 %, 1 token)",  # piped: one line, however long
        "indicative only (no sglang): crossover: none: a fused result was wrong, so fusion wins nowhere; keep "
        "fusion off",
        "indicative only (why): advice",
    ]


def coloured(result: BenchResult) -> list[str]:
    buffer = io.StringIO()
    console = Console(file=buffer, width=200, force_terminal=True, color_system="standard", no_color=False)
    render.render(result, console)
    return buffer.getvalue().splitlines()


def test_the_colours_say_faster_slower_wrong_and_the_verdict() -> None:
    lines = coloured(small_result())
    dim, end = "\x1b[2m", "\x1b[0m"
    assert lines[:3] + lines[4:16] + lines[17:] == [
        "\x1b[3mallreduce + RMSNorm, TP 2, hidden 1024, fp16: µs per call,          \x1b[0m",
        "\x1b[3mmedian/p90 of the slowest rank                                      \x1b[0m",
        "┏━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━┓",
        "┡━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━┩",
        "│      1 │ 5.0/6.0 │ 15.0/22.0 │  4.0/4.5 │ \x1b[32m   -66.7 %\x1b[0m │      0.01 │",
        "│   4096 │ 300/310 │   200/210 │  150/155 │ \x1b[31m   +50.0 %\x1b[0m │ \x1b[1;31m0.5 WRONG\x1b[0m │",
        "└────────┴─────────┴───────────┴──────────┴────────────┴───────────┘",
        f"{dim}GPUs: 2× G (cc 12.0){end}",
        f"{dim}fused: fi; FlashInfer None trtllm, arguments of sglang 0.5.9 (f.py:1, f){end}",
        f"{dim}unfused (stand-ins (sglang's code did not run here)): custom at 1 token; NCCL at 4096 tokens "
        f"(over 8 MiB); then torch{end}",
        f"{dim}torch 2.11 (CUDA None), NCCL None, driver None{end}",
        f"{dim}a note{end}",
        "\x1b[3mper step, 4 sites: allreduce + norm µs,  \x1b[0m",
        "\x1b[3mfusion off / on                          \x1b[0m",
        "┏━━━━━━━━┳━━━━━━┳━━━━━━┳━━━━━━━━┳━━━━━━━┓",
        "┡━━━━━━━━╇━━━━━━╇━━━━━━╇━━━━━━━━╇━━━━━━━┩",
        "│      1 │ 60.1 │ 20.0 │ \x1b[32m+40 µs\x1b[0m │ \x1b[32m+67 %\x1b[0m │",
        "│   4096 │  800 │  800 │ \x1b[2m +0 µs\x1b[0m │ \x1b[2m +0 %\x1b[0m │",
        "└────────┴──────┴──────┴────────┴───────┘",
        f"{dim}2 layers (a model, hidden 64): 4 allreduce + add + RMSNorm sites a step; fusion on runs them as 4 "
        "fused kernels instead of 4 allreduces and 4 norm kernels, up to 2048 tokens a batch (unfused above);"
        f"{end}",
        f"{dim}saves up to 40 µs a step (67 %, 1 token){end}",
        "indicative only (no sglang): crossover: none: a fused result was wrong, so fusion wins nowhere; keep "
        "fusion off",
        "\x1b[1;33mindicative only (why): advice\x1b[0m",
    ]
    assert len(lines) == 25


def test_the_estimate_colours_a_step_from_3_percent_saved_or_lost() -> None:
    result = small_result()
    result.model = Model(2, 64, True, "config.json")  # 4 sites
    result.rows = [
        measured_row(1, Timing(24.25, 1.0), Timing(25.0, 1.0), Timing(1.0, 1.0), {"norm": 0.0}, {}, True),  # saves 3 %
        measured_row(2, Timing(25.75, 1.0), Timing(25.0, 1.0), Timing(1.0, 1.0), {"norm": 0.0}, {}, True),  # loses 3 %
        measured_row(4, Timing(24.3, 1.0), Timing(25.0, 1.0), Timing(1.0, 1.0), {"norm": 0.0}, {}, True),  # 2.8 %
        measured_row(8, Timing(25.7, 1.0), Timing(25.0, 1.0), Timing(1.0, 1.0), {"norm": 0.0}, {}, True),  # -2.8 %
    ]
    steps = [line for line in coloured(result) if "µs" in line and line.startswith("│")]
    assert steps == [
        "│      1 │ 100 │ 97.0 │ \x1b[32m+3 µs\x1b[0m │ \x1b[32m+3 %\x1b[0m │",
        "│      2 │ 100 │  103 │ \x1b[31m-3 µs\x1b[0m │ \x1b[31m-3 %\x1b[0m │",
        "│      4 │ 100 │ 97.2 │ \x1b[2m+3 µs\x1b[0m │ \x1b[2m+3 %\x1b[0m │",
        "│      8 │ 100 │  103 │ \x1b[2m-3 µs\x1b[0m │ \x1b[2m-3 %\x1b[0m │",
    ]


def test_microseconds_keep_a_decimal_below_100() -> None:
    assert [render._us(v) for v in (99.94, 100.0, 100.5, 1234.5)] == ["99.9", "100", "100", "1,234"]


def test_a_span_without_a_name_is_an_allreduce() -> None:
    rows = [
        measured_row(1, Timing(1.0, 1.0), Timing(1.0, 1.0), Timing(1.0, 1.0), {}, {}, True),
        measured_row(8, Timing(1.0, 1.0), Timing(1.0, 1.0), Timing(1.0, 1.0), {}, {}, True),
        measured_row(64, Timing(1.0, 1.0), Timing(1.0, 1.0), Timing(1.0, 1.0), {}, {}, True, "NCCL", "why"),
        measured_row(128, Timing(1.0, 1.0), Timing(1.0, 1.0), Timing(1.0, 1.0), {}, {}, True),
    ]
    assert render.allreduce_spans(rows) == "allreduce at 1-8 tokens; NCCL at 64 tokens (why); allreduce at 128 tokens"


def test_the_estimate_rounds_each_figure_to_a_tenth() -> None:
    result = small_result()
    result.rows = [measured_row(1, Timing(5.0123, 1.0), Timing(15.0, 1.0), Timing(1.0, 1.0), {"norm": 0.0}, {}, True)]
    (step,) = render.to_json(result)["estimate"]["steps"]
    assert step == {
        "tokens": 1,
        "fused_applies": True,
        "off_us": 60.0,
        "on_us": 20.0,
        "saved_us": 40.0,
        "saved_pct": 66.58,
    }


def test_a_plot_target_is_a_png_or_svg_file_and_needs_matplotlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI's --plot check (cli.options.plot_target), run before anything is measured."""
    import click

    from sm120patch.cli.options import plot_target

    for name in ("a.png", "a.svg", "a.SVG", "a.PNG"):
        assert plot_target(None, None, str(tmp_path / name)) == tmp_path / name
    assert plot_target(None, None, None) is None
    with pytest.raises(click.BadParameter) as raised:
        plot_target(None, None, str(tmp_path / "a.pdf"))
    assert raised.value.message == f"{tmp_path / 'a.pdf'}: the file must end in .png or .svg"
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "a.png").write_bytes(b"")
    (tmp_path / "ro" / "a.png").chmod(0o444)
    if not os.access(tmp_path / "ro" / "a.png", os.W_OK):  # root writes anyway
        with pytest.raises(click.BadParameter, match="cannot write there"):
            plot_target(None, None, str(tmp_path / "ro" / "a.png"))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(click.BadParameter) as raised:
        plot_target(None, None, str(tmp_path / "a.png"))
    assert raised.value.message == "--plot needs matplotlib: pip install 'sm120patch[plot]'"


class Recorder:
    """Stands in for matplotlib (and its pyplot, figure and axes): records every call."""

    def __init__(self, calls: list[tuple], name: str = "matplotlib") -> None:
        self._calls, self._name = calls, name

    def __getattr__(self, attr: str) -> Recorder:
        return Recorder(self._calls, f"{self._name}.{attr}")

    def __call__(self, *args: object, **kwargs: object) -> object:
        self._calls.append((self._name, args, kwargs))
        if self._name.endswith("subplots"):
            return Recorder(self._calls, "fig"), Recorder(self._calls, "ax")
        return None


def test_the_plot_draws_three_lines_on_log_axes_with_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple] = []
    fake = Recorder(calls)
    monkeypatch.setitem(sys.modules, "matplotlib", fake)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", Recorder(calls, "plt"))
    fake.pyplot = sys.modules["matplotlib.pyplot"]  # type: ignore[attr-defined]
    target = tmp_path / "bench.svg"
    render.plot(small_result(), target)
    named = [(name, tuple(getattr(a, "_name", a) for a in args), kwargs) for name, args, kwargs in calls]
    assert named == [
        ("matplotlib.use", ("Agg",), {}),
        ("plt.subplots", (), {"figsize": (7, 4.5)}),
        ("ax.plot", ([1, 4096], [5.0, 300.0]), {"marker": "o", "label": "fused (FlashInfer trtllm)"}),
        ("ax.plot", ([1, 4096], [15.03, 200.0]), {"marker": "o", "label": "unfused (custom / NCCL, then torch)"}),
        ("ax.plot", ([1, 4096], [4.0, 150.0]), {"marker": "o", "label": "allreduce alone"}),
        ("ax.set_xscale", ("log",), {"base": 2}),
        ("ax.set_xticks", ([1, 4096], ["1", "4096"]), {}),
        ("ax.minorticks_off", (), {}),
        ("ax.set_yscale", ("log",), {}),
        ("ax.set_xlabel", ("tokens",), {}),
        ("ax.set_ylabel", ("µs per call (median, slowest rank)",), {}),
        ("ax.set_title", ("TP 2, hidden 1024, fp16",), {}),
        ("ax.grid", (True,), {"which": "both", "alpha": 0.3}),
        ("ax.legend", (), {"fontsize": 7}),
        (
            "fig.text",
            (
                0.01,
                0.01,
                "indicative only (no sglang): crossover: none: a fused result was wrong, so fusion wins nowhere; "
                "keep fusion off\nindicative only (why): advice",
            ),
            {"fontsize": 6, "wrap": True},
        ),
        ("fig.tight_layout", (), {"rect": (0, 0.05, 1, 1)}),
        ("fig.savefig", (target,), {}),
        ("plt.close", ("fig",), {}),
    ]


def test_the_facts_name_each_gpu_kind_each_version_and_a_fused_call_left_unnamed() -> None:
    mixed = result(baseline=Baseline(BaselineSource.SGLANG, (CA,), "sglang RMSNorm.forward", ""))
    mixed.probe = {
        "gpus": [
            {"index": 0, "name": "NVIDIA RTX PRO 6000", "capability": [12, 0]},
            {"index": 1, "name": "NVIDIA H200", "capability": [9, 0]},
            {"index": 2, "name": "NVIDIA B200", "capability": [10, 0]},
        ]
    }
    buffer = io.StringIO()
    render.render(mixed, Console(file=buffer, width=200, no_color=True))
    lines = buffer.getvalue().splitlines()
    start = lines.index("GPUs: 2× NVIDIA H200 (cc 9.0), NVIDIA RTX PRO 6000 (cc 12.0)")
    assert lines[start : start + 4] == [
        "GPUs: 2× NVIDIA H200 (cc 9.0), NVIDIA RTX PRO 6000 (cc 12.0)",
        "fused: FlashInfer allreduce_fusion; FlashInfer 0.6.18 trtllm, arguments of sglang 0.5.23's call (the newest "
        "release read): no sglang located (--python / --sglang-path)",
        f"unfused (sglang's own code): {CA} at 1-2048 tokens; then sglang RMSNorm.forward",
        "torch 2.11.0+cu130 (CUDA 13.0), NCCL 2.27.7, driver 13.0",
    ]


def test_on_a_narrow_terminal_each_row_stays_one_line() -> None:
    buffer = io.StringIO()
    render.render(
        result(model=Model(78, 7168, True, "c")), Console(file=buffer, width=44, color_system=None, force_terminal=True)
    )
    lines = buffer.getvalue().splitlines()
    tables = [i for i, line in enumerate(lines) if line.startswith("┡")]
    bottoms = [i for i, line in enumerate(lines) if line.startswith("└")]
    assert [bottom - top - 1 for top, bottom in zip(tables, bottoms, strict=True)] == [3, 3]
    assert lines[tables[0] + 1].startswith("│  1 │ 5.2/… │")


def test_the_plot_marks_the_crossover_where_fusion_stops_winning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fusion wins at 1 and 128 tokens, not at 2048: a dashed line at 128, named; against
    stand-ins the line and the text say the crossover is only indicative."""
    calls: list[tuple] = []
    fake = Recorder(calls)
    monkeypatch.setitem(sys.modules, "matplotlib", fake)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", Recorder(calls, "plt"))
    fake.pyplot = sys.modules["matplotlib.pyplot"]  # type: ignore[attr-defined]
    for baseline, label, text in (
        (SGLANG, "fusion wins up to 128", "crossover: fusion wins at every size up to 128 tokens against"),
        (STANDIN, "fusion wins up to 128 (indicative)", "indicative only (no sglang): crossover: fusion wins"),
    ):
        calls.clear()
        render.plot(crossing(baseline), tmp_path / "bench.svg")
        named = {name: (args, kwargs) for name, args, kwargs in calls}
        assert named["ax.axvline"] == ((128,), {"color": "grey", "linestyle": "--", "linewidth": 1})
        assert named["ax.annotate"][0][:2] == (label, (128, 0.95))
        assert named["fig.text"][0][2].startswith(text)


def test_the_plot_draws_no_line_where_fusion_wins_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in result as recorded wins at every size against its unfused side, as its
    verdict says: no crossover to mark."""
    calls: list[tuple] = []
    fake = Recorder(calls)
    monkeypatch.setitem(sys.modules, "matplotlib", fake)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", Recorder(calls, "plt"))
    fake.pyplot = sys.modules["matplotlib.pyplot"]  # type: ignore[attr-defined]
    render.plot(result(), tmp_path / "bench.svg")
    assert "ax.axvline" not in {name for name, _, _ in calls}
