"""The ``sm120patch`` command line (click).  Exit codes: 0 ok, 1 not as asked, 2 usage/env."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from sm120patch import __version__, commands, report
from sm120patch.errors import EnvironmentProblem, ToolError
from sm120patch.locate import SglangTree, locate
from sm120patch.registry import SelectionError, all_patches, select


def _ids(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _target_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--python / --sglang-path / --json, shared by every command that reads a tree."""

    @click.option(
        "--python",
        "python",
        metavar="PATH",
        help="Interpreter (or venv/conda env root) whose sglang to patch; for pipx users.",
    )
    @click.option(
        "--sglang-path",
        type=click.Path(path_type=Path, file_okay=False),
        help="The sglang package directory itself (site-packages/sglang, or a checkout's python/sglang).",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
    @functools.wraps(func)
    def wrapper(python: str | None, sglang_path: Path | None, as_json: bool, **kwargs: Any) -> None:
        ctx = click.get_current_context()
        try:
            tree = locate(python=python, sglang_path=sglang_path)
            outcome = func(tree=tree, **kwargs)
        except ToolError as exc:
            _fail(exc, as_json)
            ctx.exit(exc.exit_code)
        except OSError as exc:  # an unreadable file or directory met while reading
            _fail(EnvironmentProblem(f"{exc.filename or ''}: {exc.strerror or exc}"), as_json)
            ctx.exit(EnvironmentProblem.exit_code)
        except SelectionError as exc:
            raise click.UsageError(str(exc)) from exc
        if as_json:
            report.print_json(report.to_json(outcome))
        else:
            report.render(outcome, show_docs=kwargs.get("docs", False))
            if kwargs.get("dry_run"):
                report.print_diff(outcome.diff)
        ctx.exit(outcome.exit_code)

    return wrapper


def _fail(exc: ToolError, as_json: bool) -> None:
    if as_json:
        report.print_json(
            {"schema": report.SCHEMA, "tool_version": __version__, "ok": False,
             "exit_code": exc.exit_code, "error": str(exc)}
        )
    report.console().print(Text.assemble(("error: ", "bold red"), str(exc)), soft_wrap=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="sm120patch")
def main() -> None:
    """Widen SGLang's FlashInfer allreduce-fusion gates to SM120 Blackwell GPUs
    (RTX PRO 6000, RTX 5090), in place, reversibly.

    \b
      sm120patch apply    back up, patch, print the verification report
      sm120patch verify   after an upgrade or at container start (exit 0 = patched)
      sm120patch revert   restore the original files byte for byte
      sm120patch list     the patches and their state in this sglang
      sm120patch demo     the whole cycle on a downloaded release, in a temp dir

    Exit codes: 0 ok, 1 not as asked (drift, refused release, changed files),
    2 usage or environment error (no sglang found, read-only tree).
    """


@main.command()
@_target_options
@click.option("--only", metavar="IDS", help="Comma-separated patch ids; their dependencies are pulled in.")
@click.option("--skip", metavar="IDS", help="Comma-separated patch ids to leave out.")
@click.option("--dry-run", is_flag=True, help="Write nothing; print the unified diff.")
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 and write nothing when the fused path would still not run (FlashInfer "
    "without the SM12x kernel); for image builds.",
)
def apply(
    tree: SglangTree, only: str | None, skip: str | None, dry_run: bool, strict: bool
) -> commands.Outcome:
    """Back up and patch the located sglang (a second run is a no-op)."""
    patches, notes = select(_ids(only), _ids(skip))
    return commands.apply(tree, patches, dry_run=dry_run, notes=notes, strict=strict)


@main.command()
@_target_options
@click.option(
    "--runtime",
    is_flag=True,
    help="Also import the patched modules in the serving interpreter (needs torch there) and "
    "report the SM120 probe and each module's SM flags.",
)
@click.option("--timeout", type=click.FloatRange(min=1), default=300, show_default=True,
              help="Seconds the --runtime imports may take.")
def verify(tree: SglangTree, runtime: bool, timeout: float) -> commands.Outcome:
    """Report each patch as applied / pending / drift, with file:line evidence."""
    return commands.verify(tree, runtime_timeout=timeout if runtime else None)


@main.command()
@_target_options
@click.option("--force", is_flag=True, help="Restore even files changed since apply (their current content is kept aside).")
@click.option("--dry-run", is_flag=True, help="Write nothing; print the diff that revert would apply.")
def revert(tree: SglangTree, force: bool, dry_run: bool) -> commands.Outcome:
    """Restore every patched file from its backup, then remove the saved state."""
    return commands.revert(tree, force=force, dry_run=dry_run)


@main.command(name="list")
@_target_options
@click.option("--docs", is_flag=True, help="Also print each patch's full description.")
def list_(tree: SglangTree, docs: bool) -> commands.Outcome:
    """The patches, what each does, and its state in the located sglang."""
    return commands.list_patches(tree)


@main.command()
@click.option("--sglang-version", "version", default=None, help="Release to download (default: the pinned demo release).")
@click.option("--wheel", type=click.Path(path_type=Path, dir_okay=False, exists=True), help="Use this sglang wheel instead of downloading.")
@click.option("--keep", is_flag=True, help="Keep the scratch directory and print where it is.")
def demo(version: str | None, wheel: Path | None, keep: bool) -> None:
    """No sglang here? Download a real release (no dependencies) into a temp dir and run
    apply -> verify -> apply again -> revert on it, with the full report."""
    from sm120patch.demo import run_demo

    ctx = click.get_current_context()
    try:
        ctx.exit(run_demo(version, wheel, keep))
    except (ToolError, EnvironmentProblem) as exc:
        _fail(exc, False)
        ctx.exit(exc.exit_code)


@main.command()
@click.option("--python", "python", metavar="PATH", help="Interpreter (or env root) that serves sglang.")
@click.option(
    "--sglang-path",
    type=click.Path(path_type=Path, file_okay=False),
    help="The sglang package directory itself.",
)
@click.option("--tp", type=click.IntRange(min=1), help="The tensor-parallel size you serve with.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def doctor(python: str | None, sglang_path: Path | None, tp: int | None, as_json: bool) -> None:
    """Read-only: what stands between this host and a running fused allreduce (GPUs,
    patches, FlashInfer's SM12x kernel, P2P, multicast, GPUDirect RDMA, launch flags).
    Exit 1 when any finding is an error."""
    from sm120patch import doctor as doctor_module

    ctx = click.get_current_context()
    tree, problem = None, None
    try:
        tree = locate(python=python, sglang_path=sglang_path)
    except ToolError as exc:
        problem = str(exc)
    states: dict[str, str] = {}
    if tree is not None:
        try:
            verified = commands.verify(tree)
        except ToolError as exc:
            problem = str(exc)
        else:
            plan = verified.plan
            if plan is not None and plan.refusal:
                states = {p.id: "refused" for p in all_patches()}
            elif plan is not None:
                states = {r.patch.id: r.state.value for r in plan.reports}
    host = doctor_module.read_host(doctor_module.default_python(tree, python))
    result = doctor_module.diagnose(tree, problem, states, host, tp)
    if as_json:
        report.print_json(report.doctor_json(tree, result))
    else:
        report.render_doctor(tree, result)
    ctx.exit(result.exit_code)
