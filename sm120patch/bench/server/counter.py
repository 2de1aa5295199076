"""Read the call counts ``bench/remote/server_hook.py`` wrote, one file per process of a run.

The proof that fusion ran is FlashInfer's fused kernel being launched with the
``kARResidualRMSNorm`` pattern (``AllReduceFusionPattern.kARResidualRMSNorm == 1`` in the
unified and the legacy API) from sglang's processes; sglang's own entry point
(``flashinfer_allreduce_residual_rmsnorm``) is counted beside it, with the calls that
returned ``(None, None)``: those fell back to the unfused path.  Calls are eager or made
while a CUDA graph was captured; replays of a captured graph run no Python and are not
counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENTRY = "sglang.flashinfer_allreduce_residual_rmsnorm"
FUSED_PATTERN = 1  # AllReduceFusionPattern.kARResidualRMSNorm
KERNELS = ("flashinfer.allreduce_fusion", "flashinfer.trtllm_allreduce_fusion")
FUSION_MODULE = "sglang.srt.layers.flashinfer_comm_fusion"
ALLREDUCE = "allreduce."  # the hook's keys of the plain allreduces, by the method that took them
#: The backend each method is, as a person names it; any other method is "other".
BACKENDS = {
    "ca": "custom allreduce",
    "pcie_ipc": "PCIe-IPC",
    "flashinfer": "FlashInfer kAllReduce",
    "nccl": "NCCL",
    "pynccl": "NCCL",
}
OTHER = "other"


@dataclass
class Calls:
    eager: int = 0
    capture: int = 0
    fell_back: int = 0

    @property
    def total(self) -> int:
        return self.eager + self.capture

    def add(self, data: dict[str, Any]) -> None:
        self.eager += int(data.get("eager", 0))
        self.capture += int(data.get("capture", 0))
        self.fell_back += int(data.get("fell_back", 0))

    def as_json(self) -> dict[str, int]:
        return {"eager": self.eager, "capture": self.capture, "fell_back": self.fell_back}


@dataclass
class Logits:
    """What the hook saw of the logits a run computed: forwards with a NaN or inf over the
    whole run (graph replays included), and the first extend's and decode's row 0 as one
    process recorded it (rank 0 where ranks are known: every TP rank holds the gathered
    logits)."""

    forwards: int = 0
    nonfinite: int = 0
    first: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    rank: int | None = None

    def add(self, data: dict[str, Any], rank: Any) -> None:
        self.forwards += int(data.get("forwards", 0))
        self.nonfinite += int(data.get("nonfinite", 0))
        if data.get("error"):
            self.errors.append(str(data["error"]))
        first = data.get("first")
        if isinstance(first, dict) and first and (not self.first or _before(rank, self.rank)):
            self.first, self.rank = first, rank if type(rank) is int else None

    def as_json(self) -> dict[str, Any]:
        return {
            "forwards": self.forwards,
            "nonfinite_forwards": self.nonfinite,
            "first": self.first,
            "rank": self.rank,
            "errors": self.errors,
        }


def _before(rank: Any, than: int | None) -> bool:
    return type(rank) is int and (than is None or rank < than)


@dataclass
class Counts:
    """One run's counts over all its processes."""

    processes: int = 0  # processes that wrote a file (the hook reached them)
    sglang_processes: int = 0  # of them, those that imported sglang's fusion module
    fused: Calls = field(default_factory=Calls)  # the fused kernel (pattern kARResidualRMSNorm)
    entry: Calls = field(default_factory=Calls)  # sglang's entry point
    other_kernel: Calls = field(default_factory=Calls)  # FlashInfer allreduce with another pattern
    ranks_fused: int = 0  # processes that launched the fused kernel
    multicast_guarded: bool = False
    token_limits: set[int] = field(default_factory=set)  # the limits the hook set (bench server --fuse-up-to)
    logits: Logits = field(default_factory=Logits)
    allreduce: dict[str, Calls] = field(default_factory=dict)  # plain allreduces by backend (BACKENDS)

    def allreduces(self, backend: str) -> int:
        calls = self.allreduce.get(backend)
        return calls.total if calls else 0

    def describe_allreduce(self) -> str:
        if not self.allreduce:
            return "no plain allreduce was seen"
        taken = ", ".join(f"{name} {calls.total}x" for name, calls in sorted(self.allreduce.items()))
        return f"plain allreduces: {taken}"

    @property
    def ran(self) -> bool:
        """The fused path ran: the kernel was launched, or sglang's entry returned its result."""
        return self.fused.total > 0 or self.entry.total - self.entry.fell_back > 0

    @property
    def calls(self) -> int:
        return self.fused.total or self.entry.total - self.entry.fell_back

    def describe(self) -> str:
        if not self.ran and not self.entry.total:
            return "the fused kernel was never called"
        if not self.ran:
            return f"sglang's fused entry was called {self.entry.total}x and fell back every time"
        ranks = f" in {self.ranks_fused} process{'es' if self.ranks_fused != 1 else ''}" if self.ranks_fused else ""
        split = f"{self.fused.eager} eager, {self.fused.capture} in graph capture"
        return f"fused kernel called {self.calls}x{ranks} ({split})"

    def as_json(self) -> dict[str, Any]:
        limits = {"token_limits": sorted(self.token_limits)} if self.token_limits else {}
        return limits | {
            "processes": self.processes,
            "sglang_processes": self.sglang_processes,
            "fused_kernel": self.fused.as_json(),
            "sglang_entry": self.entry.as_json(),
            "other_flashinfer_allreduce": self.other_kernel.as_json(),
            "ranks_with_fused_calls": self.ranks_fused,
            "ran": self.ran,
            "multicast_guarded": self.multicast_guarded,
            "logits": self.logits.as_json(),
            "allreduce": {name: calls.as_json() for name, calls in sorted(self.allreduce.items())},
        }


def _is_fused(key: str) -> bool | None:
    """True for the fused pattern of a kernel key, False for another pattern, None when the
    key is not a kernel's."""
    name, _, rest = key.partition("[pattern=")
    if name not in KERNELS:
        return None
    return rest.rstrip("]") == str(FUSED_PATTERN) if rest else True


def read(directory: Path) -> Counts:
    counts = Counts()
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a file being replaced is never half written; anything else is not ours
        if not isinstance(data, dict):
            continue
        counts.processes += 1
        counts.sglang_processes += FUSION_MODULE in (data.get("loaded") or [])
        counts.multicast_guarded |= bool(data.get("multicast_guarded"))
        for entry in data.get("token_limit") or []:
            if isinstance(entry, dict) and type(entry.get("now")) is int:
                counts.token_limits.add(entry["now"])
        if isinstance(data.get("logits"), dict):
            counts.logits.add(data["logits"], data.get("rank"))
        fused_here = 0
        for key, value in (data.get("counts") or {}).items():
            if key == ENTRY:
                counts.entry.add(value)
                continue
            if key.startswith(ALLREDUCE):
                backend = BACKENDS.get(key[len(ALLREDUCE) :], OTHER)
                counts.allreduce.setdefault(backend, Calls()).add(value)
                continue
            kind = _is_fused(key)
            if kind is True:
                counts.fused.add(value)
                fused_here += int(value.get("eager", 0)) + int(value.get("capture", 0))
            elif kind is False:
                counts.other_kernel.add(value)
        counts.ranks_fused += fused_here > 0
    return counts
