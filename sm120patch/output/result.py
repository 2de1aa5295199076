"""The one contract a command's result keeps with the cli: an exit code, one JSON object for
``--json``, and its text for people; the cli renders every result in one place."""

from __future__ import annotations

from typing import Any, Protocol


class Result(Protocol):
    @property
    def exit_code(self) -> int: ...

    def to_json(self) -> dict[str, Any]: ...

    def render_text(self) -> None: ...
