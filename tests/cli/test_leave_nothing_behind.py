"""A full revert leaves nothing of sm120patch in the sglang tree, and an ``sglang`` folder
without sglang's code (what ``pip uninstall sglang`` leaves of a tree sm120patch touched) is
no sglang to every command."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.cli import jrun, run

COMMANDS = ("apply", "verify", "revert", "list", "doctor")


def uninstalled(site: Path) -> Path:
    """What pip uninstall leaves of the miniature release: every file its RECORD lists is
    gone (and the folders they emptied), sm120patch's state folder stays."""
    package = site / "sglang"
    for dist in site.glob("sglang-*.dist-info"):
        for path in sorted(dist.rglob("*"), reverse=True):
            path.unlink()
        dist.rmdir()
    for path in sorted(package.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if ".sm120patch" in path.relative_to(package).parts:
            continue
        if path.is_dir():
            path.rmdir()
        else:
            path.unlink()
    return package


@pytest.mark.offline
def test_apply_then_revert_leaves_no_state_folder_and_verify_says_not_patched(mini: Path) -> None:
    assert run("apply", "--sglang-path", str(mini))[0] == 0
    code, data = jrun("revert", "--sglang-path", str(mini))
    assert code == 0 and data["messages"] == []
    assert not (mini / ".sm120patch").exists()
    code, data = jrun("verify", "--sglang-path", str(mini))
    assert code == 1 and data["headline"].startswith("not patched: the files are sglang 0.5.11's release files")
    for command in ("list", "revert", "doctor"):  # reading, or nothing to do, writes nothing
        run(command, "--sglang-path", str(mini))
    run("apply", "--sglang-path", str(mini), "--dry-run")
    assert not (mini / ".sm120patch").exists()


def test_a_revert_with_nothing_to_restore_removes_an_empty_state_folder(mini: Path) -> None:
    """An older sm120patch's revert left the folder, its lock and .gitignore behind."""
    (mini / ".sm120patch").mkdir()
    (mini / ".sm120patch" / "lock").write_text("123")
    (mini / ".sm120patch" / ".gitignore").write_text("*\n")
    assert run("revert", "--sglang-path", str(mini))[0] == 0
    assert not (mini / ".sm120patch").exists()


@pytest.mark.parametrize("reverted", [True, False], ids=["reverted", "still-patched"])
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.offline
def test_an_uninstalled_sglang_with_only_the_state_folder_left_is_no_sglang(
    mini: Path, monkeypatch: pytest.MonkeyPatch, command: str, reverted: bool
) -> None:
    assert run("apply", "--sglang-path", str(mini), "--only", "communicator-flag")[0] == 0
    if reverted:
        assert run("revert", "--sglang-path", str(mini), "--force")[0] == 0
        (mini / ".sm120patch").mkdir()  # a folder an older sm120patch left
        (mini / ".sm120patch" / "lock").write_text("")
    package = uninstalled(mini.parent)
    assert sorted(p.name for p in package.iterdir()) == [".sm120patch"]
    # Found as Python would find it: an importable (namespace) ``sglang`` on sys.path.
    monkeypatch.setenv("PYTHONPATH", str(mini.parent))
    code, data = jrun(command, "--python", sys.executable)
    assert code == 2, data
    assert data["error"].endswith(
        f"{package} holds no sglang code, only sm120patch's state folder .sm120patch; sglang was uninstalled. "
        f"Remove {package} once you have kept what you need from it"
    )
    code, data = jrun(command, "--sglang-path", str(mini.parent))
    assert code == 2 and "holds no sglang code" in data["error"]


@pytest.mark.offline
def test_an_empty_sglang_folder_is_called_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sglang").mkdir()  # found by Python as an empty namespace package
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    code, data = jrun("verify", "--python", sys.executable)
    assert code == 2
    assert data["error"].endswith(
        f"{tmp_path / 'sglang'} holds nothing; sglang was uninstalled. "
        f"Remove {tmp_path / 'sglang'} once you have kept what you need from it"
    )


@pytest.mark.offline
def test_a_folder_named_sglang_that_is_not_what_pip_left_is_not_called_uninstalled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout's root named sglang, found as a namespace from its parent: no sglang, and no
    advice to remove it."""
    (tmp_path / "sglang" / "python").mkdir(parents=True)
    (tmp_path / "sglang" / "README.md").write_text("sglang\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    code, data = jrun("verify", "--python", sys.executable)
    assert code == 2 and "holds no sglang code" in data["error"]
    assert "uninstalled" not in data["error"] and "Remove" not in data["error"]
    code, data = jrun("verify", "--sglang-path", str(tmp_path / "sglang"))
    assert code == 2 and "not an sglang package" in data["error"]
