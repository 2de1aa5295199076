"""``sm120patch apply``: back up and patch the located sglang."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sm120patch.cli import main
from sm120patch.cli.options import complete_ids, parse_fuse_up_to, parse_ids
from sm120patch.cli.run import tree_command
from sm120patch.patcher.kit.auto_enable_tp import CHOICES

if TYPE_CHECKING:
    from sm120patch.patcher.outcome import Outcome
    from sm120patch.sglang.tree import SglangTree


@main.command()
@tree_command
@click.option(
    "--only",
    metavar="IDS",
    callback=parse_ids,
    shell_complete=complete_ids,
    help="Comma-separated patch ids; their dependencies are pulled in.",
)
@click.option(
    "--skip",
    metavar="IDS",
    callback=parse_ids,
    shell_complete=complete_ids,
    help="Comma-separated patch ids to leave out.",
)
@click.option("--dry-run", is_flag=True, help="Write nothing; print the unified diff.")
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 and write nothing when the fused path would still not run (FlashInfer "
    "without the SM12x kernel, an SM check no patch owns, a patch left out that keeps it shut); for image builds.",
)
@click.option(
    "--allow-missing-kernel",
    is_flag=True,
    help="Write even though the FlashInfer beside sglang has no SM12x allreduce kernel (fusion would "
    "then stop sglang <= 0.5.9 from starting, and change nothing in later releases).",
)
@click.option(
    "--fuse-up-to",
    metavar="N|measured|sglang",
    callback=lambda ctx, param, value: parse_fuse_up_to(value),
    help="Also lower sglang's fusion token limit to N tokens, or to the crossover the last `sm120patch bench kernel` "
    "saved for this tree (`measured`); never above sglang's own, which `sglang` puts back.",
)
@click.option(
    "--tp", type=click.IntRange(min=2), help="With --fuse-up-to measured: the TP sglang serves at (refuses another)."
)
@click.option(
    "--auto-enable-tp",
    type=click.Choice(CHOICES),
    help="The TP at which sglang turns fusion on by itself on SM12x for the models it lists: 2 (the default: "
    "TP 4 regressed on PCIe, sglang#32330) or any (as on SM90/SM100). Recorded: a later apply keeps it.",
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
    auto_enable_tp: str | None = None,
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
        auto_enable_tp=auto_enable_tp,
    )
