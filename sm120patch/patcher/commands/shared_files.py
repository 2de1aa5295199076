"""What the report says about files sglang shares with a store (links.py): a package that is
a link to a checkout, files that are symlinks into an installer's cache, or hard links to it."""

from __future__ import annotations

import os
from pathlib import Path

from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.outcome import FileStatus
from sm120patch.patcher.transaction import links
from sm120patch.sglang.tree import SglangTree


def write_refusal(tree: SglangTree, rels: list[str]) -> str | None:
    """Why apply would write none of ``rels``: the package is a link into a store, or a
    file's folder is a link out of the package (the sentence apply refuses with)."""
    problem = store_problem(tree)
    if problem:
        return problem
    for rel in rels:
        try:
            links.target(tree.package_dir, tree.path(rel))
        except EnvironmentProblem as exc:
            return str(exc)
    return None


def targets(tree: SglangTree, rels: list[str]) -> dict[str, links.Target]:
    """Each file's write target; a file whose folder is a link out of the package is left out
    (apply refuses it, with its own sentence)."""
    found = {}
    for rel in rels:
        try:
            found[rel] = links.target(tree.package_dir, tree.path(rel))
        except EnvironmentProblem:
            continue
    return found


def _names(rels: list[str], plural: str, singular: str) -> str:
    """``rels`` as a sentence's subject, with the verb that agrees: "a, b are", "a is"."""
    return ", ".join(f"sglang/{rel}" for rel in sorted(rels)) + " " + (plural if len(rels) > 1 else singular)


def _store_package(rel: str, target: links.Target) -> str:
    """The store's copy of the package a link leads into (``<cache entry>/sglang``), where the
    link leads to the same ``rel`` there; else the file it leads to."""
    store_file = target.store_file
    assert store_file is not None
    depth = len(Path(rel).parts)
    return str(store_file.parents[depth - 1]) if store_file.as_posix().endswith(f"/{rel}") else str(store_file)


def notes(found: dict[str, links.Target], written: bool, brief: bool = False) -> list[str]:
    """One line per kind of sharing; ``written``: apply has just replaced these files;
    ``brief``: nothing is left to apply, so what apply would do is not said."""
    lines = []
    into = {rel: t for rel, t in found.items() if t.link is not None}
    shared = {rel: t for rel, t in found.items() if t.shared and t.link is None}
    if brief:
        if into:
            store = os.path.commonpath([_store_package(rel, t) for rel, t in into.items()])
            lines.append(f"{_names(list(into), 'are links', 'is a link')} into {store}")
        if shared:
            lines.append(f"{_names(list(shared), 'have', 'has')} other hard links (an installer's cache)")
        return lines
    if into:
        store = os.path.commonpath([_store_package(rel, t) for rel, t in into.items()])
        if written:
            lines.append(
                f"{_names(list(into), 'were links', 'was a link')} into {store}: each link here was replaced "
                f"by a patched file, and {store} was not written; `sm120patch revert` puts the links back"
            )
        else:
            lines.append(
                f"{_names(list(into), 'are links', 'is a link')} into {store} (an installer's cache, as uv's "
                "--link-mode=symlink makes): apply replaces the links in this environment only, never the files "
                "they lead to"
            )
    if shared:
        if written:
            lines.append(
                f"{_names(list(shared), 'shared their', 'shared its')} data with other hard links (an installer's "
                "cache: uv's default, conda's pkgs): each got a file of its own, the other links keep the release's "
                "bytes"
            )
        else:
            lines.append(
                f"this install shares files with a cache: {_names(list(shared), 'have', 'has')} other hard links (uv's "
                "default, conda's pkgs); apply gives each a file of its own and leaves the others' bytes as they are"
            )
    return lines


def linked_package(tree: SglangTree) -> str | None:
    """The line a report gives a package directory that is a link to a checkout."""
    if tree.linked_from is None:
        return None
    return f"sglang is a link to {tree.package_dir}: patching the checkout"


def store_problem(tree: SglangTree) -> str | None:
    """Why nothing may be written at all: the package directory is a link to an installed
    wheel's files (a ``*.dist-info`` beside the folder it leads to), a store that other
    environments may share.  None for a checkout, or where sglang is no link."""
    link, package_dir = tree.linked_from, tree.package_dir
    if link is None:
        return None
    beside = sorted(package_dir.parent.glob("sglang-*.dist-info"))
    if not beside or links.inside(link, package_dir.parent):
        return None
    return (
        f"{link} is a link to {package_dir}, the files of an installed wheel ({beside[0].name} beside it) in "
        "a store that other environments may share; sm120patch writes only this environment's own files. "
        "Nothing was written. Install sglang with copied files (uv: --link-mode=copy) to patch it"
    )


def patched_store(tree: SglangTree, found: dict[str, links.Target], files: list[FileStatus]) -> str | None:
    """Links here lead into a store whose files differ from RECORD: an earlier sm120patch wrote
    through the links into the cache, shared by every environment linked to it, and no state
    here can undo it.  The one line that says so and how to fix it; None when no link does."""
    differ = sorted(s.rel for s in files if s.pristine is False and s.rel in found and found[s.rel].link is not None)
    if not differ:
        return None
    store = os.path.commonpath([_store_package(rel, found[rel]) for rel in differ])
    return (
        f"{_names(differ, 'are links', 'is a link')} into {store}, whose files differ from sglang "
        f"{tree.version}'s RECORD: the installer's cache holds patched files, written by an earlier sm120patch, "
        "shared by every environment linked to it. Clean it (uv: `uv cache clean sglang`), then reinstall sglang"
    )
