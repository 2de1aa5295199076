"""The ``sm120patch`` command line (click): options in, an outcome rendered out.

Exit codes (``errors.ExitCode``): 0 ok, 1 not as asked, 2 usage or environment, 70 a bug,
130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sm120patch import __version__
from sm120patch.errors import ExitCode, ToolError
from sm120patch.sglang.releases import FIRST_SUPPORTED, LAST_KNOWN

if TYPE_CHECKING:  # the modules behind the commands load when a command runs, not for --help
    from click.shell_completion import CompletionItem

    from sm120patch.patcher.outcome import Outcome
    from sm120patch.sglang.tree import SglangTree

PYTHON_HELP = "Interpreter (or venv / conda env root) of the environment that serves sglang."
PATH_HELP = "The sglang package directory itself (site-packages/sglang, or a checkout's python/sglang)."


def _complete_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Patch ids for ``--only`` / ``--skip``, completing the last of a comma-separated list."""
    from click.shell_completion import CompletionItem

    from sm120patch.patcher.plan.registry import all_patches

    done, _, last = incomplete.rpartition(",")
    prefix = f"{done}," if done else ""
    taken = set(done.split(","))
    return [
        CompletionItem(prefix + p.id, help=p.summary)
        for p in all_patches()
        if p.id.startswith(last) and p.id not in taken
    ]


def _ids(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
    """``--only`` / ``--skip`` as a list of ids, checked before sglang is looked for: an empty
    list is a usage error (not "every patch"), and so is a selection ``select`` refuses."""
    ids = None if value is None else [v.strip() for v in value.split(",") if v.strip()]
    if ids == []:
        raise click.BadParameter(f"{value!r} names no patch; give comma-separated ids (`sm120patch list` shows them)")
    other = "skip" if param.name == "only" else "only"
    if other in ctx.params and (ids or ctx.params[other]):  # the second of the two: check them together
        from sm120patch.patcher.plan.registry import SelectionError, select

        only, skip = (ids, ctx.params[other]) if param.name == "only" else (ctx.params[other], ids)
        try:
            select(only or [], skip or [])
        except SelectionError as exc:
            raise click.UsageError(str(exc)) from exc
    return ids


def _absolute(ctx: click.Context, param: click.Parameter, value: str | Path | None) -> Any:
    """A path option (or its variable) as the user meant it, against their working directory:
    the probes run in a scratch one.  Made absolute, not resolved (a venv's python is a link)."""
    if value is None or value == "":
        return None
    absolute = os.path.abspath(value)
    return Path(absolute) if isinstance(value, Path) else absolute


def _location_options(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")(func)
    func = click.option(
        "--sglang-path",
        type=click.Path(path_type=Path, file_okay=False),
        envvar="SM120PATCH_SGLANG_PATH",
        show_envvar=True,
        callback=_absolute,
        help=PATH_HELP,
    )(func)
    return click.option(
        "--python",
        "python",
        metavar="PATH",
        envvar="SM120PATCH_PYTHON",
        show_envvar=True,
        callback=_absolute,
        help=PYTHON_HELP,
    )(func)


TIMEOUT_HELP = (
    "Seconds each step in the serving interpreter may take (looking for sglang with --python, "
    "nvidia-smi, doctor's host facts, verify --runtime's imports: 120 s unless given)."
)
#: verify --runtime imports sglang's patched modules: 17-25 s on a GPU host with a cold cache
#: (sglang 0.5.13 on an H200), past the 20 s other steps get.
RUNTIME_IMPORT_S = 120.0


def _timeout_option(func: Callable[..., Any]) -> Callable[..., Any]:
    from sm120patch.runner import DEFAULT_TIMEOUT_S

    return click.option(
        "--timeout", type=click.FloatRange(min=1), default=DEFAULT_TIMEOUT_S, show_default=True, help=TIMEOUT_HELP
    )(func)


def _locators(python: str | None, sglang_path: Path | None) -> tuple[str | None, Path | None]:
    """``--python`` or ``--sglang-path``, not both; one that comes from the environment
    (``SM120PATCH_PYTHON``, as the Docker example sets it) gives way to the other given on
    the command line."""
    if python and sglang_path:
        from click.core import ParameterSource

        ctx = click.get_current_context()
        from_env = {n for n in ("python", "sglang_path") if ctx.get_parameter_source(n) is ParameterSource.ENVIRONMENT}
        if from_env == {"python"}:
            return None, sglang_path
        if from_env == {"sglang_path"}:
            return python, None
        if from_env:
            raise click.UsageError(
                "SM120PATCH_PYTHON and SM120PATCH_SGLANG_PATH are both set: unset one, "
                "or give --python or --sglang-path on the command line"
            )
        raise click.UsageError("give either --python or --sglang-path, not both")
    return python, sglang_path


def _fail(message: str, code: int, as_json: bool) -> None:
    from sm120patch.output import console as out

    if as_json:
        out.print_json(out.error_json(message, code))
    out.error(message)


def _guarded(as_json: bool, run: Callable[[], int], interrupted: Callable[[], str] | None = None) -> None:
    """Run a command body; turn the errors a user can act on into their exit codes, a bug
    into exit 70 with its traceback, and Ctrl-C into exit 130 with ``interrupted()``: what
    it left behind."""
    ctx = click.get_current_context()
    try:
        code = run()
    except KeyboardInterrupt:
        _fail(interrupted() if interrupted else INTERRUPTED, ExitCode.INTERRUPTED, as_json)
        code = ExitCode.INTERRUPTED
    except ToolError as exc:
        _fail(str(exc), exc.exit_code, as_json)
        code = exc.exit_code
    except OSError as exc:  # an unreadable file or directory met while reading
        _fail(f"{exc.filename or ''}: {exc.strerror or exc}", ExitCode.ENVIRONMENT, as_json)
        code = ExitCode.ENVIRONMENT
    except Exception as exc:
        import traceback

        traceback.print_exc()
        _fail(
            f"internal error ({type(exc).__name__}: {exc}); this is a bug in sm120patch {__version__}",
            ExitCode.INTERNAL,
            as_json,
        )
        code = ExitCode.INTERNAL
    ctx.exit(int(code))


#: What Ctrl-C leaves behind in a command that writes nothing (doctor, bench, demo's scratch).
INTERRUPTED = "interrupted; nothing was written"


def _tree_command(func: Callable[..., Outcome]) -> Callable[..., None]:
    """A command that locates sglang, runs ``func`` on it and renders the outcome."""
    takes_timeout = "timeout" in func.__code__.co_varnames[: func.__code__.co_argcount]  # not inspect: 4 ms

    @_location_options
    @_timeout_option
    @functools.wraps(func)
    def wrapper(python: str | None, sglang_path: Path | None, as_json: bool, timeout: float, **kwargs: Any) -> None:
        python, sglang_path = _locators(python, sglang_path)
        located: list[SglangTree] = []  # for what an interrupt says

        def run() -> int:
            from sm120patch.output import console as out
            from sm120patch.patcher.render import as_json as machine
            from sm120patch.patcher.render import as_text
            from sm120patch.runner.locate import locate

            tree = locate(python=python, sglang_path=sglang_path, timeout=timeout)
            located.append(tree)
            if takes_timeout:
                kwargs["timeout"] = timeout
            outcome = func(tree=tree, **kwargs)
            if as_json:
                out.print_json(machine.to_json(outcome))
            else:
                as_text.render(outcome, show_docs=kwargs.get("docs", False), dry_run=kwargs.get("dry_run", False))
                if kwargs.get("dry_run"):
                    as_text.print_diff(outcome.diff)
            return outcome.exit_code

        def interrupted() -> str:
            from sm120patch.patcher.commands.saved_state import interrupted_note

            return interrupted_note(located[0] if located else None)

        _guarded(as_json, run, interrupted)

    return wrapper


VERSION_MESSAGE = (
    f"%(prog)s %(version)s — patches sglang {FIRST_SUPPORTED} to {LAST_KNOWN} (newer releases are "
    "checked by structure), refuses older ones"
)


class _Cli(click.Group):
    """click's group, with one contract for errors: a usage error exits 2 and, under
    ``--json``, also prints the JSON error object on stdout, like every other error."""

    def main(  # always standalone: it exits, with one contract for errors
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        from sm120patch.runner import allow_probes

        # A Ctrl-C ends the probes of its own command only (main may run again in one process).
        allow_probes()
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            if "--json" in argv:
                from sm120patch.output import console as out

                out.print_json(out.error_json(exc.format_message(), ExitCode.ENVIRONMENT))
            _show_usage_error(exc)
            sys.exit(ExitCode.ENVIRONMENT)
        except click.Abort:  # Ctrl-C outside a command's body (click turns it into Abort)
            if "--json" in argv:
                from sm120patch.output import console as out

                out.print_json(out.error_json(INTERRUPTED, ExitCode.INTERRUPTED))
            click.echo(f"error: {INTERRUPTED}", err=True)
            sys.exit(ExitCode.INTERRUPTED)
        sys.exit(code if isinstance(code, int) else 0)


def _show_usage_error(exc: click.ClickException) -> None:
    """click's own text for ``exc``, printed as the report prints its lines (output/lines.py)."""
    import io

    from sm120patch.output import console as out

    shown = io.StringIO()
    exc.show(file=shown)
    out.usage_error(shown.getvalue())


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="sm120patch", message=VERSION_MESSAGE)
def main() -> None:
    """Let SGLang's FlashInfer allreduce fusion run on SM120 Blackwell GPUs
    (RTX PRO 6000, RTX 5090), by patching the installed sglang in place, reversibly.

    \b
      sm120patch apply    back up, patch, print the verification report
      sm120patch verify   after an upgrade, at container start (exit 0 = patched)
      sm120patch revert   restore the original files byte for byte
      sm120patch doctor   what else stands between this host and the fused kernel
      sm120patch bench    does fusion pay on this host? fused vs unfused, measured
      sm120patch list     the patches and their state in this sglang
      sm120patch demo     the whole cycle on a downloaded release, in a temp dir

    Exit codes: 0 ok, 1 not as asked (drift, refused release, changed files),
    2 usage or environment error (no sglang found, read-only tree), 70 a bug,
    130 interrupted (Ctrl-C).
    """


@main.command()
@_tree_command
@click.option(
    "--only",
    metavar="IDS",
    callback=_ids,
    shell_complete=_complete_ids,
    help="Comma-separated patch ids; their dependencies are pulled in.",
)
@click.option(
    "--skip", metavar="IDS", callback=_ids, shell_complete=_complete_ids, help="Comma-separated patch ids to leave out."
)
@click.option("--dry-run", is_flag=True, help="Write nothing; print the unified diff.")
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 and write nothing when the fused path would still not run (FlashInfer "
    "without the SM12x kernel, an SM check no patch owns); for image builds.",
)
@click.option(
    "--allow-missing-kernel",
    is_flag=True,
    help="Write even though the FlashInfer beside sglang has no SM12x allreduce kernel (fusion would "
    "then stop sglang <= 0.5.9 from starting, and change nothing in later releases).",
)
@click.option(
    "--fuse-up-to",
    metavar="N|measured",
    callback=lambda ctx, param, value: _fuse_up_to(value),
    help="Also lower sglang's fusion token limit to N tokens, or to the crossover the last `sm120patch bench` "
    "saved for this tree (`measured`); never above sglang's own.",
)
@click.option(
    "--tp", type=click.IntRange(min=2), help="With --fuse-up-to measured: the TP sglang serves at (refuses another)."
)
def apply(
    tree: SglangTree,
    only: list[str] | None,
    skip: list[str] | None,
    dry_run: bool,
    strict: bool,
    allow_missing_kernel: bool,
    timeout: float,
    fuse_up_to: int | str | None = None,
    tp: int | None = None,
) -> Outcome:
    """Back up and patch the located sglang (a second run is a no-op).  Refuses while the
    FlashInfer beside it lacks the SM12x kernel (--allow-missing-kernel)."""
    from sm120patch.bench.fuse_limit import asked_limit
    from sm120patch.patcher.commands.apply import apply as apply_tree
    from sm120patch.patcher.plan.registry import select

    patches, notes = select(only or [], skip or []) if only or skip else (None, [])
    token_limit = asked_limit(tree, fuse_up_to, tp)
    return apply_tree(
        tree,
        patches,
        dry_run=dry_run,
        notes=notes,
        strict=strict,
        allow_missing_kernel=allow_missing_kernel,
        timeout=timeout,
        token_limit=token_limit,
    )


def _fuse_up_to(value: str | None) -> int | str | None:
    from sm120patch.bench.fuse_limit import parse

    try:
        return None if value is None else parse(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a token count of 1 or more nor `measured`") from None


@main.command()
@_tree_command
@click.option(
    "--runtime",
    is_flag=True,
    help="Also import the patched modules in the serving interpreter (needs torch there) and "
    "report the SM120 probe and each module's SM flags.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 on any warning about the fused path (an SM check no patch owns, FlashInfer without the SM12x kernel).",
)
def verify(tree: SglangTree, runtime: bool, strict: bool, timeout: float) -> Outcome:
    """Report each patch as applied / pending / drift, with file:line evidence."""
    from sm120patch.patcher.commands.verify import verify as verify_tree

    source = click.get_current_context().get_parameter_source("timeout")
    given = source is not click.core.ParameterSource.DEFAULT
    runtime_timeout = (timeout if given else RUNTIME_IMPORT_S) if runtime else None
    return verify_tree(tree, runtime_timeout=runtime_timeout, strict=strict)


@main.command()
@_tree_command
@click.option(
    "--force", is_flag=True, help="Restore even files changed since apply (their current content is kept aside)."
)
@click.option("--dry-run", is_flag=True, help="Write nothing; print the diff that revert would apply.")
def revert(tree: SglangTree, force: bool, dry_run: bool) -> Outcome:
    """Restore every patched file from its backup, then remove the saved state."""
    from sm120patch.patcher.commands.revert import revert as revert_tree

    return revert_tree(tree, force=force, dry_run=dry_run)


@main.command(name="list")
@_tree_command
@click.option("--docs", is_flag=True, help="Also print each patch's description and where it looks.")
def list_(tree: SglangTree, docs: bool) -> Outcome:
    """The patches, what each does, and its state in the located sglang."""
    from sm120patch.patcher.commands.listing import list_patches

    return list_patches(tree)


@main.command()
@_location_options
@_timeout_option
@click.option("--tp", type=click.IntRange(min=1), help="The tensor-parallel size you serve with.")
def doctor(python: str | None, sglang_path: Path | None, as_json: bool, timeout: float, tp: int | None) -> None:
    """Read-only: what stands between this host and a running fused allreduce (GPUs,
    patches, FlashInfer's SM12x kernel, P2P, multicast, GPUDirect RDMA, launch flags).
    Exit 1 when any finding is an error, 2 when no sglang is found (the host checks still run)."""
    python, sglang_path = _locators(python, sglang_path)
    from sm120patch.doctor import render
    from sm120patch.doctor.diagnose import diagnose
    from sm120patch.doctor.host import read_host
    from sm120patch.output import console as out
    from sm120patch.patcher.states import tree_states
    from sm120patch.runner.locate import default_python, locate

    def run() -> int:
        tree, problem = None, None
        try:
            tree = locate(python=python, sglang_path=sglang_path, timeout=timeout)
        except ToolError as exc:  # no sglang: the host checks still run, then exit 2
            problem = str(exc)
        states, sm_checks = tree_states(tree) if tree is not None else ({}, [])
        host = read_host(default_python(tree, python), timeout=timeout)
        result = diagnose(tree, problem, states, host, tp, sm_checks)
        code = ExitCode.ENVIRONMENT if problem else result.exit_code
        if as_json:
            data = render.doctor_json(tree, result)
            if problem:  # the error object's keys, beside the findings
                data.update(ok=False, exit_code=int(code), error=problem)
            out.print_json(data)
        else:
            render.render_doctor(result)
        return int(code)

    _guarded(as_json, run)


def _tokens(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    from sm120patch.sglang.fusion_call import REFERENCE_CALL

    limit = REFERENCE_CALL["max_token_num"]
    try:
        tokens = sorted({int(v) for v in _tokens_items(value)})
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of token counts") from None
    if not tokens or tokens[0] < 1 or tokens[-1] > limit:
        raise click.BadParameter(f"token counts go from 1 to {limit} (sglang fuses only batches of 1..{limit})")
    return tuple(tokens)


def _plot_target(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    """A --plot that cannot be written is refused before minutes are spent measuring."""
    if value is None:
        return None
    path = Path(value)
    if not value or not path.stem or path.name.startswith("."):
        raise click.BadParameter(f"{value!r} names no file: give FILE.png or FILE.svg")
    if path.suffix.lower() not in (".png", ".svg"):
        raise click.BadParameter(f"{value}: the file must end in .png or .svg")
    folder = path.parent
    if not folder.is_dir():
        raise click.BadParameter(f"{value}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise click.BadParameter(f"{value}: cannot write there")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise click.BadParameter("--plot needs matplotlib: pip install 'sm120patch[plot]'") from None
    return path


def _tokens_items(value: str) -> list[str]:
    items = [v.strip() for v in value.split(",")]
    if any(not item for item in items):
        raise click.BadParameter(f"{value!r} has an empty item: give comma-separated whole numbers")
    return items


def _hidden(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and (value < 8 or value % 8):
        raise click.BadParameter(f"{value}: the hidden size must be a positive multiple of 8 (16-byte rows)")
    return value


@main.command()
@_location_options
@click.option(
    "--tp",
    type=click.IntRange(min=1),
    help="Ranks (GPUs) to measure with (2 or more; --server: 1 or more).  [default: every visible GPU]",
)
@click.option(
    "--tokens",
    default="1,2,4,8,16,32,64,128,256,512,1024,2048",
    show_default=True,
    callback=_tokens,
    help="Comma-separated token counts (batch sizes) to measure.",
)
@click.option(
    "--hidden", type=int, callback=_hidden, help="The model's hidden size.  [default: --model-config's, else 7168]"
)
@click.option(
    "--model-config",
    type=click.Path(path_type=Path, exists=True),
    help="A Hugging Face config.json (or its folder): measure at its hidden size and estimate a step of it.",
)
@click.option(
    "--layers",
    type=click.IntRange(min=1),
    help="Estimate a step of a model with this many layers (with --hidden); --server: the bundled model's "
    "layers.  [default with --server: 4]",
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
@click.option("--dtype", type=click.Choice(["bf16", "fp16"]), default="bf16", show_default=True)
@click.option(
    "--replays", type=click.IntRange(min=30), default=40, show_default=True, help="Timed CUDA-graph replays per size."
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=300,
    show_default=True,
    help="Seconds a rank may spend in one phase before every rank is stopped (6x for the first "
    "workspace, which may build FlashInfer's module).",
)
@click.option(
    "--plot",
    callback=_plot_target,
    help="Also draw latency against tokens to FILE.png or FILE.svg (needs matplotlib: sm120patch[plot]).",
)
@click.option(
    "--server",
    is_flag=True,
    help="Run sglang's own offline benchmark (bench_one_batch) with fusion off and on instead, random weights.",
)
@click.option("--model-path", type=click.Path(path_type=Path), help="--server: a local model dir (config.json only).")
@click.option("--batch-sizes", default="1,8,32,64", show_default=True, help="--server: decode batch sizes.")
@click.option("--input-len", type=click.IntRange(min=1), default=256, show_default=True, help="--server: prompt.")
@click.option("--output-len", type=click.IntRange(min=2), default=64, show_default=True, help="--server: decode.")
@click.option("--repeat", type=click.IntRange(min=1), default=2, show_default=True, help="--server: runs per mode.")
@click.option("--server-arg", "server_args", multiple=True, help="--server: one more argument for sglang.")
@click.option(
    "--fuse-up-to",
    metavar="N|measured",
    callback=lambda ctx, param, value: _fuse_up_to(value),
    help="--server: a third setting, fusion on up to N tokens (or the crossover bench saved: `measured`).",
)
@click.option(
    "--no-kernel",
    is_flag=True,
    help="--server: skip the kernel-level bench that runs beside it (same TP, hidden size and dtype).",
)
def bench(
    python: str | None,
    sglang_path: Path | None,
    as_json: bool,
    tp: int | None,
    tokens: tuple[int, ...],
    hidden: int | None,
    model_config: Path | None,
    layers: int | None,
    baseline: str,
    no_custom_allreduce: bool,
    dtype: str,
    replays: int,
    timeout: float,
    plot: Path | None,
    server: bool,
    model_path: Path | None,
    batch_sizes: str,
    input_len: int,
    output_len: int,
    repeat: int,
    server_args: tuple[str, ...],
    no_kernel: bool,
    fuse_up_to: int | str | None = None,
) -> None:
    """Measure fused vs unfused allreduce + RMSNorm on this host's GPUs, check the fused
    results, and say whether fusion pays.  Runs in the interpreter that serves sglang,
    one rank per GPU, with sglang's own parallel state, allreduce, RMSNorm and fused call
    where sglang imports; never creates a multicast object.  Exit 1 when a fused result is
    wrong or sglang declines to fuse, 2 when the host cannot run it (no torch, GPU,
    FlashInfer kernel or P2P).  With --server: sglang's own bench_one_batch, fusion off
    and on, each run proven by counting the fused calls (exit 1 when a run did not do
    what it says)."""
    from sm120patch.bench.kernel import command
    from sm120patch.bench.server import command as bench_server

    python, sglang_path = _locators(python, sglang_path)
    ctx = click.get_current_context()
    given = {name for name in ctx.params if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE}
    wrong = bench_server.wrong_options(server, given)
    if wrong:
        raise click.UsageError(wrong)
    if server:
        _guarded(
            as_json,
            lambda: bench_server.bench_server(
                python,
                sglang_path,
                as_json,
                tp,
                batch_sizes,
                input_len,
                output_len,
                repeat,
                timeout,
                model_path,
                hidden or bench_server.BUNDLED_HIDDEN,
                layers or bench_server.BUNDLED_LAYERS,
                dtype,
                server_args,
                plot,
                kernel=not no_kernel,
                fuse_up_to=fuse_up_to,
            ),
        )
        return
    if tp == 1:
        raise click.BadParameter(
            "1 is not in the range x>=2 (an allreduce needs 2 ranks; --tp 1 only with --server)", param_hint="'--tp'"
        )
    _guarded(
        as_json,
        lambda: command.bench(
            python,
            sglang_path,
            as_json,
            tp,
            tokens,
            hidden,
            dtype,
            replays,
            timeout,
            plot,
            model_config=model_config,
            layers=layers,
            baseline=baseline,
            custom_allreduce=not no_custom_allreduce,
        ),
    )


@main.command()
@click.option(
    "--sglang-version", "version", default=None, help="Release to download (default: the pinned demo release)."
)
@click.option(
    "--wheel",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Use this sglang wheel instead of downloading.",
)
@click.option("--keep", is_flag=True, help="Keep the scratch directory and print where it is.")
def demo(version: str | None, wheel: Path | None, keep: bool) -> None:
    """No sglang here? Download a real release (no dependencies) into a temp dir and run
    apply -> verify -> apply again -> revert on it, with the full report."""
    from sm120patch.patcher.commands.demo import run_demo

    _guarded(False, lambda: run_demo(version, wheel, keep))
