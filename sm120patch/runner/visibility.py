"""What the serving process will see: ``CUDA_VISIBLE_DEVICES`` read as CUDA reads it, and
which of nvidia-smi's GPUs torch sees, with why it sees fewer.

CUDA reads the variable entry by entry: a GPU index (in CUDA's order, nvidia-smi's with
``CUDA_DEVICE_ORDER=PCI_BUS_ID``) or a ``GPU-`` UUID (a unique prefix will do).  The first
entry that names no GPU ends the list: it and every entry after it are ignored.  An empty
value hides every GPU; so does a GPU named twice (torch's ``_parse_visible_devices``
mirrors the same rules).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sm120patch.runner.gpus import Gpu

VARIABLE = "CUDA_VISIBLE_DEVICES"


def assignment(value: str) -> str:
    """``CUDA_VISIBLE_DEVICES=0,1``; an empty value (or one with blanks) in quotes: ``""``."""
    return f'{VARIABLE}="{value}"' if not value or value != value.strip() or " " in value else f"{VARIABLE}={value}"


def gpu_names(gpus: Sequence[Gpu]) -> str:
    """``GPU 1`` / ``GPUs 0, 1`` (nvidia-smi's numbers)."""
    indices = ", ".join(str(g.index) for g in gpus)
    return f"GPU {indices}" if len(gpus) == 1 else f"GPUs {indices}"


@dataclass(frozen=True)
class Selection:
    """What the variable selects of the GPUs nvidia-smi lists."""

    gpus: tuple[Gpu, ...] | None  # None: cannot be told from here
    why: str  # one sentence


def _leading_number(token: str) -> int | None:
    """CUDA reads an entry like strtoul: ``1gpu`` is 1, ``gpu1`` names nothing."""
    digits = ""
    for char in token:
        if not (char.isascii() and char.isdigit()):
            break
        digits += char
    return int(digits) if digits and len(digits) < 6 else None


def select(value: str | None, listed: Sequence[Gpu], device_order: str | None = None) -> Selection:
    """What ``CUDA_VISIBLE_DEVICES=value`` shows of ``listed`` (nvidia-smi's GPUs)."""
    if value is None:
        return Selection(tuple(listed), f"{VARIABLE} is not set: CUDA shows every GPU")
    if not value.strip():
        return Selection((), f"{assignment(value)} hides every GPU from CUDA")
    ordered = sorted(listed, key=lambda g: g.index)
    chosen: list[Gpu] = []
    stop = ""
    for raw in value.split(","):
        token = raw.strip()
        if token.upper().startswith("MIG-"):
            return Selection(None, f"{assignment(value)} names MIG instances ({token}): not told apart here")
        if token.upper().startswith("GPU-"):
            if not any(g.uuid for g in ordered):
                return Selection(None, f"{assignment(value)} names GPUs by UUID, and nvidia-smi gave no UUIDs")
            matches = [g for g in ordered if g.uuid and g.uuid.lower().startswith(token.lower())]
            if len(matches) != 1:
                stop = f"{token} matches {'no GPU' if not matches else 'more than one GPU'} nvidia-smi lists"
                break
            gpu = matches[0]
        else:
            number = _leading_number(token)
            if number is None:
                stop = f"{token or 'an empty entry'} is neither a GPU index nor a GPU UUID"
                break
            if number >= len(ordered):
                stop = f"there is no GPU {number} (nvidia-smi lists {len(ordered)})"
                break
            gpu = ordered[number]
        if gpu in chosen:
            return Selection((), f"{assignment(value)} names GPU {gpu.index} twice, which hides every GPU from CUDA")
        chosen.append(gpu)
    shows = f"shows {gpu_names(chosen)} only" if chosen else "shows no GPU"
    if stop:
        why = f"{assignment(value)}: {stop}, so CUDA ignores it and every entry after it and {shows}"
    elif len(chosen) < len(ordered):
        why = f"{assignment(value)} {shows} to CUDA"
    else:
        why = f"{assignment(value)} shows every GPU to CUDA"
    by_index = any(not t.strip().upper().startswith("GPU-") for t in value.split(","))
    if by_index and len({g.name for g in ordered}) > 1 and device_order != "PCI_BUS_ID":
        why += (
            " (by index in nvidia-smi's order; CUDA numbers the fastest GPU first unless CUDA_DEVICE_ORDER=PCI_BUS_ID)"
        )
    return Selection(tuple(chosen), why)
