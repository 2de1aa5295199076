"""The fast tier's workers' interpreter (tests/support/workers_python.py): it imports the
same files from the same folders as the interpreter it is made from, runs no ``.pth`` code,
and is what the workers of an ``-n N`` run are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sm120patch
from tests.support import workers_python

REPORT = """
import json, os, sys
import hook_target, sm120patch
print(json.dumps({
    "prefix": sys.prefix, "base_prefix": sys.base_prefix, "path": sys.path,
    "hook_target": hook_target.__file__, "sm120patch": sm120patch.__file__,
    "pth_ran": os.environ.get("PTH_RAN"),
}))
"""


def test_it_imports_what_this_one_does_and_runs_no_pth_code(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "hook_target.py").write_text("")
    (site / "hook.pth").write_text("import os; os.environ['PTH_RAN'] = '1'\n")
    env_folder = tmp_path / "env"
    env_folder.mkdir()
    python = workers_python.make(env_folder, [*sys.path, str(site), "", "relative/folder", str(site)])
    assert python == env_folder / workers_python.PYTHON and python.is_symlink()
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PTH_RAN")}
    answer = subprocess.run([python, "-c", REPORT], capture_output=True, text=True, env=environ, cwd=tmp_path)
    assert answer.returncode == 0, answer.stderr
    seen = json.loads(answer.stdout)
    assert seen["pth_ran"] is None  # the .pth in a listed folder: its import line never ran
    assert seen["hook_target"] == str(site / "hook_target.py")
    assert seen["sm120patch"] == sm120patch.__file__
    assert (seen["prefix"], seen["base_prefix"]) == (str(env_folder), sys.base_prefix)
    assert seen["path"].count(str(site)) == 1
    assert not any("relative" in p for p in seen["path"])
    # The same check on this interpreter with the folder as a site dir runs the hook.
    hooked = subprocess.run(
        [sys.executable, "-c", f"import site; site.addsitedir({str(site)!r}); {REPORT}"],
        capture_output=True,
        text=True,
        env=environ,
        cwd=tmp_path,
    )
    assert json.loads(hooked.stdout)["pth_ran"] == "1"


def test_the_workers_of_this_run_run_it() -> None:
    chosen = os.environ.get(workers_python.CHOSEN)
    if chosen is None or not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("not an -n N run of the fast tier")
    assert sys.executable == chosen
