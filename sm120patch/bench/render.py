"""Show a bench result: a rich table on stderr, one JSON object on stdout, a plot file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sm120patch import __version__
from sm120patch.bench.measure import SGLANG_NORM, BenchResult, Row, Timing
from sm120patch.bench.verdict import Compare, Kind
from sm120patch.errors import EnvironmentProblem

if TYPE_CHECKING:
    from rich.console import Console

SCHEMA = "sm120patch-bench/1"
_COMPARE_STYLE = {Compare.FASTER: "green", Compare.SLOWER: "red", Compare.EVEN: "dim"}
_KIND_STYLE = {
    Kind.PAYS: "bold green",
    Kind.EVEN: "bold",
    Kind.MIXED: "bold yellow",
    Kind.COSTS: "bold yellow",
    Kind.WRONG: "bold red",
}


def _row_json(row: Row) -> dict[str, Any]:
    point = row.point
    return {
        "tokens": row.tokens,
        "fused": {"median_us": row.fused.median_us, "p90_us": row.fused.p90_us},
        "unfused": {"median_us": row.unfused.median_us, "p90_us": row.unfused.p90_us},
        "allreduce": {"median_us": row.allreduce.median_us, "p90_us": row.allreduce.p90_us},
        "fused_vs_unfused_pct": round(point.delta_pct, 2),
        "fused_vs_allreduce_pct": round(row.vs_floor_pct, 2),
        "compare": point.compare.value,
        "max_abs_error": row.max_abs_error,
        "tolerance": row.tolerance,
        "ok": row.ok,
    }


def to_json(result: BenchResult) -> dict[str, Any]:
    settings = result.settings
    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "command": "bench",
        "exit_code": int(result.exit_code),
        "tp": result.tp,
        "hidden": settings.hidden,
        "dtype": settings.dtype,
        "tokens": list(settings.tokens),
        "timing": {
            "method": "eager warm-up, CUDA graph of calls, timed replays with CUDA events",
            "calls_per_graph": settings.calls,
            "replays": settings.replays,
            "statistic": "median and p90 per call; the slowest rank's",
        },
        "python": settings.python,
        "call": {
            "mirrors": result.call.source,
            "defaulted": list(result.call.defaulted),
            "backend": "trtllm",
            **result.call.values,
        },
        "baseline": result.baseline,
        "baseline_is_sglangs": SGLANG_NORM in result.baseline,
        "gpus": (result.probe.get("gpus") or [])[: result.tp],
        "versions": result.versions,
        "rows": [_row_json(r) for r in result.rows],
        "verdict": {
            "kind": result.verdict.kind.value,
            "advice": result.verdict.advice,
            "crossover_tokens": result.verdict.crossover,
        },
        "notes": result.notes,
    }


def _us(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def _cell(timing: Timing) -> str:
    return f"{_us(timing.median_us)}/{_us(timing.p90_us)}"


def render(result: BenchResult, out: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    settings = result.settings
    table = Table(
        title=f"allreduce + RMSNorm, TP {result.tp}, hidden {settings.hidden}, {settings.dtype}: "
        "µs per call, median/p90 of the slowest rank",
        title_justify="left",
    )
    for header in ("tokens", "fused", "unfused", "AR alone", "vs unfused", "max err"):
        table.add_column(header, justify="right", no_wrap=True)
    for row in result.rows:
        point = row.point
        error = max(row.max_abs_error.values())
        table.add_row(
            str(row.tokens),
            _cell(row.fused),
            _cell(row.unfused),
            _cell(row.allreduce),
            Text(f"{point.delta_pct:+.1f} %", style=_COMPARE_STYLE[point.compare]),
            Text(f"{error:.3g}" + ("" if row.ok else " WRONG"), style="" if row.ok else "bold red"),
        )
    out.print(table)
    gpus = result.probe.get("gpus") or []
    names = sorted({f"{g['name']} (cc {g['capability'][0]}.{g['capability'][1]})" for g in gpus[: result.tp]})
    versions = result.versions
    facts = [
        f"GPUs: {result.tp}× {', '.join(names)}",
        f"fused: FlashInfer {versions.get('flashinfer')} trtllm, called as {result.call.source}",
        f"unfused: {result.baseline}",
        f"torch {versions.get('torch')} (CUDA {versions.get('torch_cuda')}), NCCL {versions.get('nccl')}, "
        f"driver {versions.get('driver')}",
        *result.notes,
    ]
    for fact in facts:
        out.print(Text(fact, style="dim"))
    out.print(Text(result.verdict.advice, style=_KIND_STYLE[result.verdict.kind]))


def check_plot_target(path: Path) -> None:
    """Refuse a --plot that cannot be written before minutes are spent measuring."""
    if path.suffix.lower() not in (".png", ".svg"):
        raise EnvironmentProblem(f"--plot {path}: the file must end in .png or .svg")
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise EnvironmentProblem("--plot needs matplotlib: pip install 'sm120patch[plot]'") from exc


def plot(result: BenchResult, path: Path) -> None:
    """Latency against tokens (both axes logarithmic), one line per path."""
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window
    import matplotlib.pyplot as plt

    tokens = [r.tokens for r in result.rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, label in (
        ("fused", "fused (FlashInfer trtllm)"),
        ("unfused", f"unfused ({result.baseline})"),
        ("allreduce", "allreduce alone"),
    ):
        ax.plot(tokens, [getattr(r, name).median_us for r in result.rows], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(tokens, [str(t) for t in tokens])
    ax.minorticks_off()
    ax.set_yscale("log")
    ax.set_xlabel("tokens")
    ax.set_ylabel("µs per call (median, slowest rank)")
    ax.set_title(f"TP {result.tp}, hidden {result.settings.hidden}, {result.settings.dtype}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.text(0.01, 0.01, result.verdict.advice, fontsize=6, wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path)
    plt.close(fig)
