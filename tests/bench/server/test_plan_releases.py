"""``bench server --plan`` on every real release 0.5.9 - 0.5.23 at TP 2, 4 and 8 (slow: wheels
from the package index): the configurations each release takes, read from its own code, and
command lines whose every option the release accepts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from sm120patch.bench.server import driver
from sm120patch.sglang.options import BACKEND, ENABLE, HATCH, PCIE_IPC_FLAG
from tests.bench.server.test_releases import _arguments
from tests.support.cli import run

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
            assert args[args.index("--random-seed") + 1] == str(driver.SEED)
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
