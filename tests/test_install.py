"""A built wheel and an editable install both give a CLI that finds every patch.

``patches/`` is mapped to ``sm120patch.patches`` by the build configuration; a broken
mapping would ship a CLI with an empty registry, which only an installed copy can show.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sm120patch.plan.registry import all_patches

pytestmark = pytest.mark.slow  # real sglang releases from the package index

REPO = Path(__file__).resolve().parent.parent
EXPECTED = sorted(p.id for p in all_patches())


def venv(root: Path) -> Path:
    """A fresh venv that sees nothing of this interpreter's packages, as a user's would."""
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    return root / "bin"


def pip_install(bin_dir: Path, *args: str) -> None:
    """Install with dependencies from the package index, as the README says."""
    subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args],
        check=True,
        cwd="/",
    )


def installed_cli_patches(bin_dir: Path, package: Path) -> tuple[list[str], str]:
    proc = subprocess.run(
        [str(bin_dir / "sm120patch"), "list", "--sglang-path", str(package), "--json"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert proc.returncode == 0, proc.stderr
    where = subprocess.run(
        [str(bin_dir / "python"), "-c", "import sm120patch.patches as p; print(p.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    ).stdout.strip()
    return sorted(p["id"] for p in json.loads(proc.stdout)["patches"]), where


def test_wheel_install_finds_every_patch(tmp_path: Path, release) -> None:
    package = release("0.5.9")
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(REPO)],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("sm120patch-*.whl")
    bin_dir = venv(tmp_path / "venv")
    pip_install(bin_dir, str(wheel))
    ids, where = installed_cli_patches(bin_dir, package)
    assert ids == EXPECTED
    assert where.startswith(str(tmp_path / "venv"))  # the wheel's copy, not the checkout
    top_level = subprocess.run(
        [str(bin_dir / "python"), "-c", "import patches"], capture_output=True, text=True, cwd="/"
    )
    assert top_level.returncode != 0  # no top-level package named "patches" is installed
    module = subprocess.run(
        [str(bin_dir / "python"), "-m", "sm120patch", "--version"], capture_output=True, text=True, cwd="/"
    )
    assert module.returncode == 0 and "sm120patch" in module.stdout


def test_editable_install_finds_every_patch(tmp_path: Path, release) -> None:
    package = release("0.5.9")
    bin_dir = venv(tmp_path / "venv")
    pip_install(bin_dir, "-e", str(REPO))
    ids, where = installed_cli_patches(bin_dir, package)
    assert ids == EXPECTED
    assert where == str(REPO / "patches" / "__init__.py")
