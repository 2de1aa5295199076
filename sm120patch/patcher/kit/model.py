"""The patch model: states, findings, anchors and self-testing examples.

A patch never edits text.  ``check`` reads a parsed file and says which of four states the
code is in; a *pending* finding carries the change that makes it *applied*, in memory.
``apply``, ``verify`` and ``list`` all run the same ``check`` (or read what it recorded for
byte-identical files, plan/trust.py), so "already applied" and "the code moved" are told
apart by the same matchers that do the rewriting.

Where a patch looks is data: its ``anchors`` name the file, the function (or assignment,
or import) and the releases where that shape was seen.  A new sglang variant (a renamed
gate, a moved file) is one more anchor row plus one example.
"""

from __future__ import annotations

import os
import textwrap
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, ClassVar

from packaging.version import InvalidVersion, Version

from sm120patch.sglang.layout import kept_files

if TYPE_CHECKING:  # libcst loads only when a patch runs (revert from saved state never does)
    import libcst as cst


class State(str, Enum):
    PENDING = "pending"  # anchor found, SM12x term absent: apply will change it
    APPLIED = "applied"  # SM12x term present (by this tool, by hand, or upstream)
    NOT_NEEDED = "not-needed"  # this release has nothing to change for this patch
    DRIFT = "drift"  # neither: the code is not what the patch knows
    REFUSED = "refused"  # the whole release cannot be patched (no fusion, no SM12x probe)
    # Left out by the last apply (--only / --skip) and not applied: set from the saved state
    # (plan/current.py), never by a patch's check.
    SKIPPED = "skipped"


class Edit(str, Enum):
    """What a patch adds to sglang's code (the independent ``ast`` check in the tests
    accepts these and nothing else)."""

    IMPORT = "import"  # ``is_sm120_supported`` in a ``from sglang.srt.utils import``
    FLAG = "flag"  # ``_is_sm120_supported = ...`` at module level
    OR_TERM = "or-term"  # ``or <SM120 term>`` in an SM clause
    GUARD = "guard"  # existing statements moved under ``if not <SM12x term>:``
    LIMIT = "limit"  # the fusion gate's token limit set lower (``apply --fuse-up-to N``, opt-in)


class Kind(str, Enum):
    FUNCTION = "function"  # a module-level function, or a method of ``cls``
    ASSIGNMENT = "assignment"  # a module-level ``name = ...``
    IMPORT = "import"  # ``from sglang.srt.utils import (..., name, ...)``


@dataclass(frozen=True)
class Releases:
    """sglang releases ``first`` to ``last`` (inclusive; ``last=None``: up to now)."""

    first: str
    last: str | None = None

    def __contains__(self, version: object) -> bool:
        try:
            v = Version(str(version))
        except InvalidVersion:
            return False
        return Version(self.first) <= v and (self.last is None or v <= Version(self.last))

    def __str__(self) -> str:
        if self.last == self.first:
            return self.first
        return f"{self.first} - {self.last or 'now'}"


@dataclass(frozen=True)
class Anchor:
    """One place a patch looks: what it is, in which file, and where it was seen."""

    file: str  # relative to the sglang package directory (sm120patch.sglang.layout)
    name: str  # the function / method, the assigned name, or the imported name
    seen: Releases
    cls: str | None = None  # the class, for a method
    kind: Kind = Kind.FUNCTION
    expect: State = State.PENDING  # what a pristine release of ``seen`` shows
    imports: bool = False  # the patch also imports ``is_sm120_supported`` in these releases
    note: str = ""  # why ``expect`` is not PENDING, or what is special here

    found_by: str = "anchor"  # "role": made for this tree by a role find (patcher/plan/role_find.py)

    def describe(self) -> str:
        if self.kind is Kind.ASSIGNMENT:
            return f"`{self.name} = ...`"
        if self.kind is Kind.IMPORT:
            return f"`from sglang.srt.utils import {self.name}`"
        return f"method {self.cls}.{self.name}" if self.cls else f"function {self.name}"


#: Whether a target no known layout matches may be found by role (``--known-layouts-only``
#: sets it off for one command; a context variable, so in-process runs do not leak it).
ROLE_FINDS: ContextVar[bool] = ContextVar("role_finds", default=True)
FOUND_BY_ANCHOR = "anchor"
FOUND_BY_ROLE = "role"
#: Forget every anchor row first seen after this release (a backtest of role finding over
#: sglang's history: the tool as it would have been the day that release was the newest).
KNOWN_UP_TO = "SM120PATCH_KNOWN_UP_TO"


def known_up_to() -> Version | None:
    """The release ``SM120PATCH_KNOWN_UP_TO`` names, or None (every row known)."""
    value = os.environ.get(KNOWN_UP_TO, "").strip()
    if not value:
        return None
    try:
        return Version(value)
    except InvalidVersion:
        return None  # the CLI refuses it first (cli/run.py); here it only means "all rows"


@dataclass(frozen=True)
class Role:
    """What a patch's target *does*, to find it where no anchor row matches (a release that
    moved or renamed it).  Either a function found in the whole package (``matches``, read
    only in modules whose text holds every one of ``words``), or a name ``follows`` another
    patch's target reads, followed through imports to the module that binds it (``reads``
    names it; None keeps this patch's own anchor names and only moves the file)."""

    what: str  # one phrase: "the function that ..."
    words: tuple[str, ...] = ()
    matches: Callable[[cst.FunctionDef], bool] | None = None
    follows: str | None = None  # the id of the patch whose target leads to this one's
    reads: Callable[[cst.FunctionDef], str | None] | None = None
    kind: Kind = Kind.FUNCTION


@dataclass(frozen=True)
class PatchContext:
    """What a patch may know about the tree besides the file it reads."""

    version: Version | None
    defines: Callable[[str, str], bool]  # does sglang module X define name N (statically)?
    provided: frozenset[str] = frozenset()  # names the patches this one requires will bind
    token_limit: int | None = None  # what ``apply --fuse-up-to`` asked (or the last apply recorded)
    # What ``apply --auto-enable-tp`` asked (or the last apply recorded): True ``any``, False
    # ``2``, None neither (the auto-enable then takes either form as applied, and adds TP 2's).
    auto_enable_any_tp: bool | None = None
    #: The rows each patch looks through in this tree, where not its known ones (a role find)
    rows: Mapping[str, tuple[Anchor, ...]] = field(default_factory=dict)
    #: Names a required patch binds in another module (a role find), by that module's dotted
    #: name: a term that needs one imports it the way its SM100 twin is imported.
    bound_elsewhere: Mapping[str, str] = field(default_factory=dict)

    def rows_of(self, patch: type[Patch] | Patch) -> tuple[Anchor, ...]:
        """The anchor rows ``patch`` finds its target through here."""
        return self.rows.get(patch.id, known_rows(patch.anchors))

    @property
    def release(self) -> str:
        return f"sglang {self.version}" if self.version else "this sglang"


@dataclass
class Finding:
    """What ``check`` saw.  ``evidence`` nodes become ``file:line: text`` in reports."""

    state: State
    detail: str
    where: str = ""
    evidence: Sequence[cst.CSTNode] = ()
    apply: Callable[[cst.Module], cst.Module] | None = field(default=None, repr=False)
    scopes: Sequence[cst.CSTNode] = field(default=(), repr=False)  # functions holding the evidence


def _source(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


@dataclass(frozen=True)
class Example:
    """A named before/after case the test-suite runs (Fixit's VALID/INVALID, with names).

    ``after`` is what the code becomes: for a pending example the patched code, for every
    other state ``before`` itself (asserted too).  ``detail`` is asserted only where given;
    ``evidence`` (line numbers, in ``after``) likewise.  ``undefined`` lists names that
    ``sglang.srt.utils`` does not define in this example's release.
    """

    name: str
    before: str
    after: str | None = None
    state: State = State.PENDING
    detail: str | None = None
    evidence: tuple[int, ...] | None = None
    undefined: tuple[str, ...] = ()
    token_limit: int | None = None  # the ``--fuse-up-to`` this example runs with
    auto_enable_any_tp: bool | None = None  # the ``--auto-enable-tp`` (True: any, False: 2)

    def __post_init__(self) -> None:
        object.__setattr__(self, "before", _source(self.before))
        if self.after is not None:
            object.__setattr__(self, "after", _source(self.after))
        if (self.state is State.PENDING) != (self.after is not None):
            raise ValueError(f"example {self.name!r}: give `after` exactly for a pending example")

    def context(self, provided: frozenset[str] = frozenset()) -> PatchContext:
        """The context the example runs in: no release, ``provided`` by required patches."""
        return PatchContext(
            None, lambda module, name: name not in self.undefined, provided, self.token_limit, self.auto_enable_any_tp
        )


def known_rows(anchors: tuple[Anchor, ...]) -> tuple[Anchor, ...]:
    """``anchors`` less the rows first seen after ``SM120PATCH_KNOWN_UP_TO`` (all of them
    when it is not set)."""
    limit = known_up_to()
    if limit is None:
        return anchors
    return tuple(a for a in anchors if Version(a.seen.first) <= limit)


class Patch(ABC):
    id: ClassVar[str]
    summary: ClassVar[str]
    edits: ClassVar[Edit]
    anchors: ClassVar[tuple[Anchor, ...]]
    requires: ClassVar[tuple[str, ...]] = ()
    provides: ClassVar[tuple[str, ...]] = ()  # names this patch binds in its file
    since: ClassVar[str | None] = None  # first release with the target; before: not needed
    # Why leaving this patch out (--only / --skip) keeps the fused path open on SM12x; None:
    # it does not (the gate, the resolver, the preflight and what they require).
    optional: ClassVar[str | None] = None
    examples: ClassVar[tuple[Example, ...]] = ()
    place: ClassVar[str]  # what of sglang's layout its target is (``sglang.layout.KEPT``)
    role: ClassVar[Role | None] = None  # how to find the target where no row matches

    @abstractmethod
    def check(self, module: cst.Module, ctx: PatchContext) -> Finding:
        """Classify ``module``; a PENDING finding carries the in-memory ``apply``."""

    @property
    def files(self) -> tuple[str, ...]:
        """The files this patch looks in, newest layout first: where the layout table keeps its
        place (known by ``SM120PATCH_KNOWN_UP_TO``), then its known rows' files."""
        place = getattr(self, "place", None)
        kept = [f for f, first in kept_files(place) if (limit := known_up_to()) is None or Version(first) <= limit]
        return tuple(dict.fromkeys([*kept, *(a.file for a in known_rows(self.anchors) or self.anchors)]))

    def target(self, exists: Callable[[str], bool]) -> str:
        """The file this patch reads in this tree: the first of its files that exists."""
        return next((f for f in self.files if exists(f)), self.files[0])

    def absent(self, ctx: PatchContext, rel: str) -> Finding:
        """The finding when none of the patch's files exists in this tree."""
        if self.since is not None and ctx.version is not None and ctx.version < Version(self.since):
            return Finding(State.NOT_NEEDED, f"nothing to change before sglang {self.since} (no {rel})")
        return Finding(State.DRIFT, f"none of {', '.join(self.files)} exists in {ctx.release}")

    def anchor_at(self, version: str) -> Anchor | None:
        """The anchor row that covers ``version``."""
        return next((anchor for anchor in self.anchors if version in anchor.seen), None)

    @property
    def doc(self) -> str:
        return (type(self).__doc__ or "").strip()
