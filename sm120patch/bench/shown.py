"""A bench's result as the cli shows it (``output.result.Result``): one JSON object, or its
text; a plot drawn beside it that could not be written is said in either, and is exit 2."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sm120patch.errors import ExitCode

if TYPE_CHECKING:
    from rich.console import Console


@dataclass(frozen=True)
class ShownBench:
    """``data``: the result's JSON object; ``text``: prints it for people; ``code``: the
    measurement's exit code; ``problem``: a plot that could not be written."""

    data: dict[str, Any]
    text: Callable[[Console], None]
    code: int
    problem: str | None = None

    @property
    def exit_code(self) -> int:
        return int(ExitCode.ENVIRONMENT) if self.problem else int(self.code)

    def to_json(self) -> dict[str, Any]:
        return with_problem(dict(self.data), self.problem)

    def render_text(self) -> None:
        from sm120patch.output.console import console, error

        self.text(console())
        if self.problem:
            error(self.problem)


def draw_plot(draw: Callable[[Any, Path], None], result: Any, path: Path) -> str | None:
    """``draw(result, path)`` into a temp file beside ``path``, renamed over it once whole: a
    plot is never left half-written.  The sentence naming ``path`` where it cannot be written."""
    temp = path.with_name(f".{path.stem}.{os.getpid()}.sm120patch-tmp{path.suffix}")
    try:
        draw(result, temp)
        os.replace(temp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        return f"--plot {path}: cannot write it ({exc.strerror or exc}); the measurements are reported without it"
    return None


def with_problem(data: dict[str, Any], problem: str | None) -> dict[str, Any]:
    """The result's JSON object, with the error object's keys where a problem ends the command."""
    if problem:
        data.update(ok=False, exit_code=int(ExitCode.ENVIRONMENT), error=problem)
    return data
