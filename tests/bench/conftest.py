from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sm120patch.commands.demo import cache_root

TORCH = "torch==2.13.0"  # the CPU build this machine kind keeps on disk (no GPU here)


@pytest.fixture(scope="session")
def cpu_torch_python() -> Path:
    """A cached venv with the real CPU build of torch: a serving interpreter without a GPU."""
    venv = cache_root() / "venvs" / "torch-2.13.0-cpu"
    python = venv / "bin" / "python"
    if not (venv / ".complete").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", TORCH], check=True
        )
        (venv / ".complete").touch()
    return python
