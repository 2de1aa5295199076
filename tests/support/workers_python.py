"""The interpreter the pytest-xdist workers run where the ``offline`` tests are in the run
(``-m "not slow or offline" -n N``): this one, minus the code that ``.pth`` files run at each
start.

Every Python process an offline test starts (``python -m sm120patch``, the probes the commands
run in the serving interpreter, the fake serving processes and their TP ranks: about 450)
runs ``site``, which executes each ``import`` line of every ``.pth`` file in site-packages:
an editable install's finder, setuptools' distutils hook, coverage's hook, on some hosts a
``certifi`` hook.  Here that is about 40 ms of the 60 ms a bare start takes.  The workers run
this interpreter from a virtual environment of its own (``make``) whose one ``.pth`` file
lists the folders ``site`` puts on the import path (``site_import_path``): each process
imports the same files from the same folders, and no ``.pth`` code runs.  Made by
``pytest_configure`` (tests/conftest.py) in the process that starts the workers, for those
runs only: the fast tier starts no process, and the slow tier needs what a ``.pth`` sets up
(pip downloads through this host's proxy trust its CA that way)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

import sm120patch

#: What the interpreter in the folder ``make`` fills is called (as ``python -m venv`` names it).
PYTHON = Path("bin") / "python3"
#: Set by the process that starts the workers: the interpreter it gave them, and its own.
CHOSEN = "SM120PATCH_TESTS_WORKERS_PYTHON"
GIVEN = "SM120PATCH_TESTS_PYTHON"


def site_import_path() -> list[str]:
    """The folders ``site`` puts on this interpreter's import path (site-packages and what
    their ``.pth`` files add), without ``PYTHONPATH`` or a script's folder, which each process
    takes from its own environment; then the folder sm120patch is imported from, which an
    editable install's finder (``.pth`` code) stands for."""
    listed = subprocess.run(
        [sys.executable, "-E", "-c", "import json, sys; print(json.dumps(sys.path[1:]))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [*json.loads(listed), str(Path(sm120patch.__file__).resolve().parents[1])]


def make(folder: Path, import_path: Iterable[str]) -> Path:
    """A virtual environment in ``folder`` (which must exist) whose interpreter is this
    one's base interpreter, symlinked as ``venv`` does, with no system site-packages and one
    ``.pth`` file listing ``import_path`` (each absolute folder, once, in order; the standard
    library's folders are the interpreter's own).  Its interpreter."""
    base = Path(getattr(sys, "_base_executable", None) or sys.executable)
    python = folder / PYTHON
    python.parent.mkdir()
    python.symlink_to(base)
    major, minor, micro = sys.version_info[:3]
    config = f"home = {base.parent}\ninclude-system-site-packages = false\nversion = {major}.{minor}.{micro}\n"
    (folder / "pyvenv.cfg").write_text(config)
    scheme = "venv" if "venv" in sysconfig.get_scheme_names() else "posix_prefix"  # "venv": 3.11+
    site_packages = Path(sysconfig.get_path("purelib", scheme, vars={"base": str(folder), "platbase": str(folder)}))
    site_packages.mkdir(parents=True)
    # An absolute path never starts with "import", so site reads each line as a folder to add.
    lines = dict.fromkeys(os.path.abspath(p) for p in import_path if p and os.path.isabs(p))
    (site_packages / "import-path.pth").write_text("".join(f"{line}\n" for line in lines))
    return python
