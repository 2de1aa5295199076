"""Doctor's report for people (rich, stderr) and for machines (JSON, stdout)."""

from __future__ import annotations

from typing import Any

from sm120patch import __version__
from sm120patch.doctor.findings import DoctorReport
from sm120patch.output.console import SCHEMA, console, printable
from sm120patch.output.lines import put
from sm120patch.sglang.releases import tree_json
from sm120patch.sglang.tree import SglangTree

_SEVERITY_STYLE = {"ok": "green", "info": "cyan", "warning": "yellow", "error": "bold red"}


def render_doctor(result: DoctorReport) -> None:
    """One block per finding: ``severity id: summary``, the detail, and where it comes from,
    wrapped by rich at word boundaries to the console's width (80 included) and indented
    under the summary, so the terminal never cuts a word and no line ends in padding."""
    from rich.text import Text

    out = console()
    indent = 8  # "warning "
    for f in result.findings:
        severity = f.severity.value
        body = Text.assemble((f.id, "bold"), ": ", printable(f.summary))
        if f.detail:
            body.append("\n" + printable(f.detail))
        if f.source:
            body.append("\nfrom: " + printable(f.source), style="dim")
        put(out, body, lead=Text(f"{severity:<{indent}}", style=_SEVERITY_STYLE[severity]))
    style = "bold green" if result.exit_code == 0 else "bold red"
    put(out, Text(printable(result.headline), style=style))


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
        "refusal": result.refusal,
        "gpus": [g.to_json() for g in result.gpus],
    }
