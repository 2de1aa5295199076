"""What a ``.dockerignore`` leaves in a build context, by Docker's rules (moby/patternmatcher):
patterns are relative to the context root, ``*`` and ``?`` stay inside one path element,
``**`` spans any number of them, a pattern that matches a directory excludes all below it,
``!`` re-includes, and the last pattern that matches a path decides."""

from __future__ import annotations

import os
import re
from pathlib import Path


def _regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif char == "*":
            out, i = out + "[^/]*", i + 1
        elif char == "?":
            out, i = out + "[^/]", i + 1
        elif char == "[":
            end = pattern.index("]", i + 1)
            body = pattern[i + 1 : end]
            out, i = out + "[" + ("^" + body[1:] if body[:1] in "!^" and body else body) + "]", end + 1
        else:
            out, i = out + re.escape(char), i + 1
    return re.compile(out + r"\Z")


def rules(dockerignore: Path) -> list[tuple[bool, re.Pattern[str]]]:
    """(exclude?, regex) per pattern, in file order."""
    found = []
    for raw in dockerignore.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exclude = not line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        found.append((exclude, _regex(pattern)))
    return found


def excluded(rel: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether ``rel`` (a path relative to the context, with /) stays out of the context."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for exclude, regex in patterns:
        if any(regex.match(prefix) for prefix in prefixes):
            verdict = exclude
    return verdict


def context_files(root: Path, dockerignore: Path) -> list[str]:
    """Every file the build context holds, relative to ``root``."""
    patterns = rules(dockerignore)
    kept = []
    for folder, dirs, files in os.walk(root):
        base = Path(folder).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        # A directory excluded as a whole is not walked unless an exception could re-include below it.
        if not any(not exclude for exclude, _ in patterns):
            dirs[:] = [d for d in dirs if not excluded(prefix + d, patterns)]
        kept += [prefix + f for f in files if not excluded(prefix + f, patterns)]
    return sorted(kept)
