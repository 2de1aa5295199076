"""Doctor's report for people (rich, stderr) and for machines (JSON, stdout)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sm120patch import __version__
from sm120patch.doctor.findings import DoctorReport
from sm120patch.errors import ExitCode
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


@dataclass(frozen=True)
class DoctorResult:
    """Doctor's report as the cli shows it (``output.result.Result``); ``problem``: why no
    sglang was found (the host checks still ran), which makes it exit 2."""

    tree: SglangTree | None
    report: DoctorReport
    problem: str | None = None

    @property
    def exit_code(self) -> int:
        return int(ExitCode.ENVIRONMENT if self.problem else self.report.exit_code)

    def to_json(self) -> dict[str, Any]:
        data = doctor_json(self.tree, self.report)
        if self.problem:  # the error object's keys, beside the findings
            data.update(ok=False, exit_code=self.exit_code, error=self.problem)
        return data

    def render_text(self) -> None:
        render_doctor(self.report)
