"""sm120patch as a maintainer ships it: the sdist and the wheel build and pass ``twine check``,
the wheel holds every module of the package tree, the sdist runs the fast tier, and the
README's installs (a clean venv, ``pipx install``, an editable checkout) give a CLI that
finds every patch and patches a real release through ``--python``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from sm120patch import __version__
from sm120patch.patcher.plan.registry import all_patches
from tests.support.realtrees import serving_env

pytestmark = pytest.mark.slow  # builds, installs from the package index, real releases

REPO = Path(__file__).resolve().parent.parent
EXPECTED = sorted(p.id for p in all_patches())


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--no-isolation", "--outdir", str(out), str(REPO)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("sm120patch-*.whl")
    (sdist,) = out.glob("sm120patch-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def run(*args: str | Path, env: dict[str, str] | None = None, cwd: Path | str = "/") -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, cwd=cwd)


def test_twine_check_passes_on_both(dist: dict[str, Path]) -> None:
    proc = run(sys.executable, "-m", "twine", "check", "--strict", dist["wheel"], dist["sdist"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == 2


def test_the_wheel_holds_every_module_of_the_tree(dist: dict[str, Path]) -> None:
    source = {p.relative_to(REPO).as_posix() for p in (REPO / "sm120patch").rglob("*.py")}
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(f"sm120patch-{__version__}.dist-info/METADATA").decode()
    assert source <= names, sorted(source - names)
    assert "sm120patch/py.typed" in names
    assert not any(n.startswith(("patches/", "tests/")) for n in names)  # no stray top-level packages
    assert f"Version: {__version__}" in metadata  # one source: sm120patch.__version__
    assert "Requires-Dist: libcst" in metadata and "Provides-Extra: plot" in metadata


def test_the_sdist_runs_the_fast_tier(dist: dict[str, Path], tmp_path: Path) -> None:
    with tarfile.open(dist["sdist"]) as archive:
        archive.extractall(tmp_path, filter="data")
    (root,) = tmp_path.iterdir()
    for needed in (
        "tests/conftest.py",
        "tests/support/mini_sglang.py",
        "docs/compatibility.md",
        "README.md",
        "LICENSE",
    ):
        assert (root / needed).is_file(), needed
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = run(
        sys.executable, "-m", "pytest", "-q", "-x", "-m", "not slow", "-p", "no:cacheprovider", env=env, cwd=root
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert " passed" in proc.stdout.splitlines()[-1]
    assert run(sys.executable, "-c", "import sm120patch; print(sm120patch.__file__)", env=env).stdout.startswith(
        str(root)
    )  # the sdist's copy was tested, not this checkout


def test_pipx_install_then_apply_through_python(dist: dict[str, Path], tmp_path: Path) -> None:
    serving = serving_env(tmp_path / "serving", "0.5.9")
    env = dict(os.environ, PIPX_HOME=str(tmp_path / "pipx"), PIPX_BIN_DIR=str(tmp_path / "bin"))
    installed = run(sys.executable, "-m", "pipx", "install", dist["wheel"], env=env)
    assert installed.returncode == 0, installed.stderr
    cli = tmp_path / "bin" / "sm120patch"
    proc = run(cli, "apply", "--python", serving, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["sglang"]["version"] == "0.5.9" and len(data["written"]) == 2
    listed = json.loads(run(cli, "list", "--python", serving, "--json", env=env).stdout)
    assert sorted(p["id"] for p in listed["patches"]) == EXPECTED
    assert {p["state"] for p in listed["patches"]} <= {"applied", "not-needed"}
    lib = run(serving, "-c", "import libcst")
    assert lib.returncode != 0  # the serving environment stays as it was: pipx kept sm120patch apart


def test_editable_install_from_a_checkout(tmp_path: Path, release) -> None:
    package = release("0.5.9")
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", "-e", str(REPO)], check=True, cwd="/")
    proc = run(tmp_path / "venv" / "bin" / "sm120patch", "list", "--sglang-path", package, "--json")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p["id"] for p in json.loads(proc.stdout)["patches"]) == EXPECTED
    where = run(python, "-c", "import sm120patch.patcher.patches as p; print(p.__file__)").stdout.strip()
    assert where == str(REPO / "sm120patch" / "patcher" / "patches" / "__init__.py")


def test_a_plain_checkout_runs_without_installing(tmp_path: Path, release) -> None:
    package = release("0.5.9")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO)
    proc = run(sys.executable, "-m", "sm120patch", "list", "--sglang-path", package, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p["id"] for p in json.loads(proc.stdout)["patches"]) == EXPECTED
