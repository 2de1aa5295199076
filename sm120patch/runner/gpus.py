"""Which NVIDIA GPUs this host has, as ``nvidia-smi`` reports them.

nvidia-smi's answer is read as bytes and decoded with replacement: odd bytes never stop
doctor.  A line with an index and a name is a GPU, also when its compute capability reads
``[N/A]`` or ``[Not Supported]`` (some drivers, some cards): a GPU of unknown capability,
never dropped.  A driver too old for the ``compute_cap`` field is asked for the names alone.
A second query reads the UUIDs, which tie torch's GPUs to nvidia-smi's
(``CUDA_VISIBLE_DEVICES`` may name GPUs by UUID); where it fails, nothing else does.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sm120patch.runner import DEFAULT_TIMEOUT_S, run_isolated

QUERY = ["--query-gpu=index,name,compute_cap", "--format=csv,noheader"]
#: Drivers older than the ``compute_cap`` field (R510) answer this one.
NAMES_QUERY = ["--query-gpu=index,name", "--format=csv,noheader"]
UUID_QUERY = ["--query-gpu=index,uuid", "--format=csv,noheader"]
#: What nvidia-smi prints, exit 0 or not, on a host whose driver sees no GPU.
NO_DEVICES = "No devices were found"


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    capability: tuple[int, int] | None  # None: unknown (nvidia-smi printed ``raw_capability``)
    uuid: str | None = None  # GPU-xxxxxxxx-..., as nvidia-smi prints it
    raw_capability: str | None = None  # what nvidia-smi printed where it was no capability
    capability_from: str | None = None  # who told the capability, when not whoever listed the GPU

    @property
    def sm12x(self) -> bool:
        """RTX PRO 6000 / RTX 5090 (12.0) and GB10 (12.1): what the patches are for."""
        return self.capability is not None and self.capability[0] == 12

    @property
    def cc(self) -> str:
        return "unknown" if self.capability is None else f"{self.capability[0]}.{self.capability[1]}"

    @property
    def note(self) -> str:
        """Its capability as told: ``cc 12.0``, and by whom where not by nvidia-smi."""
        said = f"nvidia-smi says {self.raw_capability}" if self.raw_capability else ""
        if self.capability is None:
            return f"cc unknown: {said}" if said else "cc unknown"
        if self.capability_from:
            return "; ".join(p for p in (f"cc {self.cc} per {self.capability_from}", said) if p)
        return f"cc {self.cc}"

    def describe(self) -> str:
        return f"GPU {self.index}: {self.name} ({self.note})"

    def to_json(self) -> dict[str, object]:
        return {
            "index": self.index,
            "name": self.name,
            "capability": list(self.capability) if self.capability else None,
            "capability_from": self.capability_from,
            "raw_capability": self.raw_capability,
            "uuid": self.uuid,
        }


def describe_all(gpus: Sequence[Gpu]) -> str:
    """``gpus`` in one line, those of one name and capability said once: ``8× NVIDIA RTX PRO
    6000 Blackwell Workstation Edition (cc 12.0): GPUs 0-7`` (eight times the same name was
    a paragraph to read for the one thing that differs)."""
    groups: dict[tuple[str, str], list[int]] = {}
    for gpu in gpus:
        groups.setdefault((gpu.name, gpu.note), []).append(gpu.index)
    return "; ".join(
        f"GPU {indices[0]}: {name} ({note})"
        if len(indices) == 1
        else f"{len(indices)}× {name} ({note}): GPUs {_runs(indices)}"
        for (name, note), indices in groups.items()
    )


def _runs(indices: Sequence[int]) -> str:
    """``0-3, 6``: consecutive indices as a range."""
    runs: list[list[int]] = []
    for index in indices:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


@dataclass(frozen=True)
class GpuReport:
    gpus: tuple[Gpu, ...]
    source: str  # the command (or interpreter) that answered
    error: str | None = None  # why no answer came, when none did
    unread: tuple[str, ...] = ()  # lines of an answer that read as no GPU

    @property
    def answered(self) -> bool:
        return self.error is None

    @property
    def sm12x(self) -> tuple[Gpu, ...]:
        return tuple(g for g in self.gpus if g.sm12x)

    @property
    def unknown(self) -> tuple[Gpu, ...]:
        """The GPUs whose capability nobody could tell."""
        return tuple(g for g in self.gpus if g.capability is None)


def parse_capability(text: str) -> tuple[int, int] | None:
    """``12.0`` -> (12, 0); anything else (``[N/A]``, ``[Not Supported]``, garbage) -> None."""
    major, dot, minor = text.strip().partition(".")
    if not (major.isascii() and major.isdigit()) or not (minor.isascii() and (minor.isdigit() or not dot)):
        return None
    return int(major), int(minor or 0)


def _index(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) < 6 else None


def _short(text: str, limit: int = 60) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_csv(text: str, with_capability: bool = True) -> tuple[list[Gpu], list[str]]:
    """``0, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 12.0`` per line (without the
    capability: ``0, NAME``).  A name may hold commas; the capability is the last field.
    Returns the GPUs and the lines that are none."""
    gpus, unread = [], []
    for line in text.splitlines():
        if not line.strip() or line.strip() == NO_DEVICES:
            continue
        index_text, _, rest = line.partition(",")
        index = _index(index_text)
        if with_capability:
            name, _, raw = rest.rpartition(",")  # no comma: name "", so the line is no GPU
            capability = parse_capability(raw)
            raw_text = None if capability is not None else _short(raw)
        else:
            name, capability, raw_text = rest, None, "no compute_cap field"
        if index is None or not name.strip():  # no comma after the index: rest, so name, is ""
            unread.append(_short(line))
            continue
        gpus.append(Gpu(index, name.strip(), capability, raw_capability=raw_text))
    return gpus, unread


def parse_uuids(text: str) -> dict[int, str]:
    """``0, GPU-1d2c...`` per line -> {0: "GPU-1d2c..."}; other lines are skipped."""
    found = {}
    for line in text.splitlines():
        index_text, _, uuid = line.partition(",")
        index, uuid = _index(index_text), uuid.strip()
        if index is not None and uuid.startswith(("GPU-", "MIG-")) and " " not in uuid:
            found[index] = uuid
    return found


@dataclass(frozen=True)
class Reply:
    returncode: int | None  # None: it did not run or ran past its limit
    stdout: str
    why: str  # the last line it printed, its exit status, or why it did not run


def _run(exe: str, args: list[str], timeout: float) -> Reply:
    try:
        returncode, stdout, stderr = run_isolated([exe, *args], timeout=timeout)
    except subprocess.TimeoutExpired:
        return Reply(None, "", f"nvidia-smi did not answer within {timeout:g} s")
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        return Reply(None, "", f"could not run nvidia-smi: {getattr(exc, 'strerror', None) or exc}")
    return answer(returncode, stdout, stderr)


def answer(returncode: int, stdout: bytes, stderr: bytes) -> Reply:
    """What nvidia-smi said, decoded with replacement, with the line that says why it failed."""
    out, err = stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")
    lines = [line.strip() for text in (err, out) for line in text.splitlines() if line.strip()]
    status = f"exit {returncode}" if returncode >= 0 else f"killed by signal {-returncode}"
    return Reply(returncode, out, _short(lines[-1], 200) if lines else status)


def read_answer(command: str, main: Reply, names: Reply | None = None, uuids: Reply | None = None) -> GpuReport:
    """The report from nvidia-smi's answers: the main query, the names-only one asked when
    the main query failed, the UUID query asked when GPUs were listed.  Never raises."""
    used = main
    if main.returncode != 0 and names is not None and names.returncode == 0:
        used = names
        command = " ".join(["nvidia-smi", *NAMES_QUERY])
    if used.returncode != 0:
        if NO_DEVICES in main.stdout or NO_DEVICES in main.why:
            return GpuReport((), command)
        if main.returncode is None:
            return GpuReport((), command, main.why)
        return GpuReport((), command, f"nvidia-smi failed: {main.why}")
    gpus, unread = parse_csv(used.stdout, with_capability=used is main)
    if uuids is not None and uuids.returncode == 0:
        by_index = parse_uuids(uuids.stdout)
        gpus = [Gpu(g.index, g.name, g.capability, by_index.get(g.index), g.raw_capability) for g in gpus]
    return GpuReport(tuple(gpus), command, None, tuple(unread))


def from_nvidia_smi(timeout: float = DEFAULT_TIMEOUT_S) -> GpuReport:
    """nvidia-smi's GPUs; all its queries together take at most ``timeout`` seconds."""
    exe = shutil.which("nvidia-smi")
    command = " ".join(["nvidia-smi", *QUERY])
    if exe is None:
        return GpuReport((), command, "nvidia-smi is not on PATH")
    deadline = time.monotonic() + timeout
    main = _run(exe, QUERY, timeout)
    names = None
    if main.returncode not in (0, None) and "compute_cap" in main.why:  # "not a valid field to query"
        names = _run(exe, NAMES_QUERY, max(deadline - time.monotonic(), 0.1))
    uuids = None
    listed = main if main.returncode == 0 else names
    left = deadline - time.monotonic()
    if listed is not None and listed.returncode == 0 and listed.stdout.strip() and left > 0.5:
        uuids = _run(exe, UUID_QUERY, left)
    return read_answer(command, main, names, uuids)


def same_uuid(a: str | None, b: str | None) -> bool:
    """nvidia-smi writes ``GPU-1d2c...``, torch ``1d2c...``."""
    if not a or not b:
        return False
    return a.lower().removeprefix("gpu-") == b.lower().removeprefix("gpu-")
