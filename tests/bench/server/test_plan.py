"""``bench server --plan`` in this process, on FakeSglang's files (nothing runs): the
configurations, their environment and command lines, and the refusals of ``--configs``."""

from __future__ import annotations

import io
import json
import shlex
from pathlib import Path

import pytest

from sm120patch.sglang.options import BACKEND, HATCH, PCIE_IPC_FLAG
from tests.bench.server.fakes import fake_server_site
from tests.bench.server.test_driver import GATE
from tests.support.cli import run


@pytest.fixture
def package(tmp_path: Path) -> Path:
    return fake_server_site(tmp_path, version="0.5.23", pcie_ipc=True, gate=GATE)


def test_the_plan_says_each_configuration_and_its_command_line(package: Path) -> None:
    code, out, err = run("bench", "server", "--plan", "--tp", "4", "--sglang-path", str(package), "--fuse-up-to", "64")
    assert code == 0, err
    text = out + err
    assert "sglang 0.5.23, TP 4: 6 configurations" in text
    data = json.loads(
        run("bench", "server", "--plan", "--tp", "4", "--sglang-path", str(package), "--fuse-up-to", "64", "--json")[1]
    )
    assert [c["name"] for c in data["configs"]] == [
        "default", "fusion", "fusion-limit", "pcie-ipc", "pcie-ipc+fusion", "pcie-ipc+fusion-limit",
    ]  # fmt: skip
    for one in data["configs"]:
        env = " ".join(f"{k}={v}" for k, v in one["env"].items())
        assert f"  {env + ' ' if env else ''}{shlex.join(one['args'])}" in text.replace("\n", "")
    limit = data["configs"][5]
    assert limit["env"] == {PCIE_IPC_FLAG: "1", "SM120PATCH_FUSE_UP_TO": "64"}
    assert limit["args"][-2:] == [BACKEND, "trtllm"] and data["configs"][3]["args"][-1] == HATCH
    assert data["configs"][1]["env"] == {"SM120PATCH_FUSE_UP_TO": "2048"}  # sglang's own, as the hook proves it
    assert data["skipped"] == [] and data["harness_env"]["SM120PATCH_NUMPY_SEED"] == "1234"


def test_what_is_not_run_is_said_with_why(package: Path) -> None:
    data = json.loads(run("bench", "server", "--plan", "--tp", "3", "--sglang-path", str(package), "--json")[1])
    assert [c["name"] for c in data["configs"]] == ["default", "fusion"]
    assert data["skipped"] == [
        {"name": "fusion-limit", "why": "it needs a token limit: --fuse-up-to N|measured"},
        {"name": "pcie-ipc", "why": "PCIe-IPC runs at TP 2, 4, 8 only, not TP 3"},
        {"name": "pcie-ipc+fusion", "why": "PCIe-IPC runs at TP 2, 4, 8 only, not TP 3"},
        {"name": "pcie-ipc+fusion-limit", "why": "PCIe-IPC runs at TP 2, 4, 8 only, not TP 3"},
    ]


def test_configs_chooses_and_refuses(package: Path) -> None:
    where = ["--sglang-path", str(package)]
    data = json.loads(run("bench", "server", "--plan", "--tp", "2", "--configs", "pcie-ipc", "--json", *where)[1])
    assert [c["name"] for c in data["configs"]] == ["default", "pcie-ipc"]
    assert data["notes"] == ["sglang's default runs too: every configuration's answers are checked against it"]
    code, _, err = run("bench", "server", "--plan", "--tp", "2", "--configs", "pcie,fusion", *where)
    assert code == 2 and "unknown configuration pcie: choose from default, fusion, fusion-limit, pcie-ipc," in err
    code, _, err = run("bench", "server", "--plan", "--tp", "2", "--configs", "pcie-ipc", "--dtype", "fp16", *where)
    assert code == 2 and "--configs pcie-ipc does not apply: PCIe-IPC runs in bf16 only, not fp16" in err
    code, _, err = run("bench", "server", "--plan", "--configs", "pcie-ipc", *where)
    assert code == 2 and "--plan needs --tp" in err


def test_a_release_without_pcie_ipc_plans_without_it(tmp_path: Path) -> None:
    package = fake_server_site(tmp_path, version="0.5.19")
    code, _, err = run("bench", "server", "--plan", "--tp", "2", "--sglang-path", str(package), "--configs", "pcie-ipc")
    assert code == 2
    assert "--configs pcie-ipc does not apply: sglang 0.5.19 has no PCIe-IPC allreduce" in err


def test_the_text_says_what_is_not_run_the_notes_and_the_harness_dimmed(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fake: the console, a recording terminal with colour (dim is how a skipped line reads)."""
    from rich.console import Console

    from sm120patch.bench.server import plan as plan_module
    from sm120patch.output import console as console_module

    shown = Console(record=True, force_terminal=True, color_system="standard", width=200, file=io.StringIO())
    monkeypatch.setattr(console_module, "console", lambda: shown)
    where = ["--sglang-path", str(package)]
    data = json.loads(run("bench", "server", "--plan", "--tp", "3", "--configs", "fusion", "--json", *where)[1])
    assert data["sglang"] == {"version": "0.5.23", "location": str(package), "benchmark": data["sglang"]["benchmark"]}
    assert data["sglang"]["benchmark"].startswith("sglang.")
    plan_module.render(data, shown)
    text = shown.export_text(styles=True, clear=False)
    lines = shown.export_text().splitlines()
    assert lines[0] == "sglang 0.5.23, TP 3: 2 configurations"
    assert lines[-6:] == [
        "not run: fusion-limit: it needs a token limit: --fuse-up-to N|measured",
        "not run: pcie-ipc: PCIe-IPC runs at TP 2, 4, 8 only, not TP 3",
        "not run: pcie-ipc+fusion: PCIe-IPC runs at TP 2, 4, 8 only, not TP 3",
        "not run: pcie-ipc+fusion-limit: PCIe-IPC runs at TP 2, 4, 8 only, not TP 3",
        "sglang's default runs too: every configuration's answers are checked against it",
        "every run also has the hook (sitecustomize) first on PYTHONPATH and "
        + ", ".join(f"{k}={v}" for k, v in data["harness_env"].items()),
    ]
    assert text.count("\x1b[2mnot run: ") == 4 and "\x1b[2msglang's default runs too" in text
    assert "\x1b[2mevery run also has the hook" in text
    default = data["configs"][0]
    assert not default["env"] and lines[2] == "  " + shlex.join(default["args"])  # no environment: no leading blank
