"""Usage before environment, said once: an empty ``--only`` / ``--skip`` or a selection
that cannot be made is exit 2 before sglang is looked for, and a ``--wheel`` that is not
a readable sglang wheel (or a corrupt cached one) is one sentence, exit 2, no traceback."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.test_exit_codes import mini_wheel
from tests.support.cli import run


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("--only=", "'' names no patch"),
        ("--skip=", "'' names no patch"),
        ("--only= , ", "' , ' names no patch"),
        ("--only=bogus", "unknown patch id bogus"),
        ("--skip=communicator-import", "cannot skip communicator-import"),
    ],
)
def test_a_selection_that_names_nothing_is_a_usage_error_before_sglang_is_looked_for(
    tmp_path: Path, option: str, said: str
) -> None:
    # an interpreter that is not there: the selection is judged first
    code, out, err = run("apply", option, "--python", str(tmp_path / "no-python"), "--json")
    assert code == 2
    data = json.loads(out)  # one object
    assert (data["ok"], data["exit_code"]) == (False, 2)
    assert said in data["error"] and said in err
    assert "interpreter" not in err


def garbage(path: Path) -> Path:
    path.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")
    return path


def cut_short(path: Path, wheel: Path) -> Path:
    path.write_bytes(wheel.read_bytes()[:-200])
    return path


@pytest.mark.parametrize("make", [garbage, cut_short], ids=["not-a-zip", "cut-short"])
def test_a_wheel_that_is_not_readable_is_one_sentence(tmp_path: Path, make: Callable[..., Path]) -> None:
    wheel = make(tmp_path / "given.whl", *([mini_wheel(tmp_path)] if make is cut_short else []))
    code, _, err = run("demo", "--wheel", str(wheel))
    assert code == 2, err
    assert "Traceback" not in err
    assert err.strip().startswith(f"error: [download] --wheel {wheel}: not a readable wheel (")
    assert len(err.strip().splitlines()) == 1


def test_a_zip_without_sglang_is_not_an_sglang_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "other-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("other/__init__.py", "")
    code, _, err = run("demo", "--wheel", str(wheel))
    assert (code, err.strip()) == (
        2,
        f"error: [download] --wheel {wheel}: not an sglang wheel (it has no sglang/__init__.py)",
    )


def test_a_corrupt_cached_wheel_is_named_with_the_fix(tmp_path: Path) -> None:
    cached = garbage(tmp_path / "sglang-0.5.9-py3-none-any.whl")
    code, _, err = run("demo", env={"SM120PATCH_WHEEL_CACHE": str(tmp_path)})
    assert code == 2, err
    assert f"the cached wheel {cached} is corrupt" in err
    assert f"rm '{cached}'" in err and "download it afresh" in err
    assert "Traceback" not in err
