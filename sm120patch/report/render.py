"""Render outcomes: rich text on stderr for people, one JSON object on stdout for machines.

The JSON shape is documented in README.md ("JSON output") and versioned by ``SCHEMA``.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from sm120patch import __version__
from sm120patch.locate.tree import InstallKind, SglangTree
from sm120patch.patchkit.model import Edit, State
from sm120patch.plan import releases
from sm120patch.report.outcome import Command, Outcome

if TYPE_CHECKING:  # rich loads only to render for people (JSON output never needs it)
    from rich.console import Console

    from sm120patch.doctor.checkup import DoctorReport

SCHEMA = "sm120patch/1"

_STYLE = {
    State.APPLIED: "green",
    State.NOT_NEEDED: "cyan",
    State.PENDING: "yellow",
    State.DRIFT: "bold red",
    State.REFUSED: "bold red",
}
_SEVERITY_STYLE = {"ok": "green", "info": "cyan", "warning": "yellow", "error": "bold red"}


# --- JSON ----------------------------------------------------------------------------------


def tree_json(tree: SglangTree) -> dict[str, Any]:
    facts = tree.flashinfer_facts
    pin = releases.pin_for(tree.version)
    return {
        "version": tree.version,
        "location": str(tree.package_dir),
        "install_kind": tree.install_kind.value,
        "dist_info": str(tree.dist_info) if tree.dist_info else None,
        "found_by": tree.how_found,
        "python": tree.python,
        "flashinfer": tree.flashinfer,
        "flashinfer_pinned": pin,
        "flashinfer_has_sm12x_allreduce": (
            facts.sm12x_kernel if facts.found else releases.flashinfer_has_sm12x_kernel(pin)
        ),
        "flashinfer_evidence": facts.source,
        "record_problem": tree.record.problem,
    }


def _patch_json(
    ident: str,
    summary: str,
    requires: tuple[str, ...],
    file: str | None,
    state: State,
    after: State,
    where: str,
    detail: str,
    evidence: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "id": ident,
        "summary": summary,
        "requires": list(requires),
        "file": file,
        "state": state.value,
        "state_after": after.value,
        "where": where,
        "detail": detail,
        "evidence": evidence,
    }


def to_json(outcome: Outcome) -> dict[str, Any]:
    plan = outcome.plan
    if plan is not None and plan.refusal:
        from sm120patch.plan.registry import all_patches

        patches = [
            _patch_json(p.id, p.summary, p.requires, None, State.REFUSED, State.REFUSED, "", plan.refusal, [])
            for p in all_patches()
        ]
    else:
        patches = [
            _patch_json(
                r.id,
                r.summary,
                r.requires,
                f"sglang/{r.file}",
                r.state,
                r.state_after or r.state,
                r.where,
                r.detail,
                [{"file": f"sglang/{r.file}", "line": e.line, "text": e.text} for e in r.evidence],
            )
            for r in (plan.reports if plan else [])
        ]
    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "command": outcome.command.value,
        "ok": outcome.exit_code == 0,
        "exit_code": int(outcome.exit_code),
        "headline": outcome.headline,
        "sglang": tree_json(outcome.tree),
        "refusal": plan.refusal if plan else None,
        "patches": patches,
        "files": [
            {
                "file": f"sglang/{f.rel}",
                "sha256": f.sha256,
                "record_sha256": f.record_sha256,
                "pristine": f.pristine,
                "recorded": f.recorded.value if f.recorded else None,
                "checked_by": f.checked_by.value,
            }
            for f in outcome.files
        ],
        "state": outcome.state.to_json() if outcome.state else {},
        "written": [f"sglang/{rel}" for rel in outcome.written],
        "messages": outcome.notes,
        "warnings": outcome.warnings,
        "runtime": outcome.runtime,
        "diff": outcome.diff,
    }


def error_json(message: str, exit_code: int) -> dict[str, Any]:
    return {"schema": SCHEMA, "tool_version": __version__, "ok": False, "exit_code": int(exit_code), "error": message}


def doctor_json(tree: SglangTree | None, result: DoctorReport) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "command": "doctor",
        "ok": result.exit_code == 0,
        "exit_code": result.exit_code,
        "headline": result.headline,
        "sglang": tree_json(tree) if tree is not None else None,
        "findings": [f.to_json() for f in result.findings],
    }


def print_json(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


# --- people --------------------------------------------------------------------------------


def console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def render(outcome: Outcome, show_docs: bool = False) -> None:
    from rich.text import Text

    out = console()
    tree = outcome.tree
    out.print(
        Text.assemble(
            ("sglang ", "bold"),
            (tree.version or "(unknown version)", "bold"),
            f"  {tree.package_dir}  ",
            (f"[{tree.install_kind.value}]", "dim"),
        )
    )
    if tree.install_kind is InstallKind.EDITABLE:
        out.print(Text("note: editable install: this edits your sglang checkout", style="yellow"))
    plan = outcome.plan
    if plan is not None and plan.reports:
        current = None
        for r in plan.reports:
            if r.file != current:
                current = r.file
                out.print(Text(f"sglang/{r.file}", style="bold"))
            state = r.state_after or r.state
            label = r.state.value if state is r.state else f"{r.state.value} -> {state.value}"
            detail = r.summary if show_docs else r.detail
            out.print(Text.assemble(f"  {r.id:<26} ", (f"{label:<20}", _STYLE[state]), " ", detail), soft_wrap=True)
        evidence = [(r.file, e) for r in plan.reports for e in r.evidence]
        if evidence and outcome.command in (Command.VERIFY, Command.APPLY):
            out.print(Text("evidence:", style="bold"))
            for rel, e in sorted(set(evidence), key=lambda x: (x[0], x[1].line)):
                out.print(Text(f"  sglang/{rel}:{e.line}:{e.text}"), soft_wrap=True)
    if show_docs:
        render_docs(out)
    if outcome.files and outcome.command in (Command.VERIFY, Command.REVERT):
        for f in outcome.files:
            if f.pristine is None:
                kind = f"no RECORD hash ({tree.record.problem})" if tree.record.problem else "no RECORD entry"
            else:
                kind = "matches the release (RECORD)" if f.pristine else "differs from the release"
            recorded = f", {f.recorded.value} per saved state" if f.recorded else ""
            out.print(Text(f"  sglang/{f.rel}: {kind}{recorded}", style="dim"), soft_wrap=True)
    if outcome.runtime is not None:
        _render_runtime(out, outcome.runtime)
    for note in outcome.notes:
        out.print(Text(note), soft_wrap=True)
    for warning in outcome.warnings:
        out.print(Text.assemble(("warning: ", "bold yellow"), (warning, "yellow")), soft_wrap=True)
    style = "bold green" if outcome.exit_code == 0 else "bold red"
    out.print(Text(outcome.headline, style=style), soft_wrap=True)


def patch_table_markdown() -> str:
    """README's "What it changes" table, generated from the patches' own anchor tables."""
    from sm120patch.plan.registry import all_patches

    rows = ["| patch | where it looks (file: what, releases) | what it changes |", "|---|---|---|"]
    for patch in all_patches():
        places = []
        for anchor in patch.anchors:
            extra = [anchor.expect.value] if anchor.expect is not State.PENDING else []
            extra += [anchor.note] if anchor.note else []
            extra += ["adds the import"] if anchor.imports and patch.edits is not Edit.IMPORT else []
            shown = f" ({'; '.join(extra)})" if extra else ""
            places.append(f"`{anchor.file.removeprefix('srt/')}`: {anchor.describe()}, {anchor.seen}{shown}")
        rows.append(f"| `{patch.id}` | {'<br>'.join(places)} | {patch.summary} |")
    return "\n".join(rows)


def render_docs(out: Console) -> None:
    """Each patch's description and the anchor rows it searches (``list --docs``)."""
    from rich.text import Text

    from sm120patch.plan.registry import all_patches

    for patch in all_patches():
        out.print(Text(f"\n{patch.id}", style="bold"))
        out.print(Text(patch.doc), soft_wrap=True)
        out.print(Text("  where it looks:", style="bold"))
        for anchor in patch.anchors:
            expect = "" if anchor.expect is State.PENDING else f" [{anchor.expect.value}]"
            note = f" — {anchor.note}" if anchor.note else ""
            out.print(
                Text(f"    sglang/{anchor.file}: {anchor.describe()}, {anchor.seen}{expect}{note}"), soft_wrap=True
            )


def _render_runtime(out: Console, data: dict[str, Any]) -> None:
    from rich.text import Text

    out.print(Text(f"runtime ({data.get('python')}):", style="bold"))
    torch = data.get("torch") or {}
    if not torch.get("ok"):
        out.print(Text(f"  torch: {torch.get('error')}", style="red"), soft_wrap=True)
        return
    gpu = (
        f"{torch.get('device')} (cc {'.'.join(map(str, torch['capability']))})"
        if torch.get("capability")
        else "no CUDA GPU visible"
    )
    out.print(Text(f"  torch {torch.get('version')} (CUDA {torch.get('cuda')}), {gpu}"), soft_wrap=True)
    package = data.get("sglang") or {}
    if not package.get("ok"):
        out.print(Text(f"  import sglang: {package.get('error')}", style="red"), soft_wrap=True)
        return
    probe = data.get("probe") or {}
    if probe.get("ok"):
        out.print(Text(f"  {probe['expression']} = {probe['value']}"))
    else:
        out.print(Text(f"  SM120 probe failed: {probe.get('error')}", style="red"), soft_wrap=True)
    for module in data.get("modules", []):
        if module["ok"]:
            flags = " ".join(f"{k}={v}" for k, v in module["flags"].items()) or "(no cached SM flags)"
            out.print(Text(f"  {module['module']}: imports; {flags}"), soft_wrap=True)
        else:
            out.print(Text(f"  {module['module']}: {module['error']}", style="red"), soft_wrap=True)


def render_doctor(result: DoctorReport) -> None:
    from rich.text import Text

    out = console()
    for f in result.findings:
        severity = f.severity.value
        out.print(
            Text.assemble((f"{severity:<8}", _SEVERITY_STYLE[severity]), f"{f.id:<34} ", f.summary), soft_wrap=True
        )
        if f.detail:
            out.print(Text(f"{'':<43}{f.detail}"), soft_wrap=True)
        if f.source:
            out.print(Text(f"{'':<43}from: {f.source}", style="dim"), soft_wrap=True)
    style = "bold green" if result.exit_code == 0 else "bold red"
    out.print(Text(result.headline, style=style), soft_wrap=True)


def error(message: str) -> None:
    from rich.text import Text

    console().print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True)


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
