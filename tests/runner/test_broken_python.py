"""``--python`` at an environment whose interpreter is gone: named as a broken environment,
with the link that dangles (it was "could not run ENV: Permission denied", from executing the
folder itself).  Nothing is started: the refusal comes first."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.errors import EnvironmentProblem
from sm120patch.runner.locate import locate


def broken_venv(root: Path) -> Path:
    """A venv whose python links, through python3, to an interpreter an upgrade removed."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python3").symlink_to(root / "gone" / "python3.11")
    (root / "bin" / "python").symlink_to("python3")
    return root


@pytest.mark.parametrize("given", ["root", "interpreter"])
def test_a_dangling_interpreter_is_a_broken_environment(tmp_path: Path, given: str) -> None:
    root = broken_venv(tmp_path / "env")
    python = root if given == "root" else root / "bin" / "python"
    with pytest.raises(EnvironmentProblem) as raised:
        locate(python=str(python))
    assert str(raised.value) == (
        f"--python {python}: a broken environment: {root / 'bin' / 'python'} links to "
        f"{root / 'gone' / 'python3.11'}, which is gone (the Python it was made with was upgraded or removed); "
        "recreate the environment"
    )


def test_a_folder_without_an_interpreter_is_no_environment(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem) as raised:
        locate(python=str(tmp_path))
    assert str(raised.value) == (
        f"--python {tmp_path}: a folder without bin/python, not an environment root; give its interpreter"
    )
