"""Show a bench result: a rich table on stderr, one JSON object on stdout, a plot file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sm120patch import __version__
from sm120patch.bench.kernel import estimate, saved
from sm120patch.bench.kernel.measure import BenchResult, Row, Timing, Variant, variants
from sm120patch.bench.kernel.verdict import Compare, Crossover, Kind
from sm120patch.output.lines import put

if TYPE_CHECKING:
    from rich.console import Console

SCHEMA = "sm120patch-bench/2"  # 2: baseline became an object (source, allreduce, norm, ...)
_COMPARE_STYLE = {Compare.FASTER: "green", Compare.SLOWER: "red", Compare.EVEN: "dim"}
_KIND_STYLE = {
    Kind.PAYS: "bold green",
    Kind.EVEN: "bold",
    Kind.MIXED: "bold yellow",
    Kind.COSTS: "bold yellow",
    Kind.WRONG: "bold red",
}


def _timing_json(timing: Timing) -> dict[str, float]:
    return {"median_us": timing.median_us, "p90_us": timing.p90_us}


def _row_json(row: Row) -> dict[str, Any]:
    """A row: the sm120patch-bench/2 fields (each variant's ``field``, ``name_field``,
    ``why_field``), then every measured variant under ``variants``."""
    point = row.point
    data: dict[str, Any] = {"tokens": row.tokens}
    for variant in variants():
        if variant.always and variant.json_field:
            data[variant.json_field] = _timing_json(row.timings[variant.name])
    data.update(
        fused_vs_unfused_pct=round(point.delta_pct, 2),
        fused_vs_allreduce_pct=round(row.vs_floor_pct, 2),
        compare=point.compare.value,
    )
    for variant in variants():
        if variant.name_field and variant.always:
            data[variant.name_field] = row.allreduces.get(variant.name, "")
        if variant.why_field and variant.always:
            data[variant.why_field] = row.why.get(variant.name, "")
    for variant in variants():
        if variant.always:
            continue
        timing = row.timings.get(variant.name)
        if variant.json_field:
            data[variant.json_field] = None if timing is None else _timing_json(timing)
        if variant.name_field:
            data[variant.name_field] = row.allreduces.get(variant.name) or None
        if variant.why_field:
            data[variant.why_field] = row.why.get(variant.name) or None
    data.update(
        fastest=row.fastest,
        max_abs_error=row.max_abs_error,
        tolerance=row.tolerance,
        ok=row.ok,
        variants={
            variant.name: {
                **_timing_json(timing),
                "allreduce": row.allreduces.get(variant.name) or None,
                "allreduce_why": row.why.get(variant.name) or None,
            }
            for variant, timing in row.measured()
        },
    )
    return data


def variants_json() -> dict[str, Any]:
    """What each variant a row may hold measures (the table of measure.py)."""
    return {
        v.name: {"measures": v.measures, "launchable": v.launchable, "since": v.since, "always": v.always}
        for v in variants()
    }


def to_json(result: BenchResult) -> dict[str, Any]:
    settings = result.settings
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "tool_version": __version__,
        "command": "bench",
        "exit_code": int(result.exit_code),
        "ok": result.exit_code == 0,  # as in every other command's object
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
        "baseline": {
            "source": result.baseline.source.value,
            "allreduce": list(result.baseline.allreduce),
            "norm": result.baseline.norm,
            "fused": result.baseline.fused,
            "indicative": result.baseline.indicative,
            "why": list(result.baseline.why),
        },
        "gpus": (result.probe.get("gpus") or [])[: result.tp],
        "versions": result.versions,
        "variants": variants_json(),
        "rows": [_row_json(r) for r in result.rows],
        "verdict": {
            "kind": result.verdict.kind.value,
            "advice": result.verdict.text,
            "indicative": bool(result.verdict.indicative),
            "crossover_tokens": result.verdict.crossover,
        },
        "estimate": _estimate_json(result),
        "notes": result.notes,
    }
    data["crossover"] = saved.crossover_json(saved.crossover_of(data))
    return data


def _steps(result: BenchResult) -> list[estimate.Step]:
    assert result.model is not None
    points = [r.point for r in result.rows]
    return estimate.steps(result.model, [(p.tokens, p.fused_us, p.unfused_us) for p in points])


def _estimate_json(result: BenchResult) -> dict[str, Any] | None:
    if result.model is None:
        return None
    model = result.model
    found = _steps(result)
    return {
        "model": {"layers": model.layers, "hidden": model.hidden, "moe": model.moe, "source": model.source},
        "sites_per_step": model.sites,
        "fusion_max_tokens": estimate.FUSION_MAX_TOKENS,
        "steps": [
            {
                "tokens": s.tokens,
                "fused_applies": s.fused_applies,
                "off_us": round(s.off_us, 1),
                "on_us": round(s.on_us, 1),
                "saved_us": round(s.saved_us, 1),
                "saved_pct": round(s.saved_pct, 2),
            }
            for s in found
        ],
        "summary": estimate.summary(model, found),
    }


def _optional_launchable() -> list[Variant]:
    return [v for v in variants() if v.launchable and not v.always]


def fastest_line(rows: list[Row]) -> str:
    """With a variant a server can be launched with measured beyond fused and unfused (0.5.23's
    PCIe-IPC allreduce): per token count, the fastest of them, and what each extra one took."""
    of = " / ".join(v.label or v.name for v in variants() if v.launchable)
    words = {v.name: v.words or v.name for v in variants()}
    cells = []
    for row in rows:
        extra = []
        for variant in _optional_launchable():
            timing = row.timings.get(variant.name)
            took = f"{_us(timing.median_us)} µs" if timing else "not measured"
            extra.append(f"{variant.header or variant.name} {took}")
        cells.append(f"{row.tokens}: {words[row.fastest]} ({'; '.join(extra)})")
    return f"fastest per token count, of {of}: " + "; ".join(cells)


def allreduce_spans(rows: list[Row]) -> str:
    """Which allreduce ran at which token counts, with sglang's reason where it gave one."""
    spans: list[tuple[str, str, int, int]] = []
    for row in rows:
        if spans and spans[-1][0] == row.allreduce_name:
            name, why, low, _ = spans[-1]
            spans[-1] = (name, why, low, row.tokens)
        else:
            spans.append((row.allreduce_name, row.allreduce_why, row.tokens, row.tokens))
    parts = []
    for name, why, low, high in spans:
        where = estimate.tokens_text(low) if low == high else f"{low}-{high} tokens"
        parts.append(f"{name or 'allreduce'} at {where}" + (f" ({why})" if why else ""))
    return "; ".join(parts)


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
    columns = _columns(result.rows)
    for header in ("tokens", *(v.header or v.name for v in columns), "vs unfused", "max err"):
        table.add_column(header, justify="right", no_wrap=True)
    for row in result.rows:
        point = row.point
        error = max(row.max_abs_error.values())
        table.add_row(
            str(row.tokens),
            *(_cell(row.timings[v.name]) if v.name in row.timings else "—" for v in columns),
            Text(f"{point.delta_pct:+.1f} %", style=_COMPARE_STYLE[point.compare]),
            Text(f"{error:.3g}" + ("" if row.ok else " WRONG"), style="" if row.ok else "bold red"),
        )
    out.print(table)
    gpus = result.probe.get("gpus") or []
    names = sorted({f"{g['name']} (cc {g['capability'][0]}.{g['capability'][1]})" for g in gpus[: result.tp]})
    versions = result.versions
    baseline = result.baseline
    whose = "stand-ins (sglang's code did not run here)" if baseline.indicative else "sglang's own code"
    facts = [
        f"GPUs: {result.tp}× {', '.join(names)}",
        f"fused: {baseline.fused or 'FlashInfer allreduce_fusion'}; FlashInfer {versions.get('flashinfer')} "
        f"trtllm, arguments of {result.call.source}",
        f"unfused ({whose}): {allreduce_spans(result.rows)}; then {baseline.norm}",
        f"torch {versions.get('torch')} (CUDA {versions.get('torch_cuda')}), NCCL {versions.get('nccl')}, "
        f"driver {versions.get('driver')}",
        *result.notes,
    ]
    if any(v.name in row.timings for row in result.rows for v in _optional_launchable()):
        facts.append(fastest_line(result.rows))
    for fact in facts:
        put(out, Text(fact, style="dim"))
    if result.model is not None:
        _render_estimate(result, out)
    put(out, Text(crossover(result).text))
    put(out, Text(result.verdict.text, style=_KIND_STYLE[result.verdict.kind]))


def _columns(rows: list[Row]) -> list[Variant]:
    """The variants with a column (or a line in the plot) that some row measured."""
    return [v for v in variants() if v.column and (v.always or any(v.name in row.timings for row in rows))]


def crossover(result: BenchResult) -> Crossover:
    """Where fusion stops winning in ``result``, against the unfused side its verdict uses."""
    rows = [_row_json(r) for r in result.rows]
    baseline = {"indicative": result.baseline.indicative, "why": list(result.baseline.why)}
    return saved.crossover_of({"baseline": baseline, "rows": rows})


def _render_estimate(result: BenchResult, out: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    assert result.model is not None
    found = _steps(result)
    table = Table(
        title=f"per step, {result.model.sites} sites: allreduce + norm µs, fusion off / on", title_justify="left"
    )
    for header in ("tokens", "off", "on", "saved", ""):
        table.add_column(header, justify="right", no_wrap=True)
    for step in found:
        style = "green" if step.saved_pct >= 3 else "red" if step.saved_pct <= -3 else "dim"
        table.add_row(
            str(step.tokens),
            _us(step.off_us),
            _us(step.on_us),
            Text(f"{step.saved_us:+,.0f} µs", style=style),
            Text(f"{step.saved_pct:+.0f} %", style=style),
        )
    out.print(table)
    put(out, Text(estimate.summary(result.model, found), style="dim"))


def plot(result: BenchResult, path: Path) -> None:
    """Latency against tokens (both axes logarithmic), one line per path."""
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window
    import matplotlib.pyplot as plt

    tokens = [r.tokens for r in result.rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for variant in _columns(result.rows):
        timed = [r for r in result.rows if variant.name in r.timings]
        label = (variant.plot or variant.header or variant.name).format(baseline=result.baseline.describe())
        ax.plot([r.tokens for r in timed], [r.timings[variant.name].median_us for r in timed], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(tokens, [str(t) for t in tokens])
    ax.minorticks_off()
    ax.set_yscale("log")
    ax.set_xlabel("tokens")
    ax.set_ylabel("µs per call (median, slowest rank)")
    ax.set_title(f"TP {result.tp}, hidden {result.settings.hidden}, {result.settings.dtype}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    found = crossover(result)
    if found.limit is not None:
        ax.axvline(found.limit, color="grey", linestyle="--", linewidth=1)
        ax.annotate(
            f"fusion wins up to {found.limit}{' (indicative)' if found.indicative else ''}",
            (found.limit, 0.95),
            xycoords=("data", "axes fraction"),
            fontsize=7,
        )
    fig.text(0.01, 0.01, f"{found.text}\n{result.verdict.text}", fontsize=6, wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path)
    plt.close(fig)
