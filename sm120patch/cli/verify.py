"""``sm120patch verify``: each patch's state, with file:line evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sm120patch.cli import main
from sm120patch.cli.run import tree_command

if TYPE_CHECKING:
    from sm120patch.patcher.outcome import Outcome
    from sm120patch.sglang.tree import SglangTree

#: verify --runtime imports sglang's patched modules: 17-25 s on a GPU host with a cold cache
#: (sglang 0.5.13 on an H200), past the 20 s other steps get.
RUNTIME_IMPORT_S = 120.0


@main.command()
@tree_command
@click.option(
    "--runtime",
    is_flag=True,
    help="Also import the patched modules in the serving interpreter (needs torch there) and "
    "report the SM120 probe and each module's SM flags.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 on any warning about the fused path (an SM check no patch owns, FlashInfer without the SM12x kernel, "
    "a patch left out that keeps it shut).",
)
def verify(tree: SglangTree, runtime: bool, strict: bool, timeout: float) -> Outcome:
    """Report each patch as applied / pending / drift, with file:line evidence."""
    from sm120patch.patcher.commands.verify import verify as verify_tree

    source = click.get_current_context().get_parameter_source("timeout")
    given = source is not click.core.ParameterSource.DEFAULT
    runtime_timeout = (timeout if given else RUNTIME_IMPORT_S) if runtime else None
    return verify_tree(tree, runtime_timeout=runtime_timeout, strict=strict)
