"""The patches' own documentation: README's patch table and ``list --docs``."""

from __future__ import annotations

import inspect
import re
from typing import TYPE_CHECKING

from sm120patch.output.lines import put
from sm120patch.patcher.kit.model import Edit, State

if TYPE_CHECKING:
    from rich.console import Console


def patch_table_markdown() -> str:
    """README's "What it changes" table, generated from the patches' own anchor tables."""
    from sm120patch.patcher.plan.registry import all_patches

    rows = ["| patch | where it looks (file: what, releases) | what it changes |", "|---|---|---|"]
    for patch in all_patches():
        places = []
        for anchor in patch.anchors:
            extra = [anchor.expect.value] if anchor.expect is not State.PENDING else []
            extra += [anchor.note] if anchor.note else []
            extra += ["adds the import"] if anchor.imports and patch.edits is not Edit.IMPORT else []
            shown = f" ({'; '.join(extra)})" if extra else ""
            places.append(f"`{anchor.file.removeprefix('srt/')}`: {anchor.describe()}, {anchor.seen}{shown}")
        rows.append(f"| `{patch.id}` | {'<br>'.join(places)} | {patch.summary} |")
    return "\n".join(rows)


_LITERAL = re.compile(r"``([^`]+)``")


def plain(doc: str) -> str:
    """A docstring as a reader wants it: RST literals (````x````) as plain ``x``, and its
    paragraphs without the docstring's indentation."""
    return inspect.cleandoc(_LITERAL.sub(r"\1", doc))


def render_docs(out: Console) -> None:
    """Each patch's description and the anchor rows it searches (``list --docs``), for stdout:
    wrapped to a terminal, one line per paragraph or row in a pipe (``output.lines.put``)."""
    from rich.text import Text

    from sm120patch.patcher.plan.registry import all_patches

    for patch in all_patches():
        put(out, Text(f"\n{patch.id}: {patch.summary}", style="bold"))
        for paragraph in plain(patch.doc).split("\n\n"):
            put(out, " ".join(paragraph.split()), lead="  ")
            out.print()
        put(out, Text("  where it looks:", style="bold"))
        for anchor in patch.anchors:
            expect = "" if anchor.expect is State.PENDING else f" [{anchor.expect.value}]"
            note = f" — {anchor.note}" if anchor.note else ""
            put(out, f"sglang/{anchor.file}: {anchor.describe()}, {anchor.seen}{expect}{note}", lead="    ")
        role = getattr(patch, "role", None)  # where no row matches (a release that moved it)
        if role is not None:
            follows = f", followed from {role.follows}'s target" if role.follows else ""
            put(out, Text(f"where no row matches, by role: {role.what}{follows}", style="bold"), lead="  ")


def render_known_gates(out: Console) -> None:
    """``list --docs``: what the sweep of SM checks takes as the fused path, and the checks on
    it it knows to be deliberate (``sglang/fusion_path.py``), each with its reason."""
    from rich.text import Text

    from sm120patch.sglang.fusion_path import KNOWN_GATES, ON_PATH

    put(out, Text("\nthe sweep of SM checks: on the fused path are", style="bold"))
    for place in ON_PATH:
        put(out, f"{place.pattern.pattern}: {place.reason}", lead="    ")
    put(out, Text("  known and deliberate, never reported:", style="bold"))
    for known in KNOWN_GATES:
        where = f"sglang/{known.module}: {known.function} ({', '.join(sorted(known.archs))}), {known.seen}"
        put(out, f"{known.kind}: {where} — {known.reason}", lead="    ")
