"""The options several commands share, and the callbacks that check an option's value
before anything runs."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

PYTHON_HELP = "Interpreter (or venv / conda env root) of the environment that serves sglang."
PATH_HELP = "The sglang package directory itself (site-packages/sglang, or a checkout's python/sglang)."


def complete_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
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


def parse_ids(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
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


def absolute_path(ctx: click.Context, param: click.Parameter, value: str | Path | None) -> Any:
    """A path option (or its variable) as the user meant it, against their working directory:
    the probes run in a scratch one.  Made absolute, not resolved (a venv's python is a link)."""
    if value is None or value == "":
        return None
    absolute = os.path.abspath(value)
    return Path(absolute) if isinstance(value, Path) else absolute


class _EnvOption(click.Option):
    """An option with an environment variable whose errors name where the value came from:
    click names both however the value was given ("'--sglang-path' (env var:
    'SM120PATCH_SGLANG_PATH')"), which sends a user who typed the option to look at a
    variable they never set."""

    def consume_value(self, ctx: click.Context, opts: Any) -> Any:
        value, source = super().consume_value(ctx, opts)
        ctx.meta[self._source_key] = source  # click sets the source only after converting the value
        return value, source

    def get_error_hint(self, ctx: click.Context | None) -> str:
        from click.core import ParameterSource

        typed = click.Parameter.get_error_hint(self, ctx)
        if ctx is not None and ctx.meta.get(self._source_key) is ParameterSource.ENVIRONMENT:
            return f"{self.envvar} (the environment variable for {typed})"
        return typed

    @property
    def _source_key(self) -> str:
        return f"sm120patch.source.{self.name}"


def location_options(func: Callable[..., Any]) -> Callable[..., Any]:
    func = click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")(func)
    func = click.option(
        "--sglang-path",
        cls=_EnvOption,
        type=click.Path(path_type=Path, file_okay=False),
        envvar="SM120PATCH_SGLANG_PATH",
        show_envvar=True,
        callback=absolute_path,
        help=PATH_HELP,
    )(func)
    return click.option(
        "--python",
        "python",
        cls=_EnvOption,
        metavar="PATH",
        envvar="SM120PATCH_PYTHON",
        show_envvar=True,
        callback=absolute_path,
        help=PYTHON_HELP,
    )(func)


TIMEOUT_HELP = (
    "Seconds each step in the serving interpreter may take: looking for sglang with --python, "
    "nvidia-smi, doctor's host facts (the default below) and verify --runtime's imports (120 s "
    "where --timeout is not given)."
)


def timeout_option(func: Callable[..., Any]) -> Callable[..., Any]:
    from sm120patch.runner import DEFAULT_TIMEOUT_S

    return click.option(
        "--timeout", type=click.FloatRange(min=1), default=DEFAULT_TIMEOUT_S, show_default=True, help=TIMEOUT_HELP
    )(func)


def locators(python: str | None, sglang_path: Path | None) -> tuple[str | None, Path | None]:
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


def parse_fuse_up_to(value: str | None) -> int | str | None:
    from sm120patch.bench.fuse_limit import parse

    try:
        return None if value is None else parse(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a token count of 1 or more, `measured` nor `sglang`") from None


def parse_tokens(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    from sm120patch.sglang.fusion_call import REFERENCE_CALL

    limit = REFERENCE_CALL["max_token_num"]
    try:
        tokens = sorted({int(v) for v in _tokens_items(value)})
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of token counts") from None
    if not tokens or tokens[0] < 1 or tokens[-1] > limit:
        raise click.BadParameter(f"token counts go from 1 to {limit} (sglang fuses only batches of 1..{limit})")
    return tuple(tokens)


def plot_target(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
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


def check_hidden(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and (value < 8 or value % 8):
        raise click.BadParameter(f"{value}: the hidden size must be a positive multiple of 8 (16-byte rows)")
    return value
