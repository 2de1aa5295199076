"""Running sm120patch as the tests do, and reading what it left behind.

* ``run`` / ``jrun``: the command line in this process (click's ``CliRunner``), as (exit code,
  stdout, stderr) or as (exit code, the ``--json`` document, checked by ``one_json_object``).
* ``run_process`` / ``jrun_process``: ``python -m sm120patch`` in a new process, for a chosen
  environment (``process_env``) or working directory.
* ``apply_all`` / ``verify_tree`` / ``revert_tree``: the commands' own functions on a package
  directory, every patch selected, for tests that read the ``Outcome`` rather than output.
* ``modules_loaded_by``: the modules a fresh interpreter loads to run one command.
* ``tree_hashes``: the sha256 of every file under a directory, to prove nothing was written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from click.testing import CliRunner

from sm120patch.cli import main
from sm120patch.patcher.commands.apply import apply as apply_command
from sm120patch.patcher.commands.revert import revert as revert_command
from sm120patch.patcher.commands.verify import verify as verify_command
from sm120patch.patcher.outcome import Outcome
from sm120patch.patcher.plan.registry import all_patches
from sm120patch.sglang.tree import from_directory
from tests.support.realtrees import sha256


def run(*args: str, env: Mapping[str, str | None] | None = None) -> tuple[int, str, str]:
    """``sm120patch ARGS`` in this process: (exit code, stdout, stderr).  ``env``: variables
    set (None: unset) while it runs, and seen by the processes it starts."""
    result = CliRunner().invoke(main, list(args), env=env, prog_name="sm120patch")
    return result.exit_code, result.stdout, result.stderr


def one_json_object(code: int, stdout: str) -> dict:
    """The contract of ``--json``: exactly one object on stdout, whose ``exit_code`` is the
    process's and whose ``ok`` says whether that is 0; the object."""
    data = json.loads(stdout)  # one document: anything after it fails ("Extra data")
    assert isinstance(data, dict), stdout
    assert (data["exit_code"], data["ok"]) == (code, code == 0), (code, data)
    return data


def jrun(*args: str, env: Mapping[str, str | None] | None = None) -> tuple[int, dict]:
    """``sm120patch ARGS --json`` in this process: (exit code, the document, which repeats it)."""
    code, out, _ = run(*args, "--json", env=env)
    return code, one_json_object(code, out)


def process_env(drop: Iterable[str] = (), **values: str) -> dict[str, str]:
    """This process's environment without the variables ``drop``, with ``values`` set."""
    env = {k: v for k, v in os.environ.items() if k not in set(drop)}
    env.update(values)
    return env


def run_process(
    *args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -m sm120patch ARGS`` in a new process, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "sm120patch", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )


def jrun_process(*args: str | Path, env: dict[str, str] | None = None) -> tuple[int, dict, str]:
    """``python -m sm120patch ARGS --json`` in a new process: (exit code, document, stderr);
    no traceback, and the document's exit code is the process's."""
    proc = run_process(*args, "--json", env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, one_json_object(proc.returncode, proc.stdout), proc.stderr


def apply_all(package: Path) -> Outcome:
    """``apply`` of every patch on the sglang package at ``package``, in this process."""
    return apply_command(from_directory(package), list(all_patches()))


def verify_tree(package: Path) -> Outcome:
    return verify_command(from_directory(package))


def revert_tree(package: Path) -> Outcome:
    return revert_command(from_directory(package))


def modules_loaded_by(*args: str) -> set[str]:
    """The modules a fresh interpreter has loaded once ``sm120patch ARGS`` exited 0."""
    probe = (
        "import json, sys\n"
        "from sm120patch.cli import main\n"
        "try:\n"
        f"    main({list(args)!r})\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.splitlines()[-1]))


def tree_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``, by path relative to it."""
    return {str(p.relative_to(root)): sha256(p) for p in root.rglob("*") if p.is_file()}
