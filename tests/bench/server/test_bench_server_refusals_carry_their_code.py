"""The stable code of each refusal of ``bench server`` (errors.CODES): ``usage`` for options it
cannot take, ``bench-host`` for a release or host it cannot bench, each with exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sm120patch.bench.server import command as bench_server
from sm120patch.bench.server import driver
from sm120patch.errors import EnvironmentProblem, ExitCode
from sm120patch.runner import ProbeError
from sm120patch.sglang.options import BACKEND, HATCH
from tests.bench.server.fakes import fake_server_site
from tests.bench.server.hand import PYTHON, settings
from tests.bench.server.test_command import call


def refused(problem: pytest.ExceptionInfo[EnvironmentProblem], code: str) -> str:
    """The refusal's sentence, once its code and exit status are checked."""
    assert (problem.value.code, problem.value.exit_code) == (code, ExitCode.ENVIRONMENT)
    return str(problem.value)


@pytest.mark.parametrize("value", ["1,a", "0,8"])
def test_batch_sizes_it_cannot_read_are_usage(value: str) -> None:
    with pytest.raises(EnvironmentProblem) as raised:
        bench_server.parse_sizes(value)
    assert refused(raised, "usage").startswith(f"--batch-sizes {value!r}")


def test_fusion_in_server_args_is_usage() -> None:
    with pytest.raises(EnvironmentProblem) as raised:
        call((f"{BACKEND}=trtllm",))
    assert refused(raised, "usage").startswith("--server-arg must not set fusion")


def test_plan_without_tp_is_usage(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem) as raised:
        call(sglang_path=fake_server_site(tmp_path), tp=None, plan_only=True)
    sentence = refused(raised, "usage")
    assert sentence.startswith("--plan needs --tp:") and "without a GPU" in sentence


def test_a_release_without_benchmark_or_fusion_is_bench_host(tmp_path: Path) -> None:
    package = tmp_path / "sglang"
    package.mkdir()
    with pytest.raises(EnvironmentProblem) as raised:
        driver.refuse_release(settings(package_dir=package))
    assert "has no bench_one_batch" in refused(raised, "bench-host")
    (package / "bench_one_batch.py").write_text("")
    with pytest.raises(EnvironmentProblem) as raised:
        driver.refuse_release(settings(package_dir=package, options=frozenset({HATCH})))
    assert "has no FlashInfer allreduce fusion option" in refused(raised, "bench-host")


def test_a_probe_that_fails_is_bench_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_script`` is replaced by a stand-in that fails as an interpreter that cannot start."""

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise ProbeError(f"{PYTHON} could not start")

    monkeypatch.setattr(driver, "run_script", failing)
    with pytest.raises(EnvironmentProblem) as raised:
        driver.run_probe(settings())
    assert refused(raised, "bench-host") == f"{PYTHON} could not start"


def test_a_host_with_too_few_gpus_is_bench_host(host: Path) -> None:
    with pytest.raises(EnvironmentProblem) as raised:
        driver.run(settings(package_dir=host, tp=4))
    assert refused(raised, "bench-host").startswith("--tp 4 needs 4 GPUs")


def test_a_configuration_asked_for_that_does_not_apply_is_bench_host() -> None:
    with pytest.raises(EnvironmentProblem) as raised:
        driver.choose_configs(settings(config_names=("pcie-ipc",), pcie_ipc=False))
    assert refused(raised, "bench-host").startswith("--configs pcie-ipc does not apply")
