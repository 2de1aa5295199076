"""``sm120patch self-test``: every patch's named examples run against the libcst installed here
(Fixit's self-test), so a user can check the tool before it touches sglang.

libcst is not pinned: a release that parses or prints differently would show here first, as
a named example that no longer gives its state or its code, with nothing read or written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from sm120patch.errors import ExitCode
from sm120patch.patcher.kit.model import Example, Patch, State
from sm120patch.patcher.plan.registry import all_patches, provided_for


def run_example(patch: Patch, example: Example) -> str | None:
    """What is wrong with ``patch`` on ``example`` (None: it gives its state, its detail, its
    code, compiles, and reads as applied once changed)."""
    import libcst as cst

    ctx = example.context(provided_for(patch))
    module = cst.parse_module(example.before)
    finding = patch.check(module, ctx)
    if finding.state is not example.state:
        return f"gives {finding.state.value}, expected {example.state.value}: {finding.detail}"
    if example.detail is not None and example.detail not in finding.detail:
        return f"says {finding.detail!r}, expected it to hold {example.detail!r}"
    if finding.state is State.PENDING:
        if finding.apply is None:
            return "pending with no change to make"
        changed = finding.apply(module)
        if changed.code != example.after:
            return "writes other code than the example's `after`"
        try:
            compile(changed.code, "<example>", "exec")
        except SyntaxError as exc:
            return f"writes code that does not compile ({exc.msg})"
        again = patch.check(changed, ctx)
        if again.state is not State.APPLIED:
            return f"reads as {again.state.value} once changed, not applied: {again.detail}"
    elif finding.apply is not None:
        return f"{finding.state.value} but carries a change"
    return None


@dataclass
class SelfTest:
    """Every example's verdict, and the libcst it ran with."""

    libcst: str
    counts: dict[str, int] = field(default_factory=dict)  # examples per patch
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # patch, example, why

    @property
    def exit_code(self) -> int:
        return ExitCode.NOT_AS_ASKED if self.failures else ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        return {
            "command": "self-test",
            "ok": not self.failures,
            "exit_code": int(self.exit_code),
            "libcst": self.libcst,
            "examples": sum(self.counts.values()),
            "patches": self.counts,
            "failures": [{"patch": p, "example": e, "why": why} for p, e, why in self.failures],
        }

    def render_text(self) -> None:
        from rich.text import Text

        from sm120patch.output.console import console
        from sm120patch.output.lines import put

        out = console()
        for pid, count in self.counts.items():
            failed = [f for f in self.failures if f[0] == pid]
            style = "red" if failed else "green"
            put(out, Text.assemble(f"{pid}  ", (f"{count - len(failed)} of {count} examples pass", style)))
            for _, example, why in failed:
                put(out, Text(f"{example}: {why}"), lead="    ")
        total = sum(self.counts.values())
        verdict = (
            f"every example of every patch passes with libcst {self.libcst} ({total} examples)"
            if not self.failures
            else f"{len(self.failures)} of {total} examples fail with libcst {self.libcst}: "
            "do not apply with this libcst; install the one the failures do not show"
        )
        put(out, Text(verdict, style="bold green" if not self.failures else "bold red"))


def self_test() -> SelfTest:
    result = SelfTest(metadata.version("libcst"))
    for patch in all_patches():
        result.counts[patch.id] = len(patch.examples)
        for example in patch.examples:
            try:
                why = run_example(patch, example)
            except Exception as exc:  # a libcst that raises on an example is the finding itself
                why = f"raised {type(exc).__name__}: {exc}"
            if why is not None:
                result.failures.append((patch.id, example.name, why))
    return result
