"""The patches left out as asked (``apply --only`` / ``--skip``) and not applied: each named with
the clause it leaves as it is, and whether leaving it out keeps the fused path shut on SM12x
(``Patch.optional`` says why it does not).  One that does is a warning, so ``--strict`` refuses
on it; one that does not (the model auto-enable, the opt-in token limit) never is."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan.registry import by_id
from sm120patch.patcher.plan.types import Plan

#: Starts the warning that a left-out patch keeps the fused path shut: matched by scripts.
SHUT = "left-out-shuts-fusion"
_ASKED = "left out as asked (--only / --skip)"


@dataclass(frozen=True)
class LeftOut:
    patch: str
    file: str  # relative to the sglang package dir
    line: int | None  # the patch's first evidence line: the clause it would change
    function: str  # "Class.method", "name", or "<module>"
    optional: str | None  # why the fused path stays open without it; None: it stays shut

    @property
    def where(self) -> str:
        line = f":{self.line}" if self.line is not None else ""
        return f"sglang/{self.file}{line} {self.function}"

    def sentence(self) -> str:
        if self.optional is None:
            return f"{_ASKED}: {self.patch} at {self.where}: the fused path stays shut on SM12x without it"
        return f"{_ASKED}: {self.patch} at {self.where}: {self.optional}"

    def to_json(self) -> dict[str, Any]:
        """One of ``left_out`` in ``--json``."""
        data = asdict(self)
        data["file"] = f"sglang/{self.file}"
        data["keeps_fused_path_shut"] = data.pop("optional") is None
        return data


def left_out(plan: Plan) -> list[LeftOut]:
    """Each patch ``plan`` reads as left out (``Plan.skipped``), in the plan's order."""
    if not plan.skipped:
        return []  # the registry loads libcst: a trusted verify with nothing left out never does
    registry = by_id()
    return [
        LeftOut(
            r.id,
            r.file,
            r.evidence[0].line if r.evidence else None,
            r.where or "<module>",
            registry[r.id].optional,
        )
        for r in plan.skipped
    ]


def still_applied(plan: Plan) -> list[str]:
    """One sentence naming the patches left out as asked that an earlier apply applied: ``--only``
    / ``--skip`` leave a patch as they find it, so they stay in, and the commands that take them
    out are said (else asking to leave one out would silently change nothing)."""
    kept = [r.id for r in plan.left_out if r.state is State.APPLIED]
    if not kept:
        return []
    it, stays = ("it", "stays") if len(kept) == 1 else ("them", "stay")
    out = ",".join(r.id for r in plan.left_out)
    return [
        f"{', '.join(kept)} {stays} applied: --only / --skip leave a patch an earlier apply applied as it is; "
        f"`sm120patch revert`, then `sm120patch apply --skip {out}` takes {it} out"
    ]


def shut_warning(found: list[LeftOut]) -> list[str]:
    """One sentence naming the left-out patches that keep the fused path shut, and the apply
    that adds them (and keeps the others out); none where no such patch was left out."""
    shut = [f for f in found if f.optional is None]
    if not shut:
        return []
    names = ", ".join(f"{f.patch} ({f.where})" for f in shut)
    ids = ",".join(f.patch for f in shut)
    them = "it" if len(shut) == 1 else "them"
    return [
        f"[{SHUT}] {_ASKED}, {names} keep{'s' if len(shut) == 1 else ''} the fused path shut on SM12x: "
        f"`sm120patch apply --only {ids}` adds {them}"
    ]
