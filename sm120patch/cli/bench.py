"""``sm120patch bench kernel`` and ``bench server``: fused vs unfused, measured.  ``bench``
alone and ``bench --server``, what they were before, stay as aliases."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from sm120patch.cli import main
from sm120patch.cli.options import check_hidden, location_options, locators, parse_fuse_up_to, parse_tokens, plot_target
from sm120patch.cli.run import guarded, show_result


class _BenchGroup(click.Group):
    """``bench`` without a subcommand is ``bench kernel``, and ``bench --server`` is ``bench
    server``: what a user typed before the subcommands still runs, with a note saying so."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Shell completion parses resiliently, the word being typed left out: there `bench
        # <Tab>` must offer the subcommands, and a note would land in the user's prompt.
        completing = ctx.resilient_parsing
        if (args or not completing) and (not args or args[0] not in (*self.commands, *ctx.help_option_names)):
            new = "server" if "--server" in args else "kernel"
            old = "bench --server" if new == "server" else "bench"
            if not completing:
                click.echo(f"note: `sm120patch {old}` is now `sm120patch bench {new}`", err=True)
            args = [new, *(arg for arg in args if arg != "--server")]
        return super().parse_args(ctx, args)


class _BenchCommand(click.Command):
    """A bench that names the other bench when given one of its options (both were one
    command before the subcommands: ``--tokens`` with ``--server`` is the likely slip)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            group = ctx.parent.command if ctx.parent else None
            for name, other in getattr(group, "commands", {}).items():
                if name != self.name and any(exc.option_name in p.opts for p in other.params):
                    raise click.UsageError(f"{exc.option_name} belongs to `bench {name}`", ctx) from exc
            raise


def _config_names(value: str | None) -> tuple[str, ...] | None:
    from sm120patch.bench.server.configs import parse_names

    try:
        return None if value is None else parse_names(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--configs'") from None


@main.group(cls=_BenchGroup)
def bench() -> None:
    """Does fusion pay on this host?  Fused vs unfused allreduce + RMSNorm, measured
    (`bench kernel`), or end to end in sglang's own benchmark (`bench server`).  `bench`
    alone still means `bench kernel`, and `bench --server` means `bench server`."""


class _AllreduceRanks(click.IntRange):
    """``bench kernel --tp``: 2 or more, as its help says; a 1 is told which bench takes it."""

    def __init__(self) -> None:
        super().__init__(min=2)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as exc:
            if "not in the range" not in exc.message:
                raise
            self.fail(f"{exc.message.rstrip('.')} (an allreduce needs 2 ranks; --tp 1 only with `bench server`)")


def _shared_options(
    tp: str, hidden: str, layers: str, ranks: click.IntRange | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options both benches take (each says what --tp, --hidden and --layers mean to it,
    and ``ranks`` the --tp it takes: 1 or more unless given)."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(
            [
                location_options,
                click.option("--tp", type=ranks or click.IntRange(min=1), help=tp),
                click.option("--hidden", type=int, callback=check_hidden, help=hidden),
                click.option("--layers", type=click.IntRange(min=1), help=layers),
                click.option("--dtype", type=click.Choice(["bf16", "fp16"]), default="bf16", show_default=True),
                click.option(
                    "--timeout",
                    type=click.FloatRange(min=1),
                    default=300,
                    show_default=True,
                    help="Seconds a rank may spend in one phase before every rank is stopped (6x for the "
                    "first workspace, which may build FlashInfer's module).",
                ),
                click.option(
                    "--plot",
                    callback=plot_target,
                    help="Also draw latency against tokens to FILE.png or FILE.svg (needs matplotlib: "
                    "sm120patch[plot]).",
                ),
            ]
        ):
            func = option(func)
        return func

    return decorate


@bench.command(cls=_BenchCommand, short_help="Fused vs unfused allreduce + RMSNorm on this host's GPUs.")
@_shared_options(
    tp="Ranks (GPUs) to measure with (2 or more).  [default: every visible GPU]",
    hidden="The model's hidden size.  [default: --model-config's, else 7168]",
    layers="Estimate a step of a model with this many layers (with --hidden).",
    ranks=_AllreduceRanks(),
)
@click.option(
    "--tokens",
    default="1,2,4,8,16,32,64,128,256,512,1024,2048",
    show_default=True,
    callback=parse_tokens,
    help="Comma-separated token counts (batch sizes) to measure.",
)
@click.option(
    "--model-config",
    type=click.Path(path_type=Path, exists=True),
    help="A Hugging Face config.json (or its folder): measure at its hidden size and estimate a step of it.",
)
@click.option(
    "--baseline",
    type=click.Choice(["auto", "sglang", "stand-in"]),
    default="auto",
    show_default=True,
    help="What fusion is compared with: sglang's own allreduce and RMSNorm (sglang: or fail), named "
    "stand-ins (stand-in), or sglang's where it imports (auto).",
)
@click.option(
    "--disable-custom-all-reduce",
    "no_custom_allreduce",
    is_flag=True,
    help="Measure sglang as launched with --disable-custom-all-reduce (NCCL for every allreduce).",
)
@click.option(
    "--replays", type=click.IntRange(min=30), default=40, show_default=True, help="Timed CUDA-graph replays per size."
)
def kernel(
    python: str | None,
    sglang_path: Path | None,
    as_json: bool,
    tp: int | None,
    hidden: int | None,
    layers: int | None,
    dtype: str,
    timeout: float,
    plot: Path | None,
    tokens: tuple[int, ...],
    model_config: Path | None,
    baseline: str,
    no_custom_allreduce: bool,
    replays: int,
) -> None:
    """Measure fused vs unfused allreduce + RMSNorm on this host's GPUs, check the fused
    results, and say whether fusion pays.  Runs in the interpreter that serves sglang,
    one rank per GPU, with sglang's own parallel state, allreduce, RMSNorm and fused call
    where sglang imports; never creates a multicast object.  Exit 1 when a fused result is
    wrong or sglang declines to fuse, 2 when the host cannot run it (no torch, GPU,
    FlashInfer kernel or P2P)."""
    from sm120patch.bench.kernel import command

    python, sglang_path = locators(python, sglang_path)
    guarded(
        as_json,
        lambda: show_result(
            command.bench(
                python=python,
                sglang_path=sglang_path,
                as_json=as_json,
                tp=tp,
                tokens=tokens,
                hidden=hidden,
                dtype=dtype,
                replays=replays,
                timeout=timeout,
                plot=plot,
                model_config=model_config,
                layers=layers,
                baseline=baseline,
                custom_allreduce=not no_custom_allreduce,
            ),
            as_json,
        ),
    )


@bench.command(cls=_BenchCommand, short_help="sglang's own bench_one_batch, fusion off and on.")
@_shared_options(
    tp="Ranks (GPUs) to serve with (1 or more).  [default: every visible GPU]",
    hidden="The bundled model's hidden size.  [default: 7168]",
    layers="The bundled model's layers.  [default: 4]",
)
@click.option("--model-path", type=click.Path(path_type=Path), help="A local model dir (config.json only).")
@click.option("--batch-sizes", default="1,8,32,64", show_default=True, help="Decode batch sizes.")
@click.option("--input-len", type=click.IntRange(min=1), default=256, show_default=True, help="Prompt tokens.")
@click.option("--output-len", type=click.IntRange(min=2), default=64, show_default=True, help="Decode tokens.")
@click.option("--repeat", type=click.IntRange(min=1), default=2, show_default=True, help="Runs per mode.")
@click.option("--server-arg", "server_args", multiple=True, help="One more argument for sglang.")
@click.option(
    "--fuse-up-to",
    metavar="N|measured",
    callback=lambda ctx, param, value: parse_fuse_up_to(value),
    help="A third setting, fusion on up to N tokens (or the crossover bench saved: `measured`).",
)
@click.option(
    "--no-kernel",
    is_flag=True,
    help="Skip the kernel-level bench that runs beside it (same TP, hidden size and dtype).",
)
@click.option(
    "--configs",
    "config_names",
    metavar="A,B",
    callback=lambda ctx, param, value: _config_names(value),
    help="The configurations to run (default: every one this release and --tp take; sglang's default always "
    "runs): default, fusion, fusion-limit, pcie-ipc, pcie-ipc+fusion, pcie-ipc+fusion-limit.",
)
@click.option(
    "--plan",
    "plan_only",
    is_flag=True,
    help="Print the configurations it would run, each with its environment and bench_one_batch command "
    "line, and stop (no GPU needed; needs --tp).",
)
def server(
    python: str | None,
    sglang_path: Path | None,
    as_json: bool,
    tp: int | None,
    hidden: int | None,
    layers: int | None,
    dtype: str,
    timeout: float,
    plot: Path | None,
    model_path: Path | None,
    batch_sizes: str,
    input_len: int,
    output_len: int,
    repeat: int,
    server_args: tuple[str, ...],
    no_kernel: bool,
    fuse_up_to: int | str | None = None,
    config_names: tuple[str, ...] | None = None,
    plan_only: bool = False,
) -> None:
    """Run sglang's own offline benchmark (bench_one_batch) with fusion off and on, random
    weights, each run proven by counting the fused calls.  Exit 1 when a run did not do
    what it says, 2 when the host cannot run it."""
    from sm120patch.bench.server import command as bench_server

    python, sglang_path = locators(python, sglang_path)
    guarded(
        as_json,
        lambda: show_result(
            bench_server.bench_server(
                python=python,
                sglang_path=sglang_path,
                as_json=as_json,
                tp=tp,
                batch_sizes=batch_sizes,
                input_len=input_len,
                output_len=output_len,
                repeat=repeat,
                timeout=timeout,
                model_path=model_path,
                hidden=hidden or bench_server.BUNDLED_HIDDEN,
                layers=layers or bench_server.BUNDLED_LAYERS,
                dtype=dtype,
                server_args=server_args,
                plot=plot,
                kernel=not no_kernel,
                fuse_up_to=fuse_up_to,
                config_names=config_names,
                plan_only=plan_only,
            ),
            as_json,
        ),
    )
