"""The patch model and the registry that collects one patch per module of ``patches/``.

A patch never edits text.  ``check`` reads a parsed file and says which of four states the
code is in; ``transform`` turns *pending* into *applied* in memory.  ``apply``, ``verify``
and ``list`` all run the same ``check``, so "already applied" and "the code moved" are
told apart by the same matchers that do the rewriting.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from packaging.version import Version

from sm120patch import static_names

if TYPE_CHECKING:  # libcst loads only when a patch runs (revert from saved state never does)
    import libcst as cst


class State(str, Enum):
    PENDING = "pending"  # anchor found, SM12x term absent: apply will change it
    APPLIED = "applied"  # SM12x term present (by this tool, by hand, or upstream)
    NOT_NEEDED = "not-needed"  # this release has nothing to change for this patch
    DRIFT = "drift"  # neither: the code is not what the patch knows


@dataclass
class Finding:
    """What ``check`` saw.  ``evidence`` nodes become ``file:line: text`` in reports."""

    state: State
    detail: str
    where: str = ""
    evidence: Sequence[cst.CSTNode] = ()
    apply: Callable[[cst.Module], cst.Module] | None = field(default=None, repr=False)


@dataclass(frozen=True)
class PatchContext:
    """What a patch may know about the tree besides the file it reads."""

    package_dir: Path | None
    version: Version | None

    def defines(self, dotted: str, name: str) -> bool:
        if self.package_dir is None:  # self-test examples: no tree around them
            return True
        return static_names.defines(self.package_dir, dotted, name)

    @property
    def release(self) -> str:
        return f"sglang {self.version}" if self.version else "this sglang"


@dataclass(frozen=True)
class Example:
    """A before/after pair the test-suite runs.  ``after=None``: the code stays as it is."""

    before: str
    after: str | None = None
    state: State = State.PENDING
    detail: str = ""  # for DRIFT / NOT_NEEDED: a fragment the message must contain


class Patch(ABC):
    id: ClassVar[str]
    summary: ClassVar[str]
    requires: ClassVar[tuple[str, ...]] = ()
    examples: ClassVar[tuple[Example, ...]] = ()

    @abstractmethod
    def target(self, exists: Callable[[str], bool]) -> str:
        """The file this patch edits, relative to the ``sglang`` package directory."""

    @abstractmethod
    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        """Classify ``module``; a PENDING finding carries the in-memory ``apply``."""

    def absent(self, ctx: PatchContext, rel: str) -> Finding:
        """The finding when the target file does not exist in this tree."""
        return Finding(State.DRIFT, f"{rel} does not exist in {ctx.release}")

    @property
    def doc(self) -> str:
        return (type(self).__doc__ or "").strip()


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
    """Every patch in ``sm120patch.patches``, dependencies before dependants."""
    from sm120patch import patches as package  # type: ignore[attr-defined]  # mapped from patches/

    found: dict[str, Patch] = {}
    for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, Patch)
                and value is not Patch
                and value.__module__ == module.__name__
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


class SelectionError(ValueError):
    """--only / --skip asked for something impossible."""


def select(only: Sequence[str] = (), skip: Sequence[str] = ()) -> tuple[list[Patch], list[str]]:
    """The patches to run and notes on dependencies pulled in.

    ``--only`` pulls in what the chosen patches need (and says so); ``--skip`` of a patch
    that a selected patch needs is refused, since the result would not import.
    """
    registry = {p.id: p for p in all_patches()}
    unknown = [pid for pid in (*only, *skip) if pid not in registry]
    if unknown:
        raise SelectionError(
            f"unknown patch id {', '.join(unknown)}; known: {', '.join(registry)}"
        )
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
        dependants = sorted(
            other for other in wanted - set(skip) if pid in registry[other].requires
        )
        if dependants:
            raise SelectionError(
                f"cannot skip {pid}: {', '.join(dependants)} need{'s' if len(dependants) == 1 else ''} it"
                f" (skip {'that' if len(dependants) == 1 else 'those'} too)"
            )
    wanted -= set(skip)
    if not wanted:
        raise SelectionError("nothing left to do: every patch was skipped")
    return [p for p in all_patches() if p.id in wanted], notes
