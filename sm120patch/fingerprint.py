"""A fingerprint of sm120patch's own code: its version, its patch set and every line of it.

verify may take a file's patch states from the manifest instead of parsing the file only
when the code that recorded them is byte for byte the code running now (trust.py).
"""

from __future__ import annotations

import hashlib
import importlib.util
from functools import lru_cache
from pathlib import Path

from sm120patch import __version__


def _sources() -> list[Path]:
    package = Path(__file__).resolve().parent
    files = sorted(package.rglob("*.py"))  # every subpackage: probes, bench, ...
    spec = importlib.util.find_spec("sm120patch.patches")  # finds, does not import, the patches
    for location in (spec.submodule_search_locations or []) if spec else []:
        files += sorted(Path(location).resolve().glob("*.py"))
    return sorted(set(files))  # an installed wheel holds the patches in the package too


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    digest = hashlib.sha256(__version__.encode())
    for path in _sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
