"""``sm120patch bench server``: locate sglang, read its fusion options, run its own
benchmark with fusion off and on, show what it says."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from sm120patch.bench.shown import ShownBench, draw_plot
from sm120patch.errors import EnvironmentProblem, ToolError
from sm120patch.output.console import StatusLine
from sm120patch.runner.ranks import RankFailure
from sm120patch.sglang.options import pcie_ipc_option

BUNDLED_LAYERS = 4  # the bundled dummy model's layers, where --layers is not given
BUNDLED_HIDDEN = 7168  # and its hidden size, where --hidden is not given (the kernel bench's default too)
FUSION_WORDS = ("flashinfer-allreduce-fusion", "flashinfer_allreduce_fusion")


def parse_sizes(value: str) -> tuple[int, ...]:
    try:
        sizes = tuple(sorted({int(v) for v in value.split(",") if v.strip()}))
    except ValueError:
        raise EnvironmentProblem(
            f"--batch-sizes {value!r} is not a comma-separated list of batch sizes", code="usage"
        ) from None
    if not sizes or sizes[0] < 1:
        raise EnvironmentProblem(f"--batch-sizes {value!r}: batch sizes are whole numbers from 1", code="usage")
    return sizes


def bench_server(
    *,
    python: str | None,
    sglang_path: Path | None,
    as_json: bool,
    tp: int | None,
    batch_sizes: str,
    input_len: int,
    output_len: int,
    repeat: int,
    timeout: float,
    model_path: Path | None,
    hidden: int,
    layers: int,
    dtype: str,
    server_args: tuple[str, ...],
    plot: Path | None,
    kernel: bool,
    fuse_up_to: int | str | None = None,
    config_names: tuple[str, ...] | None = None,
    plan_only: bool = False,
) -> ShownBench:
    from sm120patch.bench.server import driver, render
    from sm120patch.runner.locate import default_python, locate
    from sm120patch.sglang.options import release_options

    if any(word in arg for arg in server_args for word in FUSION_WORDS):
        raise EnvironmentProblem(
            "--server-arg must not set fusion: bench server runs it off and on itself", code="usage"
        )
    sizes = parse_sizes(batch_sizes)
    tree = locate(python=python, sglang_path=sglang_path)
    limits: tuple[int | None, int | None] = (None, None)
    if fuse_up_to is not None:
        from sm120patch.bench.fuse_limit import server_limits

        limits = server_limits(tree, fuse_up_to, tp)
    settings = driver.Settings(
        python=default_python(tree, python),
        package_dir=tree.package_dir,
        version=tree.version,
        options=frozenset(release_options(tree)),
        tp=tp,
        batch_sizes=sizes,
        input_len=input_len,
        output_len=output_len,
        repeat=repeat,
        timeout=timeout,
        model_path=model_path,
        hidden=hidden,
        layers=layers,
        dtype=dtype,
        server_args=tuple(server_args),
        fuse_up_to=limits[0],
        sglang_limit=limits[1],
        config_names=config_names,
        pcie_ipc=pcie_ipc_option(tree),
    )
    if plan_only:
        from sm120patch.bench.server import plan

        if tp is None:
            raise EnvironmentProblem(
                "--plan needs --tp: without a GPU there is no count of them to default to", code="usage"
            )
        data = plan.plan(settings)
        return ShownBench(data, lambda out: plan.render(data, out), 0)
    status = StatusLine(not as_json and sys.stderr.isatty(), "asking the serving interpreter for its GPUs")
    with status:
        result = driver.run(settings, status.update)
        beside = kernel_beside(result, tree, status.update) if kernel else None
    problem = draw_plot(render.plot, result, plot) if plot is not None and result.rows else None

    def text(out: Any) -> None:
        render.render(result, out)
        _render_kernel(beside, out)

    return ShownBench(dict(render.to_json(result), kernel=_kernel_json(beside)), text, result.exit_code, problem)


def kernel_beside(result: Any, tree: Any, on_status: Any) -> Any:
    """The kernel-level bench at the same TP, hidden size and dtype, over the decode batch
    sizes (a decode step's tokens): a ``BenchResult``, or why there is none (a string)."""
    from sm120patch.bench.kernel import measure
    from sm120patch.bench.kernel.command import keep_off
    from sm120patch.bench.kernel.estimate import FUSION_MAX_TOKENS
    from sm120patch.sglang.fusion_call import read_call
    from sm120patch.sglang.options import release_options

    tp = result.settings.tp
    if not tp or tp < 2:
        return f"no kernel-level figures at TP {tp}: an allreduce needs 2 ranks"
    tokens = tuple(size for size in result.settings.batch_sizes if size <= FUSION_MAX_TOKENS)
    if not tokens:
        return f"no kernel-level figures: sglang fuses only batches of 1 to {FUSION_MAX_TOKENS} tokens"
    on_status(f"kernel-level bench at TP {tp}, hidden {result.model.hidden}")
    settings = measure.Settings(
        result.settings.python,
        tp,
        tokens,
        result.model.hidden,
        result.settings.dtype,
        result.settings.timeout,
        pcie_ipc=pcie_ipc_option(tree),
    )
    try:
        return measure.run(
            settings,
            read_call(tree.package_dir, tree.version),
            keep_off(release_options(tree)),
            sglang_version=tree.version,
        )
    except (ToolError, RankFailure) as exc:  # the server's answer stands; say why this one is missing
        return f"no kernel-level figures: {exc}"


def _kernel_json(beside: Any) -> Any:
    from sm120patch.bench.kernel import render as kernel_render

    if beside is None or isinstance(beside, str):
        return {"error": beside} if beside else None
    return kernel_render.to_json(beside)


def _render_kernel(beside: Any, out: Any) -> None:
    from rich.text import Text

    from sm120patch.bench.kernel import render as kernel_render
    from sm120patch.bench.server.render import WIDTH
    from sm120patch.output.lines import put

    if beside is None:
        return
    heading = "kernel level, same TP, hidden size and dtype (sm120patch bench kernel):"
    put(out, Text(heading, style="bold"), width=WIDTH)
    if isinstance(beside, str):
        put(out, Text(beside, style="dim"), width=WIDTH)
    else:
        kernel_render.render(beside, out)
