"""The kernel-level figures beside the server's answer: same TP, hidden size and dtype.

The serving interpreter is the fake one of fakes.py (FakeTorch etc. on this Python's path for
the server runs); the kernel bench's own probe runs in this interpreter, which has no torch,
so there it is refused with its one sentence, and the server's answer stands (asserted on the
full run of test_driver.py::test_fusion_pays_each_run_proven)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sm120patch.bench.server.command import _kernel_json, kernel_beside
from tests.bench.kernel.test_render import SGLANG, result
from tests.bench.server.fakes import fake_server_site
from tests.bench.server.test_driver import FAST
from tests.support.cli import run


@pytest.mark.offline
def test_no_kernel_leaves_it_out(tmp_path: Path) -> None:
    package = fake_server_site(tmp_path, gpus=2)
    code, stdout, _ = run(
        "bench", "--server", "--sglang-path", str(package), "--json", *FAST, "--tp", "2", "--repeat", "1", "--no-kernel"
    )
    assert code == 0 and json.loads(stdout)["kernel"] is None


def test_no_kernel_level_figures_where_there_is_nothing_to_fuse() -> None:
    def server(tp: int, sizes: tuple[int, ...]) -> SimpleNamespace:
        settings = SimpleNamespace(tp=tp, batch_sizes=sizes, python=sys.executable, dtype="bf16", timeout=5.0)
        return SimpleNamespace(settings=settings, model=SimpleNamespace(hidden=1024))

    said: list[str] = []
    assert kernel_beside(server(1, (1, 8)), None, said.append) == (
        "no kernel-level figures at TP 1: an allreduce needs 2 ranks"
    )
    assert kernel_beside(server(2, (4096,)), None, said.append) == (
        "no kernel-level figures: sglang fuses only batches of 1 to 2048 tokens"
    )
    assert said == []  # nothing was started


def test_a_kernel_result_is_the_kernel_bench_json() -> None:
    data = _kernel_json(result(baseline=SGLANG))
    assert data["command"] == "bench" and data["baseline"]["source"] == "sglang"
    assert [row["tokens"] for row in data["rows"]] == [1, 128, 2048]
    assert _kernel_json(None) is None


def test_the_kernel_bench_gets_the_servers_settings_and_the_releases_options(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """FakeKernelBench (``measure.run``): the ranks on the GPUs, recorded instead of started;
    the release's code is read by stand-ins for ``read_call`` and ``release_options``."""
    from sm120patch.bench.kernel import measure
    from sm120patch.bench.kernel.command import keep_off
    from sm120patch.sglang import fusion_call as mirror
    from sm120patch.sglang import options

    asked: list[tuple] = []
    monkeypatch.setattr(measure, "run", lambda *args, **kwargs: asked.append((args, kwargs)) or "figures")
    monkeypatch.setattr(mirror, "read_call", lambda package_dir, version: ("call of", package_dir, version))
    # a release without the escape hatch (before 0.5.10): not the default advice
    monkeypatch.setattr(options, "release_options", lambda tree: {"--enable-flashinfer-allreduce-fusion"})
    settings = SimpleNamespace(tp=2, batch_sizes=(1, 64, 4096), python="/srv/env/bin/python", dtype="fp16", timeout=7.0)
    server = SimpleNamespace(settings=settings, model=SimpleNamespace(hidden=5120))
    (tmp_path / options.PCIE_IPC_MODULE).parent.mkdir(parents=True)
    (tmp_path / options.PCIE_IPC_MODULE).write_text("# 0.5.23's PCIe-IPC allreduce\n")
    tree = SimpleNamespace(package_dir=tmp_path, version="0.5.23")
    said: list[str] = []
    assert kernel_beside(server, tree, said.append) == "figures"
    [(args, kwargs)] = asked
    assert args[0] == measure.Settings("/srv/env/bin/python", 2, (1, 64), 5120, "fp16", 7.0, pcie_ipc=True)
    assert args[1] == ("call of", tmp_path, "0.5.23")
    assert args[2] == keep_off({"--enable-flashinfer-allreduce-fusion"}) != keep_off(None)
    assert kwargs == {"sglang_version": "0.5.23"}
    assert said == ["kernel-level bench at TP 2, hidden 5120"]
