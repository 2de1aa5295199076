"""Add one name to an existing ``from X import (...)`` the way a person would.

libcst's ``AddImportsVisitor`` prepends the name on the first line, ignores import blocks
that follow other statements and duplicates names imported lower down (seen with libcst 1.9).
This helper puts the new name on its own line right after an anchor name, reusing the
block's own separators, and never moves a trailing comment.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import libcst as cst

from sm120patch.patcher.kit.cst_helpers import (
    bound_name,
    from_module_name,
    import_froms,
    imported_names,
    without_comment,
)


@dataclass(frozen=True)
class ImportSite:
    """The ``from ... import`` that holds ``anchor`` and where ``name`` goes after it."""

    node: cst.ImportFrom
    anchor: cst.ImportAlias
    source: str


def find_import_site(module: cst.Module, sources: Iterable[str], anchor: str | None, name: str) -> ImportSite | None:
    """The import-time ``from <source> import`` that imports ``anchor``.

    Without an anchor, the first such import of any name: ``name`` then goes after the
    last name that sorts before it (isort's order), or last.
    """
    wanted = set(sources)
    for node in import_froms(module):
        source = from_module_name(node)
        if source not in wanted:
            continue
        names = imported_names(node)
        if anchor is None and names:
            before = [a for a in names if bound_name(a) < name]
            return ImportSite(node, (before or names)[-1], source)
        for alias in names:
            if bound_name(alias) == anchor and alias.asname is None:
                return ImportSite(node, alias, source)
    return None


def _with_last_line(
    ws: cst.BaseParenthesizableWhitespace, last_line: cst.SimpleWhitespace
) -> cst.BaseParenthesizableWhitespace:
    if isinstance(ws, cst.ParenthesizedWhitespace):
        return ws.with_changes(last_line=last_line)
    return ws


def insert_after(site: ImportSite, name: str) -> cst.ImportFrom:
    """``site.node`` with ``name`` inserted right after the anchor alias."""
    names = imported_names(site.node)
    index = next(i for i, alias in enumerate(names) if alias is site.anchor)
    anchor = names[index]
    # The separator between two items of this block: after a middle item's comma, or, for a
    # block of one, the opening parenthesis' line break (``(name)`` on one line: a space).
    separator: cst.BaseParenthesizableWhitespace = cst.SimpleWhitespace(" ")
    for alias in names[:-1]:
        if isinstance(alias.comma, cst.Comma):
            separator = without_comment(alias.comma.whitespace_after)
            break
    else:
        if site.node.lpar is not None and isinstance(site.node.lpar.whitespace_after, cst.ParenthesizedWhitespace):
            separator = without_comment(site.node.lpar.whitespace_after)
    item_indent = separator.last_line if isinstance(separator, cst.ParenthesizedWhitespace) else None

    if isinstance(anchor.comma, cst.Comma):
        # Middle item, or last item with a trailing comma: the new item inherits the
        # anchor's comma layout (minus its comment); the anchor's comma now leads to it.
        new_comma: cst.Comma | cst.MaybeSentinel = anchor.comma.with_changes(
            whitespace_after=without_comment(anchor.comma.whitespace_after)
        )
        anchor_ws = anchor.comma.whitespace_after
        if item_indent is not None:
            anchor_ws = _with_last_line(anchor_ws, item_indent)
        new_anchor = anchor.with_changes(comma=anchor.comma.with_changes(whitespace_after=anchor_ws))
    else:
        # Last item without a trailing comma: keep it that way.
        new_comma = cst.MaybeSentinel.DEFAULT
        new_anchor = anchor.with_changes(comma=cst.Comma(whitespace_after=separator))
    new_alias = cst.ImportAlias(name=cst.Name(name), comma=new_comma)
    new_names = [*names[:index], new_anchor, new_alias, *names[index + 1 :]]
    return site.node.with_changes(names=new_names)
