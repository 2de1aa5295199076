"""The hand fix sm120patch replaces: the ``sed`` over SSH into ``communicator.py`` and the
``grep`` that checks it (sglang 0.5.9)."""

from __future__ import annotations

import subprocess
from pathlib import Path

#: The ``sed`` that adds the flag, and the same style for the import line.
SED_FLAG = (
    r"s/^_is_sm100_supported = _is_cuda and is_sm100_supported()/"
    r"_is_sm100_supported = _is_cuda and is_sm100_supported()\n"
    r"_is_sm120_supported = _is_cuda and is_sm120_supported()/"
)
SED_IMPORT = r"s/^    is_sm100_supported,$/    is_sm100_supported,\n    is_sm120_supported,/"

#: What the ``grep`` check prints for sglang 0.5.9's communicator.py once fixed by hand.
SEED_LINES = [
    "66:    is_sm90_supported,",
    "67:    is_sm100_supported,",
    "68:    is_sm120_supported,",
    "73:_is_sm90_supported = _is_cuda and is_sm90_supported()",
    "74:_is_sm100_supported = _is_cuda and is_sm100_supported()",
    "75:_is_sm120_supported = _is_cuda and is_sm120_supported()",
    "97:        (_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)",
]


def grep_sm_lines(path: Path) -> list[str]:
    """The hand fix's check: ``grep -n`` for the SM90/SM100/SM120 names in ``path``."""
    proc = subprocess.run(
        ["grep", "-n", r"sm120\|sm100_supported\|sm90_supported", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.splitlines()
