"""The registry: the ``Patch`` subclass of each module of ``sm120patch.patcher.patches`` (one patch a module)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Collection, Sequence
from functools import lru_cache

from sm120patch.patcher.kit.model import Patch


def _topological(patches: dict[str, Patch]) -> list[Patch]:
    ordered: list[Patch] = []
    seen: set[str] = set()

    def visit(pid: str) -> None:
        if pid in seen:
            return
        seen.add(pid)
        for dep in patches[pid].requires:
            visit(dep)
        ordered.append(patches[pid])

    for pid in sorted(patches):
        visit(pid)
    return ordered


@lru_cache(maxsize=1)
def all_patches() -> tuple[Patch, ...]:
    """Every patch in ``sm120patch.patcher.patches``, dependencies before dependants."""
    from sm120patch.patcher import patches as package

    found: dict[str, Patch] = {}
    for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, Patch)
                and value.__module__ == module.__name__
                and not getattr(value, "__abstractmethods__", None)
            ):
                patch = value()
                if patch.id in found:
                    raise RuntimeError(f"two patches share the id {patch.id!r}")
                found[patch.id] = patch
    for patch in found.values():
        for dep in patch.requires:
            if dep not in found:
                raise RuntimeError(f"{patch.id} requires unknown patch {dep!r}")
    return tuple(_topological(found))


def by_id() -> dict[str, Patch]:
    return {p.id: p for p in all_patches()}


def provided_for(patch: Patch, here: Collection[str] | None = None) -> frozenset[str]:
    """Names the patches ``patch`` requires (transitively) bind in their file; with ``here``,
    only those of the patches among ``here`` (the ones that write the same file)."""
    registry = by_id()
    names: set[str] = set()
    queue = list(patch.requires)
    while queue:
        dep = registry[queue.pop()]
        if here is None or dep.id in here:
            names.update(dep.provides)
        queue.extend(dep.requires)
    return frozenset(names)


class SelectionError(ValueError):
    """--only / --skip asked for something impossible."""


def select(only: Sequence[str] = (), skip: Sequence[str] = ()) -> tuple[list[Patch], list[str]]:
    """The patches to run and notes on dependencies pulled in.

    ``--only`` pulls in what the chosen patches need (and says so); ``--skip`` of a patch
    that a selected patch needs is refused, since the result would not import.
    """
    registry = by_id()
    unknown = [pid for pid in (*only, *skip) if pid not in registry]
    if unknown:
        raise SelectionError(f"unknown patch id {', '.join(unknown)}; known: {', '.join(registry)}")
    wanted = set(only) if only else set(registry)
    notes: list[str] = []
    queue = list(wanted)
    while queue:
        pid = queue.pop()
        for dep in registry[pid].requires:
            if dep not in wanted:
                wanted.add(dep)
                queue.append(dep)
                if only:
                    notes.append(f"also selecting {dep} (required by {pid})")
    for pid in skip:
        dependants = sorted(other for other in wanted - set(skip) if pid in registry[other].requires)
        if dependants:
            raise SelectionError(
                f"cannot skip {pid}: {', '.join(dependants)} need{'s' if len(dependants) == 1 else ''} it"
                f" (skip {'that' if len(dependants) == 1 else 'those'} too)"
            )
    wanted -= set(skip)
    if not wanted:
        raise SelectionError("nothing left to do: every patch was skipped")
    return [p for p in all_patches() if p.id in wanted], notes
