"""What doctor says: one finding per fact, its severity, and the report they make."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from sm120patch.output.words import counted
from sm120patch.runner.gpus import Gpu


class Severity(str, Enum):
    OK = "ok"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class HostFinding:
    """One fact about the host or the tree, and where it comes from (a command's output, a
    file, an upstream issue)."""

    id: str
    severity: Severity
    summary: str
    detail: str = ""
    source: str = ""

    def to_json(self) -> dict[str, str]:
        return {
            "id": self.id,
            "severity": self.severity.value,
            "summary": self.summary,
            "detail": self.detail,
            "source": self.source,
        }


@dataclass
class DoctorReport:
    findings: list[HostFinding] = field(default_factory=list)
    gpus: tuple[Gpu, ...] = ()  # the GPUs judged: nvidia-smi's, capabilities filled in from torch
    refusal: str | None = None  # why sm120patch refuses this release, when it does

    @property
    def exit_code(self) -> int:
        return 1 if any(f.severity is Severity.ERROR for f in self.findings) else 0

    @property
    def headline(self) -> str:
        errors = [f for f in self.findings if f.severity is Severity.ERROR]
        warnings = [f for f in self.findings if f.severity is Severity.WARNING]
        if errors:
            verb = "stands" if len(errors) == 1 else "stand"
            ids = ", ".join(f.id for f in errors)
            return f"{counted(len(errors), 'error')} {verb} between this host and the fused allreduce: {ids}"
        if warnings:
            return f"no blocking error; {counted(len(warnings), 'warning')} to read"
        return "nothing stands in the way of the fused allreduce"
