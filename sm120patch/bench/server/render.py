"""Show a server bench: an 80-column rich table on stderr, one JSON object on stdout, a plot."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sm120patch import __version__
from sm120patch.bench.server.answers import SELF_MARGIN
from sm120patch.bench.server.configs import Config, fusion_args
from sm120patch.bench.server.driver import TABLE, Run, ServerResult, figures
from sm120patch.bench.server.verdict import Compare, Kind
from sm120patch.output.lines import put

if TYPE_CHECKING:
    from rich.console import Console

SCHEMA = "sm120patch-bench-server/1"
#: The off / on / limit table's configurations keep the names the table gives them.
_LABEL = {name: f"fusion {mode}" for mode, name in TABLE.items()}
_COMPARE_STYLE = {Compare.FASTER: "green", Compare.SLOWER: "red", Compare.EVEN: "dim"}
_KIND_STYLE = {
    Kind.PAYS: "bold green",
    Kind.EVEN: "bold",
    Kind.MIXED: "bold yellow",
    Kind.COSTS: "bold yellow",
    Kind.NONE: "bold red",
}
WIDTH = 80


def _run_json(run: Run) -> dict[str, Any]:
    return {
        "config": run.config,
        "mode": run.mode,
        "repeat": run.repeat,
        "command": run.command,
        "seconds": run.seconds,
        "phases": [{"phase": p, "seconds": round(s, 3)} for p, s in run.phases],
        "counts": run.counts.as_json(),
        "sglang_said": [{"line": line, "why": why} for line, why in run.fallbacks + run.fatals],
        "workspace": run.workspace,
        "error": run.error,
        "unused": run.unused,
        "measurements": [
            {
                "batch_size": m.batch_size,
                "input_len": m.input_len,
                "output_len": m.output_len,
                "prefill_latency_s": m.prefill_latency_s,
                "prefill_throughput": m.prefill_throughput,
                "decode_median_latency_s": m.decode_median_s,
                "decode_median_throughput": m.decode_median_throughput,
                "total_latency_s": m.total_latency_s,
                "total_throughput": m.total_throughput,
            }
            for m in run.measurements
        ],
        "skipped": [list(s) for s in run.skipped],
        "tail": run.tail if run.error else [],
    }


def to_json(result: ServerResult) -> dict[str, Any]:
    s = result.settings
    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "command": "bench --server",
        "exit_code": int(result.exit_code),
        "ok": not result.problems,
        "python": s.python,
        "sglang": {"version": s.version, "location": str(s.package_dir), "benchmark": result.module},
        "tp": s.tp,
        "batch_sizes": list(s.batch_sizes),
        "input_len": s.input_len,
        "output_len": s.output_len,
        "repeat": s.repeat,
        "dtype": s.dtype,
        "model": {
            "path": str(result.model.path),
            "bundled": result.model.bundled,
            "architecture": result.model.architecture,
            "hidden": result.model.hidden,
            "layers": result.model.layers,
            "weights": "random (--load-format dummy)",
            "tokenizer_path": str(result.model.tokenizer) if result.model.tokenizer else None,
        },
        "flags": {"on": list(result.flags.on), "off": list(result.flags.off)},
        "gpus": (result.probe.get("gpus") or [])[: s.tp],
        "torch": result.probe.get("torch"),
        "runs": [_run_json(r) for r in result.runs],
        "rows": [
            {
                "batch_size": r.batch_size,
                "off_decode_ms": r.off,
                "on_decode_ms": r.on,
                "off_tokens_per_s": r.off_tps,
                "on_tokens_per_s": r.on_tps,
                "on_vs_off_pct": round(r.delta_pct, 2),
                "noise_pct": round(r.noise_pct, 2),
                "noise_measured": r.measured_noise,
                "compare": r.compare.value,
                "off_runs_ms": r.off_ms,
                "on_runs_ms": r.on_ms,
            }
            for r in result.rows
        ],
        "verdict": {"kind": result.verdict.kind.value, "advice": result.verdict.advice},
        "problems": result.problems,
        "notes": result.notes,
        "logs_kept": str(result.kept) if result.kept else None,
        "three_settings": _three_json(result),
        "configs": [_config_json(result, c) for c in result.chosen],
        "agreement": _agreement_json(result),
        "answer": _answer_json(result),
    }


def _medians(result: ServerResult, name: str, part: str) -> dict[int, float]:
    by_size = figures(result.runs, part).get(name, {})
    return {size: statistics.median(values) for size, values in sorted(by_size.items())}


def _config_json(result: ServerResult, config: Config) -> dict[str, Any]:
    check = result.checks.get(config.name)
    return {
        "name": config.name,
        "sentence": config.sentence,
        "fusion": config.fusion,
        "env": dict(config.env),
        "server_args": list(fusion_args(config, result.flags)),
        "answers": None
        if check is None
        else {
            "status": check.status.value,
            "cosine": check.cosine,
            "step": check.step,
            "nonfinite_forwards": check.nonfinite,
            "why": check.why,
        },
        "decode_ms": {str(k): v for k, v in _medians(result, config.name, "decode").items()},
        "prefill_ms": {str(k): v for k, v in _medians(result, config.name, "prefill").items()},
    }


def _agreement_json(result: ServerResult) -> dict[str, Any] | None:
    found = result.agreement
    if found is None:
        return None
    return {
        "threshold": found.threshold,
        "base_threshold": found.base,
        "default_vs_default": found.default_vs_default,
        "self_margin": SELF_MARGIN,
    }


def _answer_json(result: ServerResult) -> dict[str, Any] | None:
    found = result.answer
    if found is None:
        return None
    return {
        "parts": [
            {
                "part": p.part,
                "config": p.config,
                "vs_default_pct": p.vs_default_pct,
                "noise_pct": round(p.noise_pct, 2),
                "vs_default_ratio": p.figures,
                "fastest_by_batch": {str(k): v for k, v in p.winners.items()},
            }
            for p in found.parts
        ],
        "launch": {
            name: {"env": one.env, "server_args": list(one.server_args), "apply": one.apply, "text": one.text}
            for name, one in found.launches.items()
        },
        "wrong": found.wrong,
        "sentence": found.sentence,
    }


def _three_json(result: ServerResult) -> dict[str, Any] | None:
    """With --fuse-up-to: off, on with sglang's limit, on with the limit asked, per batch size."""
    s = result.settings
    if s.fuse_up_to is None:
        return None
    return {
        "sglang_limit": s.sglang_limit,
        "fuse_up_to": s.fuse_up_to,
        "rows": [
            {
                "batch_size": r.batch_size,
                "prefill_tokens": r.batch_size * s.input_len,
                "decode_ms": {"off": r.off, "on": r.on, "limit": r.limit},
                "prefill_ms": {mode: _prefill_ms(r, mode) for mode in s.modes},
                "limit_runs_ms": r.limit_ms,
            }
            for r in result.rows
        ],
    }


def _prefill_ms(row: Any, mode: str) -> float | None:
    value = row.prefill(mode)
    return None if value is None else value * 1000.0


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 100 else f"{value:,.0f}"


def _tps(value: float) -> str:
    return f"{value:,.0f}"


def render(result: ServerResult, out: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    s = result.settings
    table = Table(
        title=f"sglang {s.version} bench_one_batch, TP {s.tp}, in {s.input_len} / out {s.output_len}: decode, "
        "median of runs",
        title_justify="left",
        width=min(WIDTH, out.width),
    )
    for header in ("batch", "off ms/tok", "on ms/tok", "off tok/s", "on tok/s", "on vs off", "noise"):
        table.add_column(header, justify="right", no_wrap=True)
    for row in result.rows:
        noise = f"±{row.noise_pct:.1f}%" + ("" if row.measured_noise else "?")
        table.add_row(
            str(row.batch_size),
            _ms(row.off),
            _ms(row.on),
            _tps(row.off_tps),
            _tps(row.on_tps),
            Text(f"{row.delta_pct:+.1f} %", style=_COMPARE_STYLE[row.compare]),
            noise,
        )
    if result.rows:
        out.print(table)
    if result.rows and s.fuse_up_to is not None:
        _render_three(result, out)
    facts = [
        f"model: {result.model.describe()}; nothing downloaded",
        f"fusion on: {result.flags.on_text}; off: {result.flags.off_text}",
        f"{len(result.runs)} runs of {result.module} in {s.python}",
    ]
    for name in dict.fromkeys(r.config for r in result.runs):
        counted = [r for r in result.runs if r.config == name]
        said = [r.counts.describe() for r in counted]
        label = _LABEL.get(name, name)
        if len(set(said)) == 1:
            facts.append(f"{label}: {said[0]}" + (f" (each of {len(said)} runs)" if len(said) > 1 else ""))
        else:
            facts.append(f"{label}: " + "; ".join(f"run {r.repeat}: {d}" for r, d in zip(counted, said, strict=True)))
    for name in dict.fromkeys(r.config for r in result.runs if r.counts.allreduce):
        taken = dict.fromkeys(r.counts.describe_allreduce() for r in result.runs if r.config == name)
        facts.append(f"{_LABEL.get(name, name)}: {' / '.join(taken)}")
    facts.append("decode steps replayed from CUDA graphs run no Python: counts are eager calls + graph captures")
    for run in result.runs:
        facts += [f"{run.mode} run {run.repeat}, sglang said: {line}" for line, _ in run.fallbacks + run.fatals]
    facts += result.notes
    for fact in facts:
        put(out, Text(fact, style="dim"), width=WIDTH)
    if result.kept:  # one line the terminal wraps, so the path is copied whole
        put(out, Text(f"logs kept in {result.kept}", style="dim"))
    put(out, Text(result.verdict.advice, style=_KIND_STYLE[result.verdict.kind]), width=WIDTH)
    _render_configs(result, out)


def _render_configs(result: ServerResult, out: Console) -> None:
    """Every configuration's decode and its answers against sglang's default, then the answer."""
    from rich.table import Table
    from rich.text import Text

    if result.answer is None or result.agreement is None:
        return
    s = result.settings
    table = Table(
        title="configurations: decode ms/tok by batch size (median), answers against sglang's default",
        title_justify="left",
        width=min(WIDTH, out.width),
    )
    table.add_column("configuration", no_wrap=True)
    for size in s.batch_sizes:
        table.add_column(str(size), justify="right", no_wrap=True)
    table.add_column("answers", no_wrap=True)
    for config in result.chosen:
        check = result.checks[config.name]
        medians = _medians(result, config.name, "decode")  # a run without a figure is left out
        cosine = f" {check.cosine:.4f}" if check.cosine is not None else ""
        table.add_row(
            config.name,
            *("-" if size not in medians else _ms(medians[size]) for size in s.batch_sizes),
            Text(check.status.value + cosine, style="red" if check.status.wrong else ""),
        )
    out.print(table)
    agreement = result.agreement
    measured = (
        f"default vs default {agreement.default_vs_default:.4f}"
        if agreement.default_vs_default is not None
        else "default vs default not measured (--repeat 1)"
    )
    lines = [
        f"answers agree at cosine >= {agreement.threshold:.4f} (calibrated {agreement.base}; {measured})",
        *(f"{name}: {result.checks[name].why}" for name in result.answer.wrong),
    ]
    for line in lines:
        put(out, Text(line, style="dim"), width=WIDTH)
    style = "bold red" if result.answer.wrong else "bold"
    put(out, Text(f"answer: {result.answer.sentence}", style=style), width=WIDTH)


def _render_three(result: ServerResult, out: Console) -> None:
    """The three settings side by side: off, sglang's limit, the limit asked (--fuse-up-to)."""
    from rich.table import Table

    s = result.settings
    table = Table(
        title=f"three settings: off / on up to sglang's {s.sglang_limit} / on up to {s.fuse_up_to} tokens "
        "(prefill: batch x input tokens)",
        title_justify="left",
        width=min(WIDTH, out.width),
    )
    headers = ("batch", "prefill tok", "prefill ms", "decode ms/tok")
    for header in headers:
        table.add_column(header, justify="right", no_wrap=True)
    for row in result.rows:
        prefill = [_prefill_ms(row, mode) for mode in s.modes]
        decode = [row.off, row.on, row.limit]
        table.add_row(
            str(row.batch_size),
            f"{row.batch_size * s.input_len:,}",
            " / ".join("-" if v is None else _ms(v) for v in prefill),
            " / ".join("-" if v is None else _ms(v) for v in decode),
        )
    out.print(table)


def plot(result: ServerResult, path: Path) -> None:
    """Decode ms per token against batch size, off and on (median, with the runs' range)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r.batch_size for r in result.rows]
    # The limit's line only where its run measured every size: a bench stopped before that
    # run (the "on" run failed its check) still draws off and on.
    limits = [r.limit for r in result.rows if r.limit is not None]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for medians, values, label in (
        ([r.off for r in result.rows], [r.off_ms for r in result.rows], f"fusion off ({result.flags.off_text})"),
        ([r.on for r in result.rows], [r.on_ms for r in result.rows], f"fusion on ({result.flags.on_text})"),
        *(
            [(limits, [r.limit_ms for r in result.rows], f"fusion on up to {result.settings.fuse_up_to} tokens")]
            if result.settings.fuse_up_to is not None and len(limits) == len(result.rows)
            else []
        ),
    ):
        low = [m - min(v) for m, v in zip(medians, values, strict=True)]
        high = [max(v) - m for m, v in zip(medians, values, strict=True)]
        ax.errorbar(sizes, medians, yerr=[low, high], marker="o", capsize=3, label=label)
    ax.set_xscale("log", base=2)
    if sizes:
        ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.minorticks_off()
    ax.set_xlabel("batch size")
    ax.set_ylabel("decode ms per token (median of runs)")
    ax.set_title(f"sglang {result.settings.version}, TP {result.settings.tp}: {result.model.describe()}", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.text(0.01, 0.01, result.verdict.advice, fontsize=6, wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path)
    plt.close(fig)
