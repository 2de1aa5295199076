#!/usr/bin/env python3
"""Build a wheel of an sm120patch checkout on the Ansible controller, the same bytes every time.

    build_wheel.py CHECKOUT OUTDIR   ->  prints {"wheel": "OUTDIR/sm120patch-<version>-py3-none-any.whl"}

playbook.yml copies that wheel to each host, so a rerun must not look like a new wheel:
the checkout is copied without its local state (.git, build/, *.egg-info, caches: an in-tree
build would also leave files in the checkout and pick up stale ones from build/), and
SOURCE_DATE_EPOCH fixes every timestamp in the archive.  Same sources, same wheel, same
checksum; the copy task is then "ok".

No package index is needed when this Python has setuptools >= 77 (the project's build
requirement): the build then runs without isolation.  Otherwise pip fetches setuptools into
an isolated build environment from the index this Python's pip is configured with.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Local state of a checkout that must not go into the build (the .dockerignore list, by name).
IGNORED = (
    ".git", "build", "dist", "*.egg-info", "__pycache__", "*.py[co]", "*.whl", ".whl", ".fi_aot", ".gl",
    ".venv", "venv", ".benchmarks", ".hypothesis", ".import_linter_cache", ".mypy_cache", ".pytest_cache",
    ".ruff_cache", ".tox", ".nox",
)  # fmt: skip
EPOCH = "315532800"  # 1980-01-01, the earliest time a zip archive can hold
BUILD_REQUIRES = 77  # setuptools>=77, as pyproject.toml's [build-system] says


def isolation_args() -> list[str]:
    """``--no-build-isolation`` when this Python can build the project by itself."""
    try:
        import setuptools
    except ImportError:
        return []
    try:
        major = int(setuptools.__version__.split(".")[0])
    except ValueError:
        return []
    return ["--no-build-isolation"] if major >= BUILD_REQUIRES else []


def build(checkout: Path, outdir: Path) -> Path:
    if not (checkout / "pyproject.toml").is_file():
        raise SystemExit(f"build_wheel.py: {checkout} has no pyproject.toml: not an sm120patch checkout")
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sm120patch-wheel-") as tmp:
        source, built = Path(tmp) / "src", Path(tmp) / "wheel"
        shutil.copytree(checkout, source, symlinks=True, ignore=shutil.ignore_patterns(*IGNORED))
        command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-cache-dir"]
        command += ["--disable-pip-version-check", *isolation_args(), "--wheel-dir", str(built), str(source)]
        proc = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, SOURCE_DATE_EPOCH=EPOCH))
        wheels = sorted(built.glob("sm120patch-*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            raise SystemExit(f"build_wheel.py: pip wheel {checkout} failed:\n{proc.stdout}{proc.stderr}")
        target = outdir / wheels[0].name
        if not target.is_file() or target.read_bytes() != wheels[0].read_bytes():
            shutil.copyfile(wheels[0], target)
    return target


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: build_wheel.py CHECKOUT OUTDIR", file=sys.stderr)
        return 2
    wheel = build(Path(argv[0]).expanduser().resolve(), Path(argv[1]).expanduser())
    print(json.dumps({"wheel": str(wheel.resolve())}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
