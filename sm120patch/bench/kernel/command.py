"""``sm120patch bench kernel``: locate sglang (for the call to mirror), measure, show."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sm120patch.bench.kernel.estimate import Model, read_config
from sm120patch.bench.kernel.measure import BaselineChoice, Settings, run
from sm120patch.bench.kernel.verdict import KEEP_OFF_DEFAULT
from sm120patch.bench.shown import ShownBench, draw_plot
from sm120patch.errors import EnvironmentProblem, NotAsAsked, ToolError
from sm120patch.output.console import StatusLine
from sm120patch.patcher.exports import AUTO_ENABLE_OFF
from sm120patch.runner import ranks
from sm120patch.sglang.fusion_call import read_call
from sm120patch.sglang.options import HATCH, pcie_ipc_option

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_HIDDEN = 7168  # DeepSeek-V3's, the model family this tool was first written for


def keep_off(options: set[str] | None) -> str:
    """How to keep fusion off in this release: its escape hatch where it has one."""
    if options is None:
        return KEEP_OFF_DEFAULT
    if HATCH in options:
        return f"`{HATCH}` / {AUTO_ENABLE_OFF}"
    return f"launch without `--enable-flashinfer-allreduce-fusion` / {AUTO_ENABLE_OFF}"


def model_for(config: Path | None, layers: int | None, hidden: int | None) -> Model | None:
    """The model the per-step estimate is for: a config.json, or --layers (with --hidden)."""
    if config is not None:
        model = read_config(config)
        if hidden is not None and hidden != model.hidden:
            raise EnvironmentProblem(
                f"--hidden {hidden} contradicts --model-config (hidden size {model.hidden})", code="usage"
            )
        return replace(model, layers=layers) if layers else model
    if layers is not None:
        return Model(layers, hidden or DEFAULT_HIDDEN, None, "--layers/--hidden")
    return None


def bench(
    *,
    python: str | None,
    sglang_path: Path | None,
    as_json: bool,
    tp: int | None,
    tokens: tuple[int, ...],
    hidden: int | None,
    dtype: str,
    replays: int,
    timeout: float,
    plot: Path | None,
    model_config: Path | None = None,
    layers: int | None = None,
    baseline: str = "auto",
    custom_allreduce: bool = True,
) -> ShownBench:
    from sm120patch.bench.kernel import render
    from sm120patch.runner.locate import default_python, locate
    from sm120patch.sglang.options import release_options

    model = model_for(model_config, layers, hidden)
    width = model.hidden if model else hidden or DEFAULT_HIDDEN
    tree = None
    try:
        tree = locate(python=python, sglang_path=sglang_path)
    except ToolError:  # bench measures FlashInfer; without sglang it mirrors the newest call read
        if sglang_path is not None:
            raise
    settings = Settings(
        default_python(tree, python),
        tp,
        tokens,
        width,
        dtype,
        timeout,
        replays=replays,
        baseline=BaselineChoice(baseline),
        custom_allreduce=custom_allreduce,
        pcie_ipc=bool(tree and pcie_ipc_option(tree)),
    )
    call = read_call(tree.package_dir if tree else None, tree.version if tree else None)
    hatch = keep_off(release_options(tree) if tree else None)
    progress = StatusLine(enabled=not as_json and sys.stderr.isatty(), first="starting the ranks")

    def on_event(rank: int, event: dict[str, Any]) -> None:
        text = phase_text(rank, event)
        if text is not None:
            progress.update(text)

    try:
        with progress:
            result = run(settings, call, hatch, on_event, tree.version if tree else None, model)
    except ranks.RankFailure as exc:
        if exc.kind is ranks.FailureKind.TIMEOUT:
            raise EnvironmentProblem(f"bench stopped: {exc}", code="usage") from exc
        raise NotAsAsked(f"bench failed: {exc}", code="usage") from exc
    # The plot first: a --plot that cannot be written is said in the one JSON object, beside
    # the measurements, and is exit 2.
    problem = draw_plot(render.plot, result, plot) if plot is not None else None
    data = render.to_json(result)
    kept = keep_result(tree, data)

    def text(out: Console) -> None:
        from rich.text import Text

        from sm120patch.output.lines import put

        render.render(result, out)
        put(out, Text(kept, style="dim"))

    return ShownBench(data, text, result.exit_code, problem)


def keep_result(tree: Any, data: dict[str, Any]) -> str:
    """Save ``data`` as the tree's last bench result (``apply --fuse-up-to measured``); the
    sentence saying where, also put in ``data`` as ``kept``."""
    from sm120patch.bench.kernel import saved

    if tree is None:
        line = "the result is not kept for `apply --fuse-up-to measured`: no sglang located"
        data["kept"] = None
        return line
    problem = saved.save(tree, data)
    path = str(saved.path(tree))
    data["kept"] = None if problem else path
    return problem or f"kept for `sm120patch apply --fuse-up-to measured`: {path}"


def phase_text(rank: int, event: dict[str, Any]) -> str | None:
    """Rank 0's phase as words for the status line; None for anything else."""
    if rank != 0 or event.get("event") != "phase":
        return None
    phase = str(event.get("phase"))
    if phase == "workspace":
        return "creating FlashInfer's workspace (the first run builds its trtllm_comm module: minutes)"
    if phase.startswith("tokens"):
        return f"measuring {phase} ({int(event.get('index', 0)) + 1}/{event.get('total')})"
    return phase
