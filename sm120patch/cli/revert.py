"""``sm120patch revert``: restore the original files from their backups."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sm120patch.cli import main
from sm120patch.cli.run import tree_command

if TYPE_CHECKING:
    from sm120patch.patcher.outcome import Outcome
    from sm120patch.sglang.tree import SglangTree


@main.command()
@tree_command
@click.option(
    "--force", is_flag=True, help="Restore even files changed since apply (their current content is kept aside)."
)
@click.option("--dry-run", is_flag=True, help="Write nothing; print the diff that revert would apply.")
def revert(tree: SglangTree, force: bool, dry_run: bool) -> Outcome:
    """Restore every patched file from its backup, then remove the saved state."""
    from sm120patch.patcher.commands.revert import revert as revert_tree

    return revert_tree(tree, force=force, dry_run=dry_run)
