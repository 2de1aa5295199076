"""The backtest of role finding over sglang's history: each release where a target moved,
was renamed or respelled (a release where one of the patches' anchor rows begins), patched
by the tool as it would have been the day the release before it was the newest
(``SM120PATCH_KNOWN_UP_TO``: every row first seen later is forgotten, and so is every patch
none of whose rows was known yet), and compared byte for byte with the tool of today.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from packaging.version import Version

from sm120patch.patcher.kit.model import FOUND_BY_ROLE, KNOWN_UP_TO
from sm120patch.patcher.plan.registry import all_patches
from sm120patch.sglang.releases import ALL_RELEASES
from tests.support.realtrees import copy_release


def moves() -> list[tuple[str, str]]:
    """(release, the release before it) for every release where an anchor row begins, from
    the patches' own rows (0.5.4, where the tool begins, has nothing before it)."""
    firsts = {a.seen.first for p in all_patches() for a in p.anchors}
    ordered = sorted(ALL_RELEASES, key=Version)
    return [
        (v, ordered[ordered.index(v) - 1])
        for v in sorted(firsts, key=Version)
        if v in ordered and Version(v) > Version("0.5.4")
    ]


@contextmanager
def known_up_to(version: str | None) -> Iterator[None]:
    old = os.environ.get(KNOWN_UP_TO)
    if version is None:
        os.environ.pop(KNOWN_UP_TO, None)
    else:
        os.environ[KNOWN_UP_TO] = version
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(KNOWN_UP_TO, None)
        else:
            os.environ[KNOWN_UP_TO] = old


def _run(version: str, knowledge: str | None, scratch: Path) -> dict[str, Any]:
    from sm120patch.patcher.commands.apply import apply as apply_tree
    from sm120patch.patcher.commands.verify import verify as verify_tree
    from sm120patch.sglang.tree import from_directory

    package = copy_release(version, scratch)
    with known_up_to(knowledge):
        tree = from_directory(package)
        applied = apply_tree(tree)
        checked = verify_tree(tree)
    reports = checked.plan.reports if checked.plan else []
    return {
        "exit_code": int(applied.exit_code),
        "headline": applied.headline,
        "files": {rel: (package / rel).read_bytes() for rel in applied.written},
        "states": {r.id: r.state.value for r in reports},
        "by_role": {r.id: r.found_at for r in reports if r.found_by == FOUND_BY_ROLE},
        "warnings": list(checked.warnings),
    }


def backtest(version: str, before: str) -> dict[str, Any]:
    """``version`` patched with today's knowledge and with the knowledge of ``before``."""
    with tempfile.TemporaryDirectory() as scratch:
        today = _run(version, None, Path(scratch) / "today")
        then = _run(version, before, Path(scratch) / "then")
    # A patch today's tool has and the tool of then did not, which changes this release today.
    left_out = sorted(pid for pid in set(today["states"]) - set(then["states"]) if today["states"][pid] != "not-needed")
    return {
        "version": version,
        "known_up_to": before,
        "exit_code": then["exit_code"],
        "same_bytes": then["files"] == {rel: data for rel, data in today["files"].items() if rel in then["files"]},
        "written": sorted(then["files"]),
        "written_today": sorted(today["files"]),
        "by_role": then["by_role"],
        "new_obstacles": left_out,
        "warnings_then": then["warnings"],
        "headline_then": then["headline"],
    }
