"""``sm120patch self-test``: every patch's examples against the installed libcst."""

from __future__ import annotations

import click

from sm120patch.cli import main
from sm120patch.cli.run import guarded, show_result


@main.command(name="self-test")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def self_test(as_json: bool) -> None:
    """Run every patch's named examples against the libcst installed here; reads no sglang."""
    from sm120patch.patcher.commands.self_test import self_test as run

    guarded(as_json, lambda: show_result(run(), as_json))
