"""A patcher command's outcome as the cli shows it (``output.result.Result``): the text
depends on options (--docs, --dry-run) that are not part of the outcome."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sm120patch.patcher.outcome import Outcome
from sm120patch.patcher.render import as_json, as_text


@dataclass(frozen=True)
class ShownOutcome:
    outcome: Outcome
    show_docs: bool = False
    dry_run: bool = False

    @property
    def exit_code(self) -> int:
        return int(self.outcome.exit_code)

    def to_json(self) -> dict[str, Any]:
        return as_json.to_json(self.outcome)

    def render_text(self) -> None:
        as_text.render(self.outcome, show_docs=self.show_docs, dry_run=self.dry_run)
        if self.dry_run:
            as_text.print_diff(self.outcome.diff)
