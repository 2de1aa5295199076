"""Which backend took the plain allreduces, in this process: FakeSglang's GroupCoordinator
(the real dispatch order) wrapped as the hook wraps the real one, and the counter's buckets."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from sm120patch.bench.remote import server_hook
from sm120patch.bench.server import counter, driver
from sm120patch.bench.server.counter import Calls, read
from tests.bench.server.fakes import PARALLEL_STATE
from tests.bench.server.hand import run


@pytest.fixture
def state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """FakeSglang's parallel_state as the hook leaves it once loaded, and fresh counts."""
    monkeypatch.setattr(server_hook, "_counts", {})
    monkeypatch.setattr(server_hook, "_loaded", [])
    monkeypatch.setattr(server_hook, "_state", {"dirty": False, "written": 0.0})
    monkeypatch.setenv(server_hook.COUNT_DIR_ENV, str(tmp_path))
    made = types.ModuleType(server_hook.PARALLEL_STATE)
    exec(compile(PARALLEL_STATE, server_hook.PARALLEL_STATE, "exec"), made.__dict__)
    server_hook._after_load(made)
    return made


@pytest.mark.parametrize(
    ("world", "fusion", "pcie", "key"),
    [
        (2, False, False, "allreduce.ca"),
        (4, False, False, "allreduce.nccl"),
        (4, False, True, "allreduce.pcie_ipc"),
        (4, True, True, "allreduce.flashinfer"),  # fusion on: kAllReduce before PCIe-IPC
    ],
)
def test_each_dispatch_is_counted_by_the_method_that_took_it(
    state: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, world: int, fusion: bool, pcie: bool, key: str
) -> None:
    monkeypatch.setenv("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "1")
    group = state.GroupCoordinator(world, fusion, pcie)
    for _ in range(3):
        group.all_reduce("x")
    server_hook.flush()
    data = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert data["counts"] == {key: {"eager": 3, "capture": 0, "fell_back": 0}}


def test_each_method_is_wrapped_once(state: Any) -> None:
    wrapped = {name: getattr(state.GroupCoordinator, name) for name in server_hook.ALLREDUCE_METHODS}
    server_hook._after_load(state)
    assert {name: getattr(state.GroupCoordinator, name) for name in wrapped} == wrapped
    assert state.GroupCoordinator(2, False, False)._all_reduce_out_place("x", outplace_all_reduce_method="qr") == "x"
    assert server_hook._counts == {"allreduce.qr": {"eager": 1, "capture": 0, "fell_back": 0}}


def test_the_counter_names_each_backend_and_the_rest_other(tmp_path: Path) -> None:
    (tmp_path / "1.json").write_text(
        json.dumps(
            {
                "counts": {
                    "allreduce.ca": {"eager": 1, "capture": 2},
                    "allreduce.pynccl": {"capture": 4},
                    "allreduce.nccl": {"eager": 1},
                    "allreduce.qr": {"eager": 5},
                    "allreduce.torch_symm_mem": {"eager": 1},
                }
            }
        )
    )
    (tmp_path / "2.json").write_text(json.dumps({"counts": {"allreduce.pcie_ipc": {"eager": 2}}}))
    counts = read(tmp_path)
    assert counts.allreduce == {
        "custom allreduce": Calls(1, 2),
        "NCCL": Calls(1, 4),
        "other": Calls(6, 0),
        "PCIe-IPC": Calls(2, 0),
    }
    assert counts.allreduces("PCIe-IPC") == 2 and counts.allreduces("FlashInfer kAllReduce") == 0
    assert counts.describe_allreduce() == "plain allreduces: NCCL 5x, PCIe-IPC 2x, custom allreduce 3x, other 6x"
    assert counter.Counts().describe_allreduce() == "no plain allreduce was seen"
    assert not counts.ran  # plain allreduces are not the fused kernel


def test_a_pcie_ipc_run_that_took_none_says_why() -> None:
    def pcie(config: str, **backends: int) -> driver.Run:
        taken = {counter.BACKENDS[k]: Calls(v) for k, v in backends.items()}
        mode = "off" if config == "pcie-ipc" else "on"
        return run(mode, 1, {}, config=config, counts=counter.Counts(allreduce=taken))

    assert driver.unused(pcie("pcie-ipc", pcie_ipc=1), []) is None
    assert driver.unused(pcie("default", nccl=5), []) is None  # not asked for
    said = "[TP0] FlashInfer PCIe-IPC all-reduce serves bf16 only; torch.float16 reductions stay on NCCL."
    assert driver.unused(pcie("pcie-ipc", nccl=5), ["noise", said]) == (
        f"pcie-ipc has no figure: PCIe-IPC was asked for and took no allreduce: PCIe-IPC serves bf16 only; sglang "
        f"said: {said!r}"
    )
    assert driver.unused(pcie("pcie-ipc+fusion", flashinfer=7), []) == (
        "pcie-ipc+fusion has no figure: PCIe-IPC was asked for and took no allreduce: FlashInfer's kAllReduce took "
        "the plain allreduces (7x): fusion on leaves PCIe-IPC none"
    )
    assert driver.unused(pcie("pcie-ipc", nccl=5), []) == (
        "pcie-ipc has no figure: PCIe-IPC was asked for and took no allreduce: sglang logged no reason "
        "(plain allreduces: NCCL 5x)"
    )
