"""Crash consistency: every disk state a power cut could leave during apply or revert.

A process kill cannot show a missing fsync (the page cache survives it); a power cut can.
In the manner of SQLite's crash tests and ALICE (OSDI '14), the operations apply and revert
make on disk are recorded through ``fsutil.OP_HOOK`` (every change goes through fsutil),
replayed into ``PowerCutModel``, and at every point every disk state allowed by these
rules is built:

* data that was fsynced stays; a file written but not fsynced may come back whole, empty
  or cut in half;
* a rename, a new file's name or an unlink is durable only once its directory is fsynced;
  before that it may or may not have happened (any subset of the pending ones).

On each state recovery runs (the next ``apply``, and ``revert``) and the invariant is
checked: every target file is the original or the fully patched version, byte for byte; an
operation that returned is durable; the next apply patches everything and the next revert
restores the originals.  The last test shows that each durability slip makes the check fail.

The same holds where the targets are symlinks into a store (uv's ``--link-mode=symlink``):
a symlink is its text (``Link``), made atomically with its name; each target is the link as
installed or the patched file, and the store is never written.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sm120patch.errors import ToolError
from sm120patch.patcher.commands.apply import apply
from sm120patch.patcher.commands.revert import revert
from sm120patch.patcher.plan.registry import all_patches
from sm120patch.patcher.transaction import fsutil
from sm120patch.sglang.tree import from_directory
from tests.support.mini_sglang import write_mini_sglang
from tests.support.shared_store import linked_site, store_digest


@dataclass(frozen=True)
class Link:
    """A symlink in a disk state: its text."""

    text: str


Content = bytes | Link

SUBSETS_UP_TO = 6  # pending operations beyond this are taken in order (prefixes), not as subsets
CUTS_UP_TO = 3  # files not fsynced beyond this are cut one at a time, not in every combination


@dataclass
class PowerCutModel:
    """Names and data as a power cut leaves them (relative paths under ``root``)."""

    root: Path
    inodes: dict[int, tuple[Content, bool]] = field(default_factory=dict)  # data, fsynced
    current: dict[str, int] = field(default_factory=dict)  # what the running process sees
    durable: dict[str, int] = field(default_factory=dict)  # names that survive a power cut
    pending: list[tuple[tuple[str, ...], set[str]]] = field(default_factory=list)  # (op, dirs to fsync)

    @classmethod
    def of(cls, root: Path) -> PowerCutModel:
        model = cls(root)
        for path in sorted(root.rglob("*")):
            if path.is_symlink() or path.is_file():
                model._new(model._rel(path), read(path), synced=True)
        model.durable = dict(model.current)
        return model

    def _rel(self, path: Path) -> str:
        return (Path(os.path.realpath(path.parent)) / path.name).relative_to(os.path.realpath(self.root)).as_posix()

    def _new(self, rel: str, data: Content, synced: bool) -> int:
        inode = len(self.inodes)
        self.inodes[inode] = (data, synced)
        self.current[rel] = inode
        return inode

    def take(self, op: fsutil.Op) -> None:
        rel = self._rel(op.path)
        if op.kind == "create":
            inode = self._new(rel, op.data or b"", synced=False)
            self.pending.append((("link", rel, str(inode)), {_dir(rel)}))
        elif op.kind == "symlink":  # its text is in the inode it is made with
            inode = self._new(rel, Link(os.fsdecode(op.data or b"")), synced=True)
            self.pending.append((("link", rel, str(inode)), {_dir(rel)}))
        elif op.kind == "fsync":
            data, _ = self.inodes[self.current[rel]]
            self.inodes[self.current[rel]] = (data, True)
        elif op.kind == "rename":
            assert op.target is not None
            target = self._rel(op.target)
            inode = self.current.pop(rel)
            self.current[target] = inode
            self.pending.append((("rename", rel, target, str(inode)), {_dir(rel), _dir(target)}))
        elif op.kind == "unlink":
            self.current.pop(rel, None)
            self.pending.append((("unlink", rel), {_dir(rel)}))
        elif op.kind == "fsync_dir":
            for _, dirs in self.pending:
                dirs.discard(rel)
            done = [p for p in self.pending if not p[1]]
            self.pending = [p for p in self.pending if p[1]]
            for named, _ in done:
                _replay(self.durable, named)
        else:
            raise AssertionError(f"unknown operation {op.kind}")

    def states(self) -> Iterator[dict[str, Content]]:
        """Every disk state a power cut now could leave."""
        ops = [named for named, _ in self.pending]
        if len(ops) <= SUBSETS_UP_TO:
            choices: Iterator[tuple[tuple[str, ...], ...]] = itertools.chain.from_iterable(
                itertools.combinations(ops, n) for n in range(len(ops) + 1)
            )
        else:
            choices = (tuple(ops[:n]) for n in range(len(ops) + 1))
        for chosen in choices:
            names = dict(self.durable)
            for named in chosen:
                _replay(names, named)
            unsynced = sorted({i for i in names.values() if not self.inodes[i][1]})
            for cut in _cuts(unsynced):
                yield {rel: _data(self.inodes[i][0], cut.get(i, "whole")) for rel, i in names.items()}


def _cuts(unsynced: list[int]) -> Iterator[dict[int, str]]:
    """How the data not yet fsynced may come back: every combination for up to
    ``CUTS_UP_TO`` files, else one file cut at a time (the others whole)."""
    if len(unsynced) <= CUTS_UP_TO:
        for cuts in itertools.product(("whole", "empty", "half"), repeat=len(unsynced)):
            yield dict(zip(unsynced, cuts, strict=True))
        return
    yield {}
    for inode in unsynced:
        yield {inode: "empty"}
        yield {inode: "half"}


def _dir(rel: str) -> str:
    parent = Path(rel).parent.as_posix()
    return "" if parent == "." else parent


def _replay(names: dict[str, int], named: tuple[str, ...]) -> None:
    if named[0] == "link":
        names[named[1]] = int(named[2])
    elif named[0] == "rename":
        names.pop(named[1], None)
        names[named[2]] = int(named[3])
    else:
        names.pop(named[1], None)


def _data(data: Content, cut: str) -> Content:
    if isinstance(data, Link):
        return data
    return {"whole": data, "empty": b"", "half": data[: len(data) // 2]}[cut]


@dataclass
class Recorded:
    """The disk states of one operation: (states after op k, whether the operation had returned)."""

    points: list[tuple[list[dict[str, Content]], bool]]


def record(root: Path, run: Callable[[], object], keep: Callable[[fsutil.Op], bool] = lambda op: True) -> Recorded:
    model = PowerCutModel.of(root)
    points: list[tuple[list[dict[str, Content]], bool]] = [(list(model.states()), False)]

    def hook(op: fsutil.Op) -> None:
        where = Path(os.path.realpath(op.path.parent))  # a link's own folder, not what it leads to
        if where.is_relative_to(os.path.realpath(root)) and keep(op):
            model.take(op)
            points.append((list(model.states()), False))

    fsutil.OP_HOOK = hook
    try:
        run()
    finally:
        fsutil.OP_HOOK = None
    points.append((list(model.states()), True))
    return Recorded(points)


def site_with_release(tmp: Path, store: Path | None = None) -> tuple[Path, Path]:
    """The mini release under ``tmp/site``: its own files, or (``store``) links into the
    release written there, as uv's ``--link-mode=symlink`` installs it."""
    site = tmp / "site"
    if store is None:
        return site, write_mini_sglang(site)
    if not store.is_dir():
        write_mini_sglang(store)
    return site, linked_site(store, site)


def read(path: Path) -> Content:
    return Link(os.readlink(path)) if path.is_symlink() else path.read_bytes()


def files_of(root: Path) -> dict[str, Content]:
    return {p.relative_to(root).as_posix(): read(p) for p in root.rglob("*") if p.is_symlink() or p.is_file()}


def materialize(state: dict[str, Content], root: Path) -> None:
    """Make the files under ``root`` exactly ``state`` (only what differs is written)."""
    on_disk = files_of(root) if root.is_dir() else {}
    for rel in on_disk.keys() - state.keys():
        (root / rel).unlink()
    for rel, data in state.items():
        if on_disk.get(rel) != data:
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink() or isinstance(data, Link):
                path.unlink(missing_ok=True)
            if isinstance(data, Link):
                path.symlink_to(data.text)
            else:
                path.write_bytes(data)


def _significant(state: dict[str, Content]) -> dict[str, Content]:
    """A state without the temp files of unfinished writes: recovery deletes them unread,
    so states that differ only there are one state."""
    return {rel: data for rel, data in state.items() if not rel.endswith(fsutil.TEMP_SUFFIX)}


def _digest(state: dict[str, Content]) -> str:
    h = hashlib.sha256()
    for rel in sorted(state):
        data = state[rel]
        h.update(rel.encode() + b"\0" + (b"link:" + data.text.encode() if isinstance(data, Link) else data) + b"\0")
    return h.hexdigest()


@dataclass
class Expect:
    original: dict[str, Content]  # target (relative to the site) -> bytes before apply
    patched: dict[str, Content]  # and after

    def problems(self, state: dict[str, Content], returned: bool, final: dict[str, Content], root: Path) -> list[str]:
        """What is wrong with this crash state, after recovery by the next apply and revert.
        The state is laid out where it was recorded (the journal names absolute paths)."""
        found = []
        for rel in self.original:
            have = state.get(rel)
            if have not in (self.original[rel], self.patched[rel]):
                found.append(f"{rel} is neither the original nor the patched file ({have!r:.60})")
            elif returned and have != final[rel]:
                found.append(f"{rel}: the operation returned, but the power cut undid it")
        for action, want in (("apply", self.patched), ("revert", self.original)):
            materialize(state, root)
            package = root / "sglang"
            tree = from_directory(package)
            try:
                outcome = apply(tree, list(all_patches())) if action == "apply" else revert(tree)
            except ToolError as exc:
                found.append(f"the next {action} stopped: {exc}")
                continue
            after = {rel: read(root / rel) for rel in want}
            if outcome.exit_code != 0 or after != want:
                wrong = sorted(rel for rel in want if after[rel] != want[rel])
                found.append(
                    f"the next {action} gave exit {int(outcome.exit_code)} ({outcome.headline}); wrong: {wrong}"
                )
        return found


def check(
    recorded: Recorded, expect: Expect, final: dict[str, Content], root: Path, first_only: bool = False
) -> list[str]:
    """Every problem of every distinct crash state (``first_only``: stop at the first,
    looking from the last point back, where a lost write shows soonest)."""
    seen: set[str] = set()
    problems: list[str] = []
    points = list(enumerate(recorded.points))
    for point, (states, returned) in reversed(points) if first_only else points:
        for state in map(_significant, states):
            key = _digest(state) + str(returned)
            if key in seen:
                continue
            seen.add(key)
            found = expect.problems(state, returned, final, root)
            problems += [f"power cut after operation {point}: {p}" for p in found]
            if problems and first_only:
                return problems
    return problems


def applied_release(tmp: Path, store: Path | None = None) -> tuple[Path, Path, Expect]:
    """A site with the mini release (``store``: linked into it), and what apply makes of its
    targets."""
    site, package = site_with_release(tmp / "probe", store)
    before = files_of(site)
    assert apply(from_directory(package), list(all_patches())).exit_code == 0
    after = files_of(site)
    targets = sorted(rel for rel in before if rel.startswith("sglang/") and after.get(rel) != before[rel])
    assert targets, "the mini release has nothing to patch"
    expect = Expect({rel: before[rel] for rel in targets}, {rel: after[rel] for rel in targets})
    site, package = site_with_release(tmp / "run", store)
    return site, package, expect


@pytest.mark.offline
def test_apply_survives_a_power_cut_anywhere(tmp_path: Path) -> None:
    site, package, expect = applied_release(tmp_path)
    recorded = record(site, lambda: apply(from_directory(package), list(all_patches())))
    assert len(recorded.points) > 20  # the write path was recorded, not skipped
    assert check(recorded, expect, expect.patched, site) == []


@pytest.mark.offline
def test_revert_survives_a_power_cut_anywhere(tmp_path: Path) -> None:
    site, package, expect = applied_release(tmp_path)
    assert apply(from_directory(package), list(all_patches())).exit_code == 0
    recorded = record(site, lambda: revert(from_directory(package)))
    assert check(recorded, expect, expect.original, site) == []


@pytest.mark.offline
def test_apply_over_links_into_a_store_survives_a_power_cut_anywhere(tmp_path: Path) -> None:
    store = tmp_path / "store"
    site, package, expect = applied_release(tmp_path, store)
    assert all(isinstance(v, Link) for v in expect.original.values())
    before = store_digest(store)
    recorded = record(site, lambda: apply(from_directory(package), list(all_patches())))
    assert check(recorded, expect, expect.patched, site) == []
    assert store_digest(store) == before  # nor did any recovery write there


@pytest.mark.slow  # as costly as the revert of files above; the tests the mutation runs take catch each step instead
def test_revert_back_to_links_into_a_store_survives_a_power_cut_anywhere(tmp_path: Path) -> None:
    store = tmp_path / "store"
    site, package, expect = applied_release(tmp_path, store)
    assert apply(from_directory(package), list(all_patches())).exit_code == 0
    before = store_digest(store)
    recorded = record(site, lambda: revert(from_directory(package)))
    assert any(isinstance(s.get(rel), Link) for states, _ in recorded.points for s in states for rel in expect.original)
    assert check(recorded, expect, expect.original, site) == []
    assert store_digest(store) == before


def test_recovery_never_overwrites_a_file_someone_else_changed(tmp_path: Path) -> None:
    """A journal left by a power cut, and a target changed since by someone else: the next
    apply finishes nothing over it and says so."""
    site, package, expect = applied_release(tmp_path)
    recorded = record(site, lambda: apply(from_directory(package), list(all_patches())))
    with_journal = next(
        s
        for states, _ in recorded.points
        for s in states
        if "sglang/.sm120patch/journal.json" in s and all(s.get(r) == expect.original[r] for r in expect.original)
    )
    root = site
    materialize(with_journal, root)
    target = sorted(expect.original)[0]
    (root / target).write_bytes(b"# someone else's edit\n")
    outcome = apply(from_directory(root / "sglang"), list(all_patches()))
    assert outcome.exit_code != 0
    assert (root / target).read_bytes() == b"# someone else's edit\n"


SLIPS = {
    # fsync_dir made nothing durable: a rename or unlink could be undone by a power cut
    "no directory fsync after a rename": lambda op: op.kind != "fsync_dir",
    # written, never fsynced: a backup (or the journal) could come back empty
    "no fsync of the written data": lambda op: op.kind != "fsync",
}


@pytest.mark.parametrize("slip", sorted(SLIPS))
def test_each_durability_slip_is_caught(tmp_path: Path, slip: str) -> None:
    """The same check on a write path that lacks one durability step finds the loss."""
    site, package, expect = applied_release(tmp_path)
    recorded = record(site, lambda: apply(from_directory(package), list(all_patches())), keep=SLIPS[slip])
    assert check(recorded, expect, expect.patched, site, first_only=True) != []
