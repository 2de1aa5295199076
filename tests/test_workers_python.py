"""The workers' interpreter in the runs with the offline tests (tests/support/workers_python.py):
its ``.pth`` lists the folders ``site`` gives this interpreter and sm120patch's own, no
``PYTHONPATH``; a process it starts imports the same files but runs none of site-packages'
``.pth`` code; and it is what the workers of such an ``-n N`` run are."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

import sm120patch
from tests.support import workers_python

REPORT = """
import json, sys
import hook_target, sm120patch
print(json.dumps({
    "prefix": sys.prefix, "base_prefix": sys.base_prefix,
    "hook_target": hook_target.__file__, "sm120patch": sm120patch.__file__,
    "finders": [type(f).__name__ if not isinstance(f, type) else f.__name__ for f in sys.meta_path],
}))
"""
#: The finders a Python starts with when no .pth code adds one (an editable install's, setuptools').
STANDARD_FINDERS = {"BuiltinImporter", "FrozenImporter", "PathFinder"}


def report(python: Path | str, site_dir: Path) -> dict:
    # Nor a mutation run's switch: mutated code started outside the repository cannot find
    # mutmut's configuration, and what is checked here is where each import comes from.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MUTANT_UNDER_TEST")}
    env["PYTHONPATH"] = str(site_dir)  # where hook_target is, for both interpreters
    answer = subprocess.run([python, "-c", REPORT], capture_output=True, text=True, env=env, cwd=site_dir)
    assert answer.returncode == 0, answer.stderr
    return json.loads(answer.stdout)


def test_its_pth_lists_each_absolute_folder_once_in_order(tmp_path: Path) -> None:
    python = workers_python.make(tmp_path, ["/b", "", "relative/folder", "/a", "/b", "/c/../d"])
    assert python == tmp_path / workers_python.PYTHON and python.is_symlink()
    (pth,) = tmp_path.rglob("*.pth")
    assert pth.read_text().splitlines() == ["/b", "/a", "/d"]
    assert "include-system-site-packages = false" in (tmp_path / "pyvenv.cfg").read_text()


@pytest.mark.offline
def test_the_import_path_is_sites_and_sm120patchs_without_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    listed = workers_python.site_import_path()
    assert str(tmp_path) not in listed
    assert listed[-1] == str(Path(sm120patch.__file__).resolve().parents[1])
    assert [p for p in site.getsitepackages() if os.path.isdir(p)] == [p for p in listed if p in site.getsitepackages()]


@pytest.mark.offline
def test_a_process_it_starts_imports_the_same_files_and_runs_no_pth_code(tmp_path: Path) -> None:
    (tmp_path / "hook_target.py").write_text("")
    (tmp_path / "env").mkdir()
    python = workers_python.make(tmp_path / "env", workers_python.site_import_path())
    seen = report(python, tmp_path)
    plain = report(os.environ.get(workers_python.GIVEN, sys.executable), tmp_path)  # the one the run began on
    assert seen["hook_target"] == plain["hook_target"] == str(tmp_path / "hook_target.py")
    assert seen["sm120patch"] == str(Path(sm120patch.__file__).resolve())  # the checkout under test
    assert (seen["prefix"], seen["base_prefix"]) == (str(tmp_path / "env"), sys.base_prefix)
    assert set(seen["finders"]) == STANDARD_FINDERS
    if set(plain["finders"]) == STANDARD_FINDERS:
        pytest.skip("this interpreter's .pth files add no finder to tell the two apart")


@pytest.mark.offline  # the workers run it in the runs with the tests that start Pythons
def test_the_workers_of_this_run_run_it() -> None:
    chosen = os.environ.get(workers_python.CHOSEN)
    if chosen is None or not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("not an -n N run with the offline tests")
    assert sys.executable == chosen
