"""Which NVIDIA GPUs this host has, as ``nvidia-smi`` reports them."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

QUERY = ["--query-gpu=index,name,compute_cap", "--format=csv,noheader"]


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    capability: tuple[int, int]

    @property
    def sm12x(self) -> bool:
        """RTX PRO 6000 / RTX 5090 (12.0) and GB10 (12.1): what the patches are for."""
        return self.capability[0] == 12

    def describe(self) -> str:
        return f"GPU {self.index}: {self.name} (cc {self.capability[0]}.{self.capability[1]})"


@dataclass(frozen=True)
class GpuReport:
    gpus: tuple[Gpu, ...]
    source: str  # the command (or interpreter) that answered
    error: str | None = None  # why no answer came, when none did

    @property
    def answered(self) -> bool:
        return self.error is None

    @property
    def sm12x(self) -> tuple[Gpu, ...]:
        return tuple(g for g in self.gpus if g.sm12x)


def parse_csv(text: str) -> list[Gpu]:
    """``0, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 12.0`` per line."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.rsplit(",", 1)]
        head = [p.strip() for p in parts[0].split(",", 1)] if len(parts) == 2 else []
        if len(head) != 2:
            continue
        try:
            major, _, minor = parts[1].partition(".")
            gpus.append(Gpu(int(head[0]), head[1], (int(major), int(minor or 0))))
        except ValueError:
            continue
    return gpus


def from_nvidia_smi(timeout: float = 20.0) -> GpuReport:
    exe = shutil.which("nvidia-smi")
    command = " ".join(["nvidia-smi", *QUERY])
    if exe is None:
        return GpuReport((), command, "nvidia-smi is not on PATH")
    try:
        proc = subprocess.run([exe, *QUERY], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GpuReport((), command, f"nvidia-smi did not answer ({exc})")
    if proc.returncode != 0:
        last = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()[-1]
        return GpuReport((), command, f"nvidia-smi failed: {last}")
    return GpuReport(tuple(parse_csv(proc.stdout)), command)
