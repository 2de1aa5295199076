"""``sm120patch demo``: the whole cycle on a downloaded release, in a temp dir."""

from __future__ import annotations

from pathlib import Path

import click

from sm120patch.cli import main
from sm120patch.cli.run import guarded


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

    guarded(False, lambda: run_demo(version, wheel, keep))
