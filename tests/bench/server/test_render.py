"""What bench server shows, from results built by hand (hand.py): the one JSON object, the
80-column text with its styles, the plot's calls."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

from sm120patch import __version__
from sm120patch.bench.server import config, render
from sm120patch.bench.server.counter import Calls, Counts
from sm120patch.bench.server.parse import Measurement
from sm120patch.bench.server.verdict import Kind, Row, Verdict, no_verdict
from tests.bench.kernel.test_render import Recorder
from tests.bench.server.hand import FLAGS, PYTHON, fused, result, run


def text(done: object, width: int = 200, **console: object) -> str:
    buffer = io.StringIO()
    options = {"color_system": None, "force_terminal": True, **console}  # a terminal unless asked
    render.render(done, Console(file=buffer, width=width, **options))  # type: ignore[arg-type]
    return buffer.getvalue()


def test_the_json_object_of_a_result() -> None:
    data = json.loads(json.dumps(render.to_json(result(notes=["a note"]))))  # plain JSON types only
    runs, rows = data.pop("runs"), data.pop("rows")
    assert data == {
        "schema": "sm120patch-bench-server/1",
        "tool_version": __version__,
        "command": "bench --server",
        "exit_code": 0,
        "ok": True,
        "python": PYTHON,
        "sglang": {"version": "0.5.14", "location": "/site/sglang", "benchmark": "sglang.benchmark.one_batch"},
        "tp": 2,
        "batch_sizes": [1, 8],
        "input_len": 256,
        "output_len": 64,
        "repeat": 2,
        "dtype": "bf16",
        "model": {
            "path": "/scratch/model",
            "bundled": True,
            "architecture": "LlamaForCausalLM",
            "hidden": 1024,
            "layers": 4,
            "weights": "random (--load-format dummy)",
            "tokenizer_path": None,
        },
        "flags": {"on": ["--flashinfer-allreduce-fusion-backend", "trtllm"], "off": [FLAGS.off[0]]},
        "gpus": [
            {"index": 0, "name": "NVIDIA RTX PRO 6000", "free_bytes": 90, "total_bytes": 95},
            {"index": 1, "name": "NVIDIA RTX PRO 6000", "free_bytes": 90, "total_bytes": 95},
        ],
        "torch": {"ok": True, "version": "2.11.0"},
        "verdict": {
            "kind": "pays",
            "advice": "fusion pays in sglang's own decode at TP 2: 8.3 % to 9.9 % faster per token at batch 1, 8: "
            "launch with `--flashinfer-allreduce-fusion-backend trtllm`",
        },
        "problems": [],
        "notes": ["a note"],
        "logs_kept": None,
        "three_settings": None,
        "configs": [],
        "agreement": None,
        "answer": None,
    }
    assert [(r["mode"], r["repeat"]) for r in runs] == [("off", 1), ("on", 1), ("on", 2), ("off", 2)]
    assert rows[0] == {
        "batch_size": 1,
        "off_decode_ms": pytest.approx(10.1),
        "on_decode_ms": pytest.approx(9.1),
        "off_tokens_per_s": pytest.approx(1000 / 10.1),
        "on_tokens_per_s": pytest.approx(1000 / 9.1),
        "on_vs_off_pct": -9.9,
        "noise_pct": 2.2,
        "noise_measured": True,
        "compare": "faster",
        "off_runs_ms": [10.0, 10.2],
        "on_runs_ms": [9.0, 9.2],
    }
    assert rows[1]["on_vs_off_pct"] == -8.26 and rows[1]["noise_pct"] == 1.8  # rounded to 2 places


def test_the_json_of_a_run_holds_everything_it_did() -> None:
    measured = Measurement(8, 256, 64, 0.041, 49951.2, 0.0123, 650.4, 0.82, 2810.5)
    one = run(
        "on",
        2,
        {},
        measurements=[measured],
        skipped=[(512, 256, 64)],
        counts=Counts(2, 1, Calls(1, 2, 0), Calls(3, 4, 5), Calls(6, 0, 0), 1, True),
        fallbacks=[("W fusion disabled globally", "another rank")],
        fatals=[("E Capture cuda graph failed", "capture")],
        workspace=["FlashInfer workspace initialized"],
        seconds=12.5,
        phases=[("warm-up", 1.23456), ("benchmark", 2.0)],
        tail=["last"],
    )
    data = render._run_json(one)
    assert data == {
        "config": "fusion",
        "mode": "on",
        "repeat": 2,
        "command": one.command,
        "seconds": 12.5,
        "phases": [{"phase": "warm-up", "seconds": 1.235}, {"phase": "benchmark", "seconds": 2.0}],
        "counts": {
            "processes": 2,
            "sglang_processes": 1,
            "fused_kernel": {"eager": 1, "capture": 2, "fell_back": 0},
            "sglang_entry": {"eager": 3, "capture": 4, "fell_back": 5},
            "other_flashinfer_allreduce": {"eager": 6, "capture": 0, "fell_back": 0},
            "ranks_with_fused_calls": 1,
            "ran": True,
            "multicast_guarded": True,
            "logits": {"forwards": 0, "nonfinite_forwards": 0, "first": {}, "rank": None, "errors": []},
            "allreduce": {},
        },
        "sglang_said": [
            {"line": "W fusion disabled globally", "why": "another rank"},
            {"line": "E Capture cuda graph failed", "why": "capture"},
        ],
        "workspace": ["FlashInfer workspace initialized"],
        "error": None,
        "unused": None,
        "measurements": [
            {
                "batch_size": 8,
                "input_len": 256,
                "output_len": 64,
                "prefill_latency_s": 0.041,
                "prefill_throughput": 49951.2,
                "decode_median_latency_s": 0.0123,
                "decode_median_throughput": 650.4,
                "total_latency_s": 0.82,
                "total_throughput": 2810.5,
            }
        ],
        "skipped": [[512, 256, 64]],
        "tail": [],  # only a failed run shows its last lines
    }
    one.error = "sglang's benchmark ended with exit 3"
    assert render._run_json(one)["tail"] == ["last"]
    assert render._run_json(one)["error"] == "sglang's benchmark ended with exit 3"


def test_the_json_of_a_result_with_problems_a_user_model_and_kept_logs(tmp_path: Path) -> None:
    done = result(rows=[], verdict=no_verdict("the on run never fused"), problems=["p"], kept=tmp_path / "logs")
    done.model = config.Model(Path("/models/q"), Path("/scratch/tok"), False, "Qwen3", 2048, 2)
    done.probe = {}
    data = render.to_json(done)
    assert (data["exit_code"], data["ok"], data["problems"], data["logs_kept"]) == (
        1,
        False,
        ["p"],
        str(tmp_path / "logs"),
    )
    assert data["model"]["tokenizer_path"] == "/scratch/tok" and data["model"]["bundled"] is False
    assert (data["gpus"], data["torch"], data["rows"]) == ([], None, [])
    assert data["verdict"] == {"kind": "none", "advice": "no verdict: the on run never fused"}


def test_the_json_of_three_settings_names_each_setting_per_batch_size() -> None:
    """With --fuse-up-to 256 at sglang's 2048: per batch size, the decode and prefill medians of
    off, on (sglang's limit) and limit (256), and the limit runs one by one."""
    rows = [
        Row(1, [10.0, 10.2], [9.0, 9.2], [9.5, 9.7], {"off": [0.040], "on": [0.050], "limit": [0.041, 0.043]}),
        Row(8, [12.0, 12.2], [11.0, 11.2], [11.5, 11.5], {"off": [0.32], "on": [0.384]}),  # no limit prefill read
    ]
    done = result(rows=rows, verdict=Verdict(Kind.MIXED, "the advice"), fuse_up_to=256, sglang_limit=2048)
    three = json.loads(json.dumps(render.to_json(done)))["three_settings"]  # plain JSON types only
    assert three == {
        "sglang_limit": 2048,
        "fuse_up_to": 256,
        "rows": [
            {
                "batch_size": 1,
                "prefill_tokens": 256,
                "decode_ms": {"off": pytest.approx(10.1), "on": pytest.approx(9.1), "limit": pytest.approx(9.6)},
                "prefill_ms": {"off": 40.0, "on": 50.0, "limit": pytest.approx(42.0)},
                "limit_runs_ms": [9.5, 9.7],
            },
            {
                "batch_size": 8,
                "prefill_tokens": 2048,
                "decode_ms": {"off": pytest.approx(12.1), "on": pytest.approx(11.1), "limit": 11.5},
                "prefill_ms": {"off": 320.0, "on": 384.0, "limit": None},
                "limit_runs_ms": [11.5, 11.5],
            },
        ],
    }


GOLDEN = (
    "sglang 0.5.14 bench_one_batch, TP 2, in 256 / out 64: decode, median of runs    \n"
    "┏━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━┓\n"
    "┃  batch ┃  off ms/tok ┃  on ms/tok ┃ off tok/s ┃ on tok/s ┃ on vs off ┃ noise ┃\n"
    "┡━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━┩\n"
    "│      1 │       10.10 │       9.10 │        99 │      110 │    -9.9 % │ ±2.2% │\n"
    "│      8 │       12.10 │      11.10 │       661 │      721 │    -8.3 % │ ±1.8% │\n"
    "└────────┴─────────────┴────────────┴───────────┴──────────┴───────────┴───────┘\n"
    "model: LlamaForCausalLM, hidden 1024, 4 layers (bundled config; random weights);\n"
    "nothing downloaded\n"
    "fusion on: --flashinfer-allreduce-fusion-backend trtllm; off:\n"
    "--enforce-disable-flashinfer-allreduce-fusion\n"
    "4 runs of sglang.benchmark.one_batch in /opt/venv/bin/python\n"
    "fusion off: the fused kernel was never called (each of 2 runs)\n"
    "fusion on: fused kernel called 18x in 2 processes (2 eager, 16 in graph capture)\n"
    "(each of 2 runs)\n"
    "decode steps replayed from CUDA graphs run no Python: counts are eager calls +\n"
    "graph captures\n"
    "a note\n"
    "fusion pays in sglang's own decode at TP 2: 8.3 % to 9.9 % faster per token at\n"
    "batch 1, 8: launch with `--flashinfer-allreduce-fusion-backend trtllm`\n"
)


def test_the_text_on_a_wide_terminal_is_80_columns() -> None:
    shown = text(result(notes=["a note"]))
    assert shown == GOLDEN
    table = [line for line in shown.splitlines() if line[:1] in "┏┃┡│└"]
    assert {len(line) for line in table} == {80}


def test_the_text_on_a_narrow_terminal_is_its_width() -> None:
    lines = text(result(), width=60).splitlines()
    assert max(len(line) for line in lines) == 60
    top, bottom = (next(i for i, line in enumerate(lines) if line.startswith(c)) for c in "┡└")
    assert lines[top + 1 : bottom] == [  # each row one line, cells cut short rather than wrapped
        "│   1 │    10.10 │   9.10 │      99 │   110 │  -9.9 % │ ±… │",
        "│   8 │    12.10 │  11.10 │     661 │   721 │  -8.3 % │ ±… │",
    ]
    assert "fusion on: fused kernel called 18x in 2 processes (2 eager," in lines


def unfused_runs(describe_second: Counts) -> list:
    return [
        run("off", 1, {1: 10.0}),
        run("on", 1, {1: 9.0}),
        run("on", 2, {1: 9.0}, counts=describe_second),
        run("off", 2, {1: 10.0}),
    ]


def flat(shown: str) -> str:
    return " ".join(shown.split())


def test_runs_that_differ_are_said_one_by_one() -> None:
    done = result(runs=unfused_runs(fused(1)), rows=[Row(1, [10.0, 10.0], [9.0, 9.0])])
    shown = flat(text(done))
    assert (
        "fusion on: run 1: fused kernel called 18x in 2 processes (2 eager, 16 in graph capture); "
        "run 2: fused kernel called 9x in 2 processes (1 eager, 8 in graph capture)"
    ) in shown
    assert "fusion off: the fused kernel was never called (each of 2 runs)" in shown


def test_one_run_per_mode_has_no_each_of() -> None:
    runs = [run("off", 1, {1: 10.0}), run("on", 1, {1: 9.0})]
    shown = flat(text(result(runs=runs, rows=[Row(1, [10.0], [9.0])], repeat=1)))
    assert "2 runs of sglang.benchmark.one_batch" in shown
    assert "fusion off: the fused kernel was never called fusion on: " in shown
    assert "fusion on: fused kernel called 18x in 2 processes (2 eager, 16 in graph capture) decode steps" in shown
    assert "│ -10.0 % │ ±3.0%? │" in shown  # the noise of single runs is not measured


def test_a_stopped_bench_says_what_ran_what_sglang_said_and_where_the_logs_are(tmp_path: Path) -> None:
    off = run("off", 1, {}, fallbacks=[("W a fallback line", "why")], fatals=[("E a fatal line", "why")])
    done = result(
        runs=[off],
        rows=[],
        verdict=no_verdict("the fusion-off run failed"),
        problems=["the fusion-off run failed"],
        kept=tmp_path / "logs",
    )
    shown = text(done)
    assert "on vs off" not in shown and "┏" not in shown  # no table without rows
    lines = shown.splitlines()
    assert lines[:2] == [
        "model: LlamaForCausalLM, hidden 1024, 4 layers (bundled config; random weights);",
        "nothing downloaded",
    ]
    assert "1 runs of sglang.benchmark.one_batch in /opt/venv/bin/python" in lines
    assert "fusion off: the fused kernel was never called" in lines
    # the flags are said; no on run was made, so there are no counts of one
    assert [line for line in lines if line.startswith("fusion on")] == [
        "fusion on: --flashinfer-allreduce-fusion-backend trtllm; off:"
    ]
    assert "off run 1, sglang said: W a fallback line" in lines
    assert "off run 1, sglang said: E a fatal line" in lines
    assert f"logs kept in {tmp_path / 'logs'}" in lines
    assert lines[-1] == "no verdict: the fusion-off run failed"


def test_figures_of_100_ms_and_more_lose_their_decimals() -> None:
    assert [render._ms(v) for v in (0.054, 99.994, 100.0, 1234.4)] == ["0.05", "99.99", "100", "1,234"]
    assert [render._tps(v) for v in (0.4, 999.5, 12345.6)] == ["0", "1,000", "12,346"]


def ansi(done: object) -> str:
    return text(done, force_terminal=True, color_system="standard", no_color=False)


@pytest.mark.parametrize(
    ("on", "cell"),
    [(8.0, "\x1b[32m  -20.0 %\x1b[0m"), (12.0, "\x1b[31m  +20.0 %\x1b[0m"), (10.0, "\x1b[2m   +0.0 %\x1b[0m")],
)
def test_each_comparison_has_its_colour(on: float, cell: str) -> None:
    done = result(rows=[Row(1, [10.0, 10.0], [on, on])], verdict=Verdict(Kind.EVEN, "advice"))
    assert cell in ansi(done)


@pytest.mark.parametrize(
    ("kind", "style"),
    [(Kind.PAYS, "1;32"), (Kind.EVEN, "1"), (Kind.MIXED, "1;33"), (Kind.COSTS, "1;33"), (Kind.NONE, "1;31")],
)
def test_each_verdict_has_its_style_and_the_facts_are_dim(kind: Kind, style: str) -> None:
    shown = ansi(result(verdict=Verdict(kind, "the advice")))
    assert shown.endswith(f"\x1b[{style}mthe advice\x1b[0m\n")
    assert "\x1b[2m4 runs of sglang.benchmark.one_batch in /opt/venv/bin/python\x1b[0m" in shown


def test_the_plot_draws_off_and_on_with_the_runs_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """matplotlib is the Recorder of tests/bench/kernel/test_render.py: every call recorded, nothing drawn."""
    calls: list[tuple] = []
    fake = Recorder(calls)
    monkeypatch.setitem(sys.modules, "matplotlib", fake)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", Recorder(calls, "plt"))
    fake.pyplot = sys.modules["matplotlib.pyplot"]  # type: ignore[attr-defined]
    rows = [Row(1, [10.0, 11.0, 12.0], [9.0, 9.5, 10.5]), Row(64, [20.0], [30.0])]
    target = tmp_path / "server.png"
    render.plot(result(rows=rows, verdict=Verdict(Kind.MIXED, "the advice")), target)
    named = [(name, tuple(getattr(a, "_name", a) for a in args), kwargs) for name, args, kwargs in calls]
    off = f"fusion off ({FLAGS.off[0]})"
    assert named == [
        ("matplotlib.use", ("Agg",), {}),
        ("plt.subplots", (), {"figsize": (7, 4.5)}),
        (
            "ax.errorbar",
            ([1, 64], [11.0, 20.0]),
            {"yerr": [[1.0, 0.0], [1.0, 0.0]], "marker": "o", "capsize": 3, "label": off},
        ),
        (
            "ax.errorbar",
            ([1, 64], [9.5, 30.0]),
            {
                "yerr": [[0.5, 0.0], [1.0, 0.0]],
                "marker": "o",
                "capsize": 3,
                "label": "fusion on (--flashinfer-allreduce-fusion-backend trtllm)",
            },
        ),
        ("ax.set_xscale", ("log",), {"base": 2}),
        ("ax.set_xticks", ([1, 64], ["1", "64"]), {}),
        ("ax.minorticks_off", (), {}),
        ("ax.set_xlabel", ("batch size",), {}),
        ("ax.set_ylabel", ("decode ms per token (median of runs)",), {}),
        (
            "ax.set_title",
            ("sglang 0.5.14, TP 2: LlamaForCausalLM, hidden 1024, 4 layers (bundled config; random weights)",),
            {"fontsize": 8},
        ),
        ("ax.grid", (True,), {"which": "both", "alpha": 0.3}),
        ("ax.legend", (), {"fontsize": 7}),
        ("fig.text", (0.01, 0.01, "the advice"), {"fontsize": 6, "wrap": True}),
        ("fig.tight_layout", (), {"rect": (0, 0.05, 1, 1)}),
        ("fig.savefig", (target,), {}),
        ("plt.close", ("fig",), {}),
    ]
    calls.clear()
    render.plot(result(rows=[], verdict=Verdict(Kind.NONE, "x")), target)
    assert "ax.set_xticks" not in [name for name, *_ in calls]  # no sizes, no ticks


def test_a_kept_log_path_longer_than_the_terminal_is_printed_whole() -> None:
    """Folded at 80 columns, the path would copy with a line break in it: in a terminal it is
    whole on a line of its own; piped, the sentence is one line."""
    kept = Path("/var/tmp") / ("x" * 90) / "logs"
    done = result(runs=[], rows=[], verdict=no_verdict("the fusion-off run failed"), kept=kept)
    lines = text(done, width=80).splitlines()
    assert lines[lines.index("logs kept in") + 1] == str(kept)
    assert f"logs kept in {kept}" in text(done, width=80, force_terminal=False).splitlines()
    assert f"\x1b[2mlogs kept in {kept}\x1b[0m\n" in ansi(done)  # dim, as the other facts
