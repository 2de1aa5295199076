"""``bench server --plan`` on every real release 0.5.9 - 0.5.23 at TP 2, 4 and 8 (slow: wheels
from the package index): the configurations each release takes, read from its own code, and
command lines whose every option the release accepts; and what the server hook wraps, in
each release's own code."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from sm120patch.bench.remote import server_hook
from sm120patch.bench.server import driver
from sm120patch.sglang.options import BACKEND, ENABLE, HATCH, PCIE_IPC_FLAG
from tests.bench.server.test_releases import _arguments
from tests.support.cli import run
from tests.support.realtrees import installed_release

pytestmark = pytest.mark.slow
RELEASES = [f"0.5.{minor}" for minor in range(9, 24)]


def minor(version: str) -> int:
    return int(version.split(".")[2])


@pytest.mark.parametrize("version", RELEASES)
def test_the_plan_of_each_release_at_tp_2_4_8(version: str, release: Callable[..., Path]) -> None:
    package = release(version)
    accepted = _arguments(package)
    on = [BACKEND, "trtllm"] if minor(version) >= 14 else [ENABLE]
    off = [HATCH] if minor(version) >= 10 else []
    pcie = minor(version) >= 21
    for tp in (2, 4, 8):
        code, stdout, stderr = run(
            "bench", "server", "--plan", "--tp", str(tp), "--json", "--sglang-path", str(package)
        )
        assert code == 0, stderr
        data = json.loads(stdout)
        names = [c["name"] for c in data["configs"]]
        assert names == ["default", "fusion", *(["pcie-ipc", "pcie-ipc+fusion"] if pcie else [])], (version, tp)
        for one in data["configs"]:
            args = one["args"]
            fusion = on if "fusion" in one["name"] else off
            assert args[len(args) - len(fusion) :] == fusion, (version, one["name"])
            assert one["env"] == ({PCIE_IPC_FLAG: "1"} if one["name"].startswith("pcie-ipc") else {})
            assert args[args.index("--tp-size") + 1] == str(tp)
            passed = {arg for arg in args if arg.startswith("--")}
            assert passed <= accepted, f"{version} does not accept {sorted(passed - accepted)}"
        skipped = {s["name"]: s["why"] for s in data["skipped"]}
        if not pcie:
            assert skipped["pcie-ipc"].startswith(f"sglang {version} has no PCIe-IPC allreduce")
    code, _, stderr = run(
        "bench", "server", "--plan", "--tp", "3", "--configs", "pcie-ipc", "--sglang-path", str(package)
    )
    assert code == 2
    assert ("PCIe-IPC runs at TP 2, 4, 8 only, not TP 3" if pcie else "has no PCIe-IPC allreduce") in stderr


def _methods(path: Path, cls: str) -> dict[str, list[str]]:
    """The methods of class ``cls`` in ``path`` and their parameters' names."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {
                item.name: [a.arg for a in item.args.args] for item in node.body if isinstance(item, ast.FunctionDef)
            }
    return {}


@pytest.mark.parametrize("version", RELEASES)
def test_what_the_hook_wraps_is_in_each_release(version: str) -> None:
    """The hook's targets, read from the release: GroupCoordinator's dispatch methods (the
    out-of-place one's method name third), ModelRunner.forward (its batch second), the
    bench's ``model_runner.forward(forward_batch).logits_output``, and the PCIe-IPC method."""
    package = installed_release(version) / "sglang"
    state = package / server_hook.PARALLEL_STATE.removeprefix("sglang.").replace(".", "/")
    methods = _methods(state.with_suffix(".py"), "GroupCoordinator")
    assert methods["_all_reduce_out_place"][:3] == ["self", "input_", "outplace_all_reduce_method"]
    assert methods["_all_reduce_in_place"][:2] == ["self", "input_"]
    assert ("_flashinfer_allreduce" in methods) is (minor(version) >= 18)
    assert ('"pcie_ipc"' in state.with_suffix(".py").read_text()) is (minor(version) >= 21)
    runner = package / server_hook.MODEL_RUNNER.removeprefix("sglang.").replace(".", "/")
    assert _methods(runner.with_suffix(".py"), "ModelRunner")["forward"][:2] == ["self", "forward_batch"]
    module = driver.bench_module(package)
    assert module is not None
    bench = (package.parent / module.replace(".", "/")).with_suffix(".py").read_text()
    assert bench.count("model_runner.forward(forward_batch).logits_output") == 2  # extend, decode
    assert "next_token_logits" in bench
