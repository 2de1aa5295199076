"""Find sglang and FlashInfer in an interpreter without importing either.

Standard library only: ``locate`` runs this file with another interpreter (``--python``)
and reads the JSON it prints, so it must work on any Python >= 3.8 that sglang runs on.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import sys
from typing import Any


def _dist_info_dir(dist: importlib.metadata.Distribution) -> str | None:
    for file in dist.files or ():
        if file.name == "METADATA" and file.parent.name.endswith(".dist-info"):
            return str(dist.locate_file(file).parent)
    path = getattr(dist, "_path", None)
    return str(path) if path is not None else None


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _package_dir(name: str) -> str | None:
    """Where a top-level package lives, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(next(iter(spec.submodule_search_locations)))


def _package_link(name: str) -> str | None:
    """The package's folder as found, when it is itself a symlink (to a checkout, say)."""
    spec = importlib.util.find_spec(name)
    found = next(iter(spec.submodule_search_locations or ())) if spec is not None else None
    return found if found is not None and os.path.islink(found) else None


def find() -> dict[str, Any]:
    result: dict[str, Any] = {
        "python": sys.executable,
        "python_version": "%d.%d.%d" % sys.version_info[:3],
        "sys_path": [p for p in sys.path if p],
        "package_dir": None,
        "version": None,
        "dist_info": None,
        "direct_url": None,
        "flashinfer": _version("flashinfer-python") or _version("flashinfer_python") or _version("flashinfer"),
        "flashinfer_dir": _package_dir("flashinfer"),
    }
    result["package_dir"] = _package_dir("sglang")
    if result["package_dir"] is None:
        return result
    result["package_link"] = _package_link("sglang")
    try:
        dist = importlib.metadata.distribution("sglang")
    except importlib.metadata.PackageNotFoundError:
        return result
    result["version"] = dist.version
    result["dist_info"] = _dist_info_dir(dist)
    try:
        direct_url = dist.read_text("direct_url.json")
        result["direct_url"] = json.loads(direct_url) if direct_url else None
    except (OSError, ValueError):
        pass
    return result


if __name__ == "__main__":
    sys.stdout.write(json.dumps(find()))
