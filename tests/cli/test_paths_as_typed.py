"""Paths as the user typed them: ``--python`` / ``--sglang-path`` (and their variables)
relative to the working directory, an env root; and one tree read the same whichever way
it was found (a checkout put on ``sys.path`` by a ``.pth`` file has no install metadata)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.cli import jrun
from tests.support.mini_sglang import write_mini_sglang
from tests.support.realtrees import bare_venv

pytestmark = pytest.mark.offline  # each test starts processes: the slow tier (tests/conftest.py)


@pytest.fixture
def pth_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``envA``, a venv whose ``.pth`` puts the checkout ``src`` (sglang 0.5.9, no dist-info)
    on sys.path; the working directory is their parent."""
    package = write_mini_sglang(tmp_path / "src", version="0.5.9")
    shutil.rmtree(tmp_path / "src" / "sglang-0.5.9.dist-info")
    (package / "version.py").write_text('__version__ = "0.5.9"\n')
    _, site = bare_venv(tmp_path / "envA")
    (site / "sglang-checkout.pth").write_text(str(tmp_path / "src") + "\n")
    monkeypatch.chdir(tmp_path)
    return package


@pytest.mark.parametrize(
    "how",
    [
        ["--python", "envA/bin/python"],
        ["--python", "./envA/bin/python"],
        ["--python", "envA"],
        ["--sglang-path", "src/sglang"],
        ["--sglang-path", "src"],
    ],
    ids=" ".join,
)
def test_a_relative_path_is_the_callers(pth_env: Path, how: list[str]) -> None:
    code, data = jrun("list", *how)
    assert code == 0, data
    assert data["sglang"]["location"] == str(pth_env.resolve())
    assert (data["sglang"]["version"], data["sglang"]["flashinfer_pinned"]) == ("0.5.9", "0.6.3")


@pytest.mark.parametrize("variable", ["SM120PATCH_PYTHON=envA/bin/python", "SM120PATCH_SGLANG_PATH=src"])
def test_a_relative_path_in_a_variable_is_the_callers(pth_env: Path, variable: str) -> None:
    name, _, value = variable.partition("=")
    code, data = jrun("list", env={name: value})
    assert code == 0, data
    assert data["sglang"]["location"] == str(pth_env.resolve())
    assert data["sglang"]["version"] == "0.5.9"


def test_doctor_runs_the_host_facts_in_the_interpreter_named_relatively(pth_env: Path) -> None:
    _, data = jrun("doctor", "--python", "envA", "--timeout", "5")
    assert data["sglang"]["version"] == "0.5.9"
    assert "could not run" not in str(data["findings"]), data["findings"]


def test_a_pth_checkout_reads_the_same_through_python_and_sglang_path(pth_env: Path) -> None:
    seen = [
        jrun("list", *how)[1]["sglang"]
        for how in (["--python", str(Path("envA").absolute())], ["--sglang-path", str(pth_env)])
    ]
    keys = ("location", "version", "flashinfer_pinned", "flashinfer_has_sm12x_allreduce")
    assert [[s[k] for k in keys] for s in seen] == [[str(pth_env), "0.5.9", "0.6.3", False]] * 2
