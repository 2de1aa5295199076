"""A fingerprint of sm120patch's own code: its version, its patch set and every line of it.

verify may take a file's patch states from the manifest instead of parsing the file only
when the code that recorded them is byte for byte the code running now (trust.py).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from sm120patch import __version__

PACKAGE = Path(__file__).resolve().parents[2]  # the sm120patch package


def _sources() -> list[Path]:
    """Every module of sm120patch, in every subpackage (the patches included)."""
    return sorted(PACKAGE.rglob("*.py"))


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    digest = hashlib.sha256(__version__.encode())
    for path in _sources():
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
