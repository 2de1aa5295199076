"""``sm120patch list``: the patches and their state in the located sglang."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sm120patch.cli import main
from sm120patch.cli.run import tree_command

if TYPE_CHECKING:
    from sm120patch.patcher.outcome import Outcome
    from sm120patch.sglang.tree import SglangTree


@main.command(name="list")
@tree_command
@click.option("--docs", is_flag=True, help="Also print each patch's description and where it looks.")
def list_(tree: SglangTree, docs: bool) -> Outcome:
    """The patches, what each does, and its state in the located sglang."""
    from sm120patch.patcher.commands.listing import list_patches

    return list_patches(tree)
