"""Rich text on stderr for people: the patch report, doctor's findings, errors, the diff."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from sm120patch.output.console import console, printable
from sm120patch.output.lines import longest_word, put
from sm120patch.patcher.kit.model import FOUND_BY_ROLE, State
from sm120patch.patcher.outcome import Command, Outcome
from sm120patch.patcher.plan.types import PatchReport
from sm120patch.sglang.tree import InstallKind

if TYPE_CHECKING:  # rich loads only to render for people (JSON output never needs it)
    from rich.console import Console

    from sm120patch.patcher.runtime import RuntimeCheck

_STYLE = {
    State.APPLIED: "green",
    State.NOT_NEEDED: "cyan",
    State.PENDING: "yellow",
    State.DRIFT: "bold red",
    State.REFUSED: "bold red",
    State.SKIPPED: "dim",
}


#: The narrowest detail column the patch table keeps beside its id and state.
MIN_DETAIL_WIDTH = 24


def _label(report: PatchReport, dry_run: bool) -> str:
    after = report.state_after or report.state
    if after is report.state:
        return report.state.value
    return f"{report.state.value}, would apply" if dry_run else f"{report.state.value} -> {after.value}"


def render(outcome: Outcome, show_docs: bool = False, dry_run: bool = False, brief: bool = False) -> None:
    """The patch report: one table per file (files in path order, as verify and doctor list
    them), each detail wrapping at spaces inside its own column, or under its patch where the
    column is too narrow for a word of it (a name is never split; ``lines.put``).  ``brief``:
    no evidence and no per-file hashes (the demo)."""
    from rich.text import Text

    out = console()
    tree = outcome.tree
    header = Text.assemble(
        ("sglang ", "bold"),
        (printable(tree.version or "(unknown version)"), "bold"),
        f"  {printable(tree.package_dir)}  ",
        (f"[{tree.install_kind.value}]", "dim"),
    )
    put(out, header)  # the path, on a line of its own if need be, copies whole
    if tree.install_kind is InstallKind.EDITABLE:
        put(out, Text("note: editable install: this edits your sglang checkout", style="yellow"))
    plan = outcome.plan
    # A revert with nothing to restore: every patch pending or not needed, which the headline says.
    nothing_restored = outcome.command is Command.REVERT and outcome.exit_code == 0
    if plan is not None and plan.reports and not nothing_restored:
        labels = {id(r): _label(r, dry_run) for r in plan.reports}
        details = {id(r): Text(r.summary if show_docs else printable(r.detail)) for r in plan.reports}
        widths = (max(len(r.id) for r in plan.reports), max(len(label) for label in labels.values()))
        # Three columns (each padded by 3) only where the detail keeps room to be read and its
        # every word fits the column whole; else the detail goes on its own lines under its patch.
        room = out.width - widths[0] - widths[1] - 9
        stacked = room < max(MIN_DETAIL_WIDTH, *(longest_word(d) for d in details.values()))
        for rel in sorted({r.file for r in plan.reports}):
            put(out, Text(f"sglang/{rel}", style="bold"))
            for r in (r for r in plan.reports if r.file == rel):
                state = r.state_after or r.state
                # Text, not str: a str would be read as rich markup ("sizes[i]" would lose "[i]").
                label = Text(labels[id(r)], style=_STYLE[state])
                if stacked:
                    put(out, Text.assemble(r.id, "  ", label), lead="  ")
                    put(out, details[id(r)], lead="    ")
                else:
                    lead = Text.assemble(
                        "  ", r.id.ljust(widths[0]), "   ", label, " " * (widths[1] - len(label)), "   "
                    )
                    put(out, details[id(r)], lead=lead)
                if r.found_by == FOUND_BY_ROLE:
                    found = f"found by role in sglang/{r.found_at}, not a known layout"
                    put(out, Text(found, style="yellow"), lead="    ")
        evidence = sorted({(r.file, e) for r in plan.reports for e in r.evidence}, key=lambda x: (x[0], x[1].line))
        if evidence and outcome.command in (Command.VERIFY, Command.APPLY) and not brief:
            planned = not outcome.written and any(r.state_after not in (None, r.state) for r in plan.reports)
            # A dry run's lines are the ones apply would write, not what the files hold.
            put(out, Text("evidence, as apply would write it:" if planned else "evidence:", style="bold"))
            for rel in sorted({rel for rel, _ in evidence}):  # the file once, then line and code
                put(out, Text(f"sglang/{rel}", style="dim"), lead="  ")
                shown = [e for item, e in evidence if item == rel]
                digits = max(len(str(e.line)) for e in shown)
                for e in shown:
                    lead = Text.assemble("    ", (str(e.line).rjust(digits), "dim"), "     ")
                    put(out, Text(printable(e.text.strip())), lead=lead)
    if show_docs:  # the docs are the output asked for: stdout, rendered
        from rich.console import Console

        from sm120patch.patcher.render.docs import render_docs, render_known_gates

        render_docs(Console(highlight=False))
        render_known_gates(Console(highlight=False))
    if outcome.files and outcome.command in (Command.VERIFY, Command.REVERT) and not brief:
        for f in sorted(outcome.files, key=lambda f: f.rel):
            if f.pristine is None:
                problem = tree.record.problem
                kind = f"no RECORD hash ({printable(problem)})" if problem else "no RECORD entry"
            else:
                kind = "matches the release (RECORD)" if f.pristine else "differs from the release"
            recorded = f", {f.recorded.value} per saved state" if f.recorded else ""
            put(out, Text(f"sglang/{f.rel}: {kind}{recorded}", style="dim"), lead="  ")
    if outcome.runtime is not None:
        _render_runtime(out, outcome.runtime)
    for gone in outcome.left_out:
        put(out, Text(printable(gone.sentence())))
    for note in dict.fromkeys(outcome.notes):  # each once, in order
        put(out, Text(printable(note)))
    for warning in dict.fromkeys(outcome.warnings):
        put(out, Text.assemble(("warning: ", "bold yellow"), (printable(warning), "yellow")))
    style = "bold green" if outcome.exit_code == 0 else "bold red"
    headline = f"[{outcome.code}] {outcome.headline}" if outcome.code else outcome.headline
    put(out, Text(printable(headline), style=style))


def _render_runtime(out: Console, result: RuntimeCheck) -> None:
    from rich.text import Text

    put(out, Text(printable(f"runtime ({result.python}):"), style="bold"))
    torch = result.torch
    if torch is None or not torch.ok:
        put(out, Text(printable(f"torch: {torch.error if torch else None}"), style="red"), lead="  ")
        return
    gpu = f"{torch.device} (cc {'.'.join(map(str, torch.capability))})" if torch.capability else "no CUDA GPU visible"
    put(out, Text(printable(f"torch {torch.version} (CUDA {torch.cuda}), {gpu}")), lead="  ")
    package = result.sglang
    if package is None or not package.ok:
        error = package.error if package else None
        put(out, Text(printable(f"import sglang: {error}"), style="red"), lead="  ")
        return
    probe = result.probe
    if probe is not None and probe.ok:
        put(out, Text(printable(f"{probe.expression} = {probe.value}")), lead="  ")
    else:
        put(
            out,
            Text(printable(f"SM120 probe failed: {probe.error if probe else None}"), style="red"),
            lead="  ",
        )
    for module in result.modules:
        if module.ok:
            flags = " ".join(f"{k}={v}" for k, v in module.flags.items()) or "(no cached SM flags)"
            put(out, Text(printable(f"{module.module}: imports; {flags}")), lead="  ")
        else:
            put(out, Text(printable(f"{module.module}: {module.error}"), style="red"), lead="  ")


def print_diff(diff: str) -> None:
    """The diff on stdout: highlighted on a terminal, plain when piped (and then rich's
    highlighter, which loads pygments, is never imported)."""
    if not diff:
        return
    if not sys.stdout.isatty():
        sys.stdout.write(diff)
        return
    from rich.console import Console
    from rich.syntax import Syntax

    Console(highlight=False).print(Syntax(diff, "diff", theme="ansi_dark", background_color="default"))
