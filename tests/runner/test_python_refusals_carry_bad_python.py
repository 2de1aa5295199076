"""Every refusal of ``--python`` (runner/locate.run_probe) carries the code ``bad-python``:
a dangling link, a folder without an interpreter, no such file, an interpreter that did not
run the probe, that failed it, or that answered something else.  The probe itself is faked:
nothing is started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sm120patch.errors import EnvironmentProblem
from sm120patch.runner import Answer, ProbeError
from sm120patch.runner import locate as locate_module
from sm120patch.runner.locate import run_probe


def refusal(python: Path) -> EnvironmentProblem:
    with pytest.raises(EnvironmentProblem) as raised:
        run_probe(str(python))
    return raised.value


@pytest.mark.parametrize("shape", ["dangling", "folder", "missing"])
def test_an_interpreter_that_is_not_there_is_bad_python(tmp_path: Path, shape: str) -> None:
    python = tmp_path / "python"
    if shape == "dangling":
        python.symlink_to(tmp_path / "gone")
    elif shape == "folder":
        python.mkdir()
    assert refusal(python).code == "bad-python"


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (ProbeError("could not run it: Exec format error"), "Exec format error"),
        (Answer(1, "", "Traceback\nImportError: no json\n"), "ImportError: no json"),
        (Answer(0, "Python 2.7 says hello\n", ""), "Python 2.7 says hello"),
    ],
    ids=["did-not-run", "failed", "not-understood"],
)
def test_an_interpreter_whose_probe_gave_no_answer_is_bad_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: Answer | ProbeError, said: str
) -> None:
    """Fake: run_script raises or returns ``answer``; the refusal names what it said."""
    python = tmp_path / "python"
    python.write_text("")

    def run_script(*args: Any, **kwargs: Any) -> Answer:
        if isinstance(answer, ProbeError):
            raise answer
        return answer

    monkeypatch.setattr(locate_module, "run_script", run_script)
    problem = refusal(python)
    assert problem.code == "bad-python"
    assert said in str(problem)
