"""The fusion token limit an apply was asked for (``--fuse-up-to N`` or ``measured``), and
where it came from: carried in the manifest, so verify can name it and a plain apply keeps it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from sm120patch.locate.tree import SglangTree
from sm120patch.patchkit.model import State
from sm120patch.plan.types import PatchReport
from sm120patch.transaction.state import Manifest

PATCH_ID = "fusion-token-limit"

GIVEN = "given"  # --fuse-up-to N
MEASURED = "measured"  # --fuse-up-to measured: the crossover of the last bench on this host


@dataclass(frozen=True)
class LimitAsk:
    """A fusion token limit and its source; for a measured one, the bench that measured it."""

    limit: int
    source: str = GIVEN
    host: str | None = None
    tp: int | None = None
    gpus: tuple[str, ...] = ()
    date: str | None = None
    release: str | None = None

    def describe(self) -> str:
        """``limit 512, measured by bench on gpu7 at TP 2 on 2026-12-03`` / ``limit 512, given as --fuse-up-to 512``."""
        if self.source == MEASURED:
            return f"limit {self.limit}, measured by bench on {self.host} at TP {self.tp} on {self.date}"
        return f"limit {self.limit}, given as --fuse-up-to {self.limit}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = list(self.gpus)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LimitAsk | None:
        """None when ``data`` is not what ``to_json`` wrote (the ask is then unknown)."""
        try:
            limit = data["limit"]
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                return None
            return cls(
                limit,
                str(data.get("source", GIVEN)),
                data.get("host"),
                data.get("tp"),
                tuple(data.get("gpus") or ()),
                data.get("date"),
                data.get("release"),
            )
        except (KeyError, TypeError, ValueError):
            return None


def recorded(manifest: Manifest | None, tree: SglangTree) -> LimitAsk | None:
    """The limit the last apply of this very release was asked for, if any."""
    if manifest is None or not manifest.token_limit or not tree.same_release(manifest.sglang_version):
        return None
    return LimitAsk.from_json(manifest.token_limit)


def limit_note(reports: list[PatchReport], manifest: Manifest | None, tree: SglangTree) -> str | None:
    """The fusion token limit in force and where it came from, as verify and doctor say it."""
    report = next((r for r in reports if r.id == PATCH_ID), None)
    if report is None or report.state is State.REFUSED:
        return None
    asked = recorded(manifest, tree)
    if asked is None:
        return report.detail if report.state is State.NOT_NEEDED and "in force" in report.detail else None
    if report.state is State.APPLIED:
        return f"fusion token limit in force: {asked.describe()}"
    return (
        f"fusion token limit asked by the last apply: {asked.describe()}; "
        f"the code: {report.state.value}: {report.detail}"
    )
