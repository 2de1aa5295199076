"""``sm120patch bench --server``: locate sglang, read its fusion options, run its own
benchmark with fusion off and on, show what it says."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from sm120patch.commands.bench import check_plot_folder, draw_plot, with_problem
from sm120patch.errors import EnvironmentProblem, ExitCode

#: Options that belong to the kernel bench only, and to --server only (for a clear refusal).
KERNEL_ONLY = ("tokens", "replays", "model_config", "baseline", "no_custom_allreduce")
SERVER_ONLY = ("model_path", "batch_sizes", "input_len", "output_len", "repeat", "server_args")
BUNDLED_LAYERS = 4  # the bundled dummy model's layers, where --layers is not given
BUNDLED_HIDDEN = 7168  # and its hidden size, where --hidden is not given (the kernel bench's default too)
FUSION_WORDS = ("flashinfer-allreduce-fusion", "flashinfer_allreduce_fusion")


def wrong_options(server: bool, given: set[str]) -> str | None:
    """Why options of the other kind of bench, given explicitly, are refused; None if none."""
    wrong = sorted(given & set(KERNEL_ONLY if server else SERVER_ONLY))
    if not wrong:
        return None
    names = ", ".join("--" + name.replace("_", "-") for name in wrong)
    other = "the kernel bench (without --server)" if server else "bench --server"
    return f"{names} belong{'s' if len(wrong) == 1 else ''} to {other}"


def parse_sizes(value: str) -> tuple[int, ...]:
    try:
        sizes = tuple(sorted({int(v) for v in value.split(",") if v.strip()}))
    except ValueError:
        raise EnvironmentProblem(f"--batch-sizes {value!r} is not a comma-separated list of batch sizes") from None
    if not sizes or sizes[0] < 1:
        raise EnvironmentProblem(f"--batch-sizes {value!r}: batch sizes are whole numbers from 1")
    return sizes


def bench_server(
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
) -> int:
    from sm120patch.bench.server import driver, render
    from sm120patch.doctor import launch as doctor
    from sm120patch.locate.tree import locate

    if plot is not None:
        render.check_plot_target(plot)
        check_plot_folder(plot)
    if any(word in arg for arg in server_args for word in FUSION_WORDS):
        raise EnvironmentProblem("--server-arg must not set fusion: bench --server runs it off and on itself")
    sizes = parse_sizes(batch_sizes)
    tree = locate(python=python, sglang_path=sglang_path)
    settings = driver.Settings(
        python=doctor.default_python(tree, python),
        package_dir=tree.package_dir,
        version=tree.version,
        options=frozenset(doctor.release_options(tree)),
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
    )
    status = _Status(enabled=not as_json and sys.stderr.isatty())
    with status:
        result = driver.run(settings, status.update)
    problem = draw_plot(render.plot, result, plot) if plot is not None and result.rows else None
    if as_json:
        from sm120patch.report.as_json import print_json

        print_json(with_problem(render.to_json(result), problem))
    else:
        from sm120patch.report.as_text import console, error

        render.render(result, console())
        if problem:
            error(problem)
    return int(ExitCode.ENVIRONMENT) if problem else int(result.exit_code)


class _Status:
    """What sglang is doing, as a rich status line on stderr (on a terminal only)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._status: Any = None

    def __enter__(self) -> _Status:
        if self.enabled:
            from sm120patch.report.as_text import console

            self._status = console().status("asking the serving interpreter for its GPUs")
            self._status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(None, None, None)

    def update(self, text: str) -> None:
        if self._status is not None:
            self._status.update(text)
