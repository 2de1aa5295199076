"""Render an Outcome: rich on stderr for people, one JSON object on stdout for machines.

The JSON shape is documented in README.md ("JSON output") and versioned by ``schema``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.syntax import Syntax
from rich.text import Text

from sm120patch import __version__, releases
from sm120patch.commands import Outcome
from sm120patch.locate import SglangTree
from sm120patch.registry import State, all_patches

SCHEMA = "sm120patch/1"

_STYLE = {
    State.APPLIED: "green",
    State.NOT_NEEDED: "cyan",
    State.PENDING: "yellow",
    State.DRIFT: "bold red",
}


def tree_json(tree: SglangTree) -> dict[str, Any]:
    facts = tree.flashinfer_facts
    return {
        "version": tree.version,
        "location": str(tree.package_dir),
        "install_kind": tree.install_kind,
        "dist_info": str(tree.dist_info) if tree.dist_info else None,
        "found_by": tree.how_found,
        "python": tree.python,
        "flashinfer": tree.flashinfer,
        "flashinfer_pinned": releases.FLASHINFER_PINS.get(tree.version or ""),
        "flashinfer_has_sm12x_allreduce": (
            facts.sm12x_kernel
            if facts.found
            else releases.flashinfer_has_sm12x_kernel(releases.FLASHINFER_PINS.get(tree.version or ""))
        ),
        "flashinfer_evidence": facts.source,
    }


def to_json(outcome: Outcome) -> dict[str, Any]:
    tree = outcome.tree
    plan = outcome.plan
    patches: list[dict[str, Any]] = []
    for report in plan.reports if plan else []:
        entry: dict[str, Any] = {
            "id": report.patch.id,
            "summary": report.patch.summary,
            "requires": list(report.patch.requires),
            "file": f"sglang/{report.file}",
            "state": report.state.value,
            "state_after": (report.state_after or report.state).value,
            "where": report.where,
            "detail": report.detail,
            "evidence": [
                {"file": f"sglang/{report.file}", "line": e.line, "text": e.text}
                for e in report.evidence
            ],
        }
        patches.append(entry)
    if plan is not None and plan.refusal:
        patches = [
            {
                "id": p.id,
                "summary": p.summary,
                "requires": list(p.requires),
                "file": None,
                "state": "refused",
                "state_after": "refused",
                "where": "",
                "detail": plan.refusal,
                "evidence": [],
            }
            for p in all_patches()
        ]
    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "command": outcome.command,
        "ok": outcome.exit_code == 0,
        "exit_code": outcome.exit_code,
        "headline": outcome.headline,
        "sglang": tree_json(tree),
        "refusal": plan.refusal if plan else None,
        "patches": patches,
        "files": [
            {
                "file": f"sglang/{f.rel}",
                "sha256": f.sha256,
                "record_sha256": f.record_sha256,
                "pristine": f.pristine,
                "recorded": f.recorded,
            }
            for f in outcome.files
        ],
        "state": outcome.state,
        "written": [f"sglang/{rel}" for rel in outcome.written],
        "messages": outcome.messages,
        "warnings": outcome.warnings,
        "runtime": outcome.runtime,
        "diff": outcome.diff,
    }


def print_json(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def console() -> Console:
    return Console(stderr=True, highlight=False)


def render(outcome: Outcome, show_docs: bool = False) -> None:
    out = console()
    tree = outcome.tree
    out.print(
        Text.assemble(
            ("sglang ", "bold"),
            (tree.version or "(unknown version)", "bold"),
            f"  {tree.package_dir}  ",
            (f"[{tree.install_kind}]", "dim"),
        )
    )
    if tree.install_kind == "editable":
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
            detail = r.patch.summary if show_docs else r.detail
            out.print(
                Text.assemble(
                    f"  {r.patch.id:<26} ", (f"{label:<20}", _STYLE[state]), " ", detail
                ),
                soft_wrap=True,
            )
        evidence = [(r.file, e) for r in plan.reports for e in r.evidence]
        if evidence and outcome.command in ("verify", "apply"):
            out.print(Text("evidence:", style="bold"))
            for rel, e in sorted(set(evidence), key=lambda x: (x[0], x[1].line)):
                out.print(Text(f"  sglang/{rel}:{e.line}:{e.text}"), soft_wrap=True)
    if show_docs:
        for patch in all_patches():
            out.print(Text(f"\n{patch.id}", style="bold"))
            out.print(Text(patch.doc), soft_wrap=True)
    if outcome.files and outcome.command in ("verify", "revert"):
        for f in outcome.files:
            if f.pristine is None:
                kind = "no RECORD entry"
            else:
                kind = "matches the release (RECORD)" if f.pristine else "differs from the release"
            recorded = f", {f.recorded} per saved state" if f.recorded else ""
            out.print(Text(f"  sglang/{f.rel}: {kind}{recorded}", style="dim"), soft_wrap=True)
    if outcome.runtime is not None:
        _render_runtime(out, outcome.runtime)
    for message in outcome.messages:
        out.print(Text(message), soft_wrap=True)
    for warning in outcome.warnings:
        out.print(Text.assemble(("warning: ", "bold yellow"), (warning, "yellow")), soft_wrap=True)
    style = "bold green" if outcome.exit_code == 0 else "bold red"
    out.print(Text(outcome.headline, style=style), soft_wrap=True)


def _render_runtime(out: Console, data: dict[str, Any]) -> None:
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


def print_diff(diff: str) -> None:
    if not diff:
        return
    stdout = Console(highlight=False)
    if stdout.is_terminal:
        stdout.print(Syntax(diff, "diff", theme="ansi_dark", background_color="default"))
    else:
        sys.stdout.write(diff)


_SEVERITY_STYLE = {"ok": "green", "info": "cyan", "warning": "yellow", "error": "bold red"}


def doctor_json(tree: SglangTree | None, result: Any) -> dict[str, Any]:
    from sm120patch.doctor import findings_json

    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "command": "doctor",
        "ok": result.exit_code == 0,
        "exit_code": result.exit_code,
        "headline": result.headline,
        "sglang": tree_json(tree) if tree is not None else None,
        "findings": findings_json(result),
    }


def render_doctor(tree: SglangTree | None, result: Any) -> None:
    out = console()
    for f in result.findings:
        severity = f.severity.value
        out.print(Text.assemble((f"{severity:<8}", _SEVERITY_STYLE[severity]), f"{f.id:<34} ", f.summary), soft_wrap=True)
        if f.detail:
            out.print(Text(f"{'':<43}{f.detail}"), soft_wrap=True)
        if f.source:
            out.print(Text(f"{'':<43}from: {f.source}", style="dim"), soft_wrap=True)
    style = "bold green" if result.exit_code == 0 else "bold red"
    out.print(Text(result.headline, style=style), soft_wrap=True)
