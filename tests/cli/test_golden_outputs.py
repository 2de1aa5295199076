"""The few whole outputs kept word for word (tests/golden/): what a user reads from apply
(and its ``--strict`` refusal), verify and revert on the miniature release, piped (one
sentence per line), with a FlashInfer that has the SM12x kernel, on a host without
nvidia-smi (an image build); and apply's and
doctor's ``--help`` at 80 and 52 columns, as help.py lays them out.  Every other test
asserts codes and facts, so a rewording is one golden file to read again, not dozens of asserts:
``SM120PATCH_UPDATE_GOLDEN=1 pytest tests/cli/test_golden_outputs.py`` rewrites them, and the
diff is the review.

Fakes: FakeFlashInfer 0.7.4 built for SM 9, 10 and 12 beside sglang (``fake_flashinfer``); PATH
is an empty folder, so no ``nvidia-smi`` of the machine running the tests is seen.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli.test_unknown_sm_checks import NEW_MODULE, NEW_SOURCE
from tests.support.cli import run
from tests.support.fakes import fake_flashinfer
from tests.support.mini_sglang import COMM, write_mini_sglang

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def _host(tmp_path: Path) -> tuple[Path, dict[str, str | None]]:
    package = write_mini_sglang(tmp_path / "site")
    fake_flashinfer(package.parent, "0.7.4", [9, 10, 12])
    (tmp_path / "bin").mkdir()
    return package, {"PATH": str(tmp_path / "bin"), "COLUMNS": "80"}


def _matches(name: str, text: str, site: Path) -> None:
    shown = text.replace(str(site), "<site>")
    golden = GOLDEN / f"{name}.txt"
    if os.environ.get("SM120PATCH_UPDATE_GOLDEN") == "1":
        golden.write_text(shown)
    assert shown == golden.read_text(), f"{name}: reworded? SM120PATCH_UPDATE_GOLDEN=1 rewrites tests/golden/"


@pytest.mark.parametrize(
    "name", ["verify-pending", "apply", "apply-strict-refused", "verify-applied", "revert", "revert-refused"]
)
def test_each_golden_output_is_what_the_command_prints(tmp_path: Path, name: str) -> None:
    package, env = _host(tmp_path)
    where = ("--sglang-path", str(package))
    if name == "verify-pending":
        code, _, err = run("verify", *where, env=env)
        assert code == 1
    elif name == "apply-strict-refused":  # a fleet host's --strict, over a gate no patch owns
        (package / NEW_MODULE).parent.mkdir(parents=True)
        (package / NEW_MODULE).write_text(NEW_SOURCE)
        code, _, err = run("apply", *where, "--strict", env=env)
        assert code == 1
    else:
        code, _, err = run("apply", *where, env=env)
        assert code == 0, err
    if name == "verify-applied":
        code, _, err = run("verify", *where, env=env)
        assert code == 0, err
    elif name == "revert":
        code, _, err = run("revert", *where, env=env)
        assert code == 0, err
    elif name == "revert-refused":
        with (package / COMM).open("a") as edited:
            edited.write("# edited by hand\n")
        code, _, err = run("revert", *where, env=env)
        assert code == 1
    _matches(name, err, package.parent)


@pytest.mark.parametrize("columns", [80, 52])
@pytest.mark.parametrize("command", ["apply", "doctor"])
def test_the_help_is_laid_out_as_its_golden_output(command: str, columns: int) -> None:
    code, out, _ = run(command, "--help", env={"COLUMNS": str(columns)})
    assert code == 0
    _matches(f"{command}-help-{columns}", out, GOLDEN)
