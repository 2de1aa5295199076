"""`verify --runtime`: the patched modules imported in the serving interpreter.

``fake_torch_package`` (tests/support/fakes.py) stands for torch: one GPU of a chosen capability.
The miniature tree (tests/support/mini_sglang.py) imports with nothing else; real releases need
sglang's dependencies, so there the check must report the import failure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.cli import jrun
from tests.support.fakes import fake_torch_package


def cli(*args: str, pythonpath: Path | None = None) -> tuple[int, dict]:
    """``sm120patch ARGS --json`` in this process; the interpreter it starts for the runtime
    check sees ``pythonpath`` as its only PYTHONPATH."""
    return jrun(*args, env={"PYTHONPATH": str(pythonpath) if pythonpath is not None else None})


@pytest.mark.parametrize(("capability", "takes"), [((12, 0), True), ((12, 1), True), ((9, 0), False)])
@pytest.mark.offline
def test_runtime_reports_the_probe_and_the_flags(mini: Path, tmp_path: Path, capability, takes: bool) -> None:
    torch = fake_torch_package(tmp_path / "faketorch", capability)
    code, data = cli("apply", "--sglang-path", str(mini))
    assert code == 0
    code, data = cli("verify", "--runtime", "--sglang-path", str(mini), pythonpath=torch)
    assert code == 0, data["headline"]
    runtime = data["runtime"]
    assert runtime["probe"] == {"ok": True, "expression": "is_sm120_supported()", "value": takes}
    modules = {m["module"]: m for m in runtime["modules"]}
    assert modules["sglang.srt.layers.communicator"]["flags"] == {
        "_is_sm100_supported": False,
        "_is_sm120_supported": takes,
        "_is_sm90_supported": capability == (9, 0),
    }
    assert modules["sglang.srt.server_args"] == {"module": "sglang.srt.server_args", "ok": True, "flags": {}}
    branch = "takes" if takes else "does not take"
    assert any(f"this host {branch} the SM12x branches" in m for m in data["messages"])


@pytest.mark.offline
def test_runtime_without_torch_is_an_environment_error(mini: Path) -> None:
    code, data = cli("verify", "--runtime", "--sglang-path", str(mini))
    assert (code, data["exit_code"], data["code"]) == (2, 2, "runtime-check")
    assert "torch does not import" in data["headline"] and "No module named 'torch'" in data["headline"]


@pytest.mark.offline
def test_runtime_reports_a_module_that_no_longer_imports(mini: Path, tmp_path: Path) -> None:
    torch = fake_torch_package(tmp_path / "faketorch", (12, 0))
    assert cli("apply", "--sglang-path", str(mini))[0] == 0
    gate = mini / "srt/layers/communicator.py"
    gate.write_text(gate.read_text() + "\nraise ImportError('a broken hand edit')\n")
    code, data = cli("verify", "--runtime", "--sglang-path", str(mini), pythonpath=torch)
    assert (code, data["code"]) == (1, "runtime-check")
    assert data["headline"] == (
        f"the patched tree does not import in {sys.executable}: "
        "sglang.srt.layers.communicator: ImportError: a broken hand edit"
    )


@pytest.mark.slow
def test_runtime_on_a_real_release_names_the_missing_dependency(release, tmp_path: Path) -> None:
    package = release("0.5.9")
    torch = fake_torch_package(tmp_path / "faketorch", (12, 0))
    assert cli("apply", "--sglang-path", str(package))[0] == 0
    code, data = cli("verify", "--runtime", "--sglang-path", str(package), pythonpath=torch)
    assert code == 1
    failure = data["runtime"]["sglang"]
    assert failure["ok"] is False and failure["error"].startswith("ModuleNotFoundError: No module named")
    assert data["headline"].startswith(f"sglang does not import in {sys.executable}: {failure['error']}")
    assert data["runtime"]["modules"] == []  # not tried: their failure would say nothing new


@pytest.mark.parametrize(("args", "limit"), [((), 120.0), (("--timeout", "7"), 7.0)])
def test_runtime_imports_get_120_s_unless_timeout_is_given(
    mini: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], limit: float
) -> None:
    """A cold import of a real sglang took 17-25 s on an H200 host: past the 20 s the other steps get."""
    from click.testing import CliRunner

    from sm120patch import cli as cli_module
    from sm120patch.patcher.commands import verify as verify_module

    seen: list[float | None] = []

    def record(tree: object, runtime_timeout: float | None = None, strict: bool = False) -> None:
        seen.append(runtime_timeout)  # and returns no outcome: the command stops there (exit 70)

    monkeypatch.setattr(verify_module, "verify", record)
    CliRunner().invoke(cli_module.main, ["verify", "--runtime", "--sglang-path", str(mini), *args])
    CliRunner().invoke(cli_module.main, ["verify", "--sglang-path", str(mini), *args])
    assert seen == [limit, None]
