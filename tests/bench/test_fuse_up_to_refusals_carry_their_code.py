"""Each refusal of ``--fuse-up-to measured`` or ``sglang`` (bench/fuse_limit.resolve) carries its
stable code: ``no-measurement`` where no saved bench result fits here, ``usage`` where the
release has no limit to put back; and the first one names the command that saves a result."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.bench import fuse_limit
from sm120patch.errors import EnvironmentProblem
from sm120patch.patcher.exports import MEASURED, SGLANG
from sm120patch.sglang.tree import from_directory
from tests.cli.test_fuse_up_to import LIMITED
from tests.cli.test_fuse_up_to_measured import recorded, save_result
from tests.support.mini_sglang import COMM, FILES, write_mini_sglang

H200 = "NVIDIA H200"


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """The miniature release with sglang's token limit of 2048."""
    return write_mini_sglang(tmp_path / "site", files={**FILES, COMM: LIMITED})


def refusal(package: Path, tp: int | None) -> EnvironmentProblem:
    with pytest.raises(EnvironmentProblem) as raised:
        fuse_limit.resolve(from_directory(package), MEASURED, tp)
    return raised.value


def test_no_saved_result_is_no_measurement_and_names_the_bench_to_run(package: Path) -> None:
    found = refusal(package, 2)
    assert found.code == "no-measurement"
    assert str(found).endswith("; run `sm120patch bench kernel` first")


def test_a_result_of_other_gpus_is_no_measurement(package: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_result(package, recorded())
    monkeypatch.setattr(fuse_limit, "_gpus", lambda: ["NVIDIA RTX PRO 6000 Blackwell"] * 2)
    found = refusal(package, 2)
    assert found.code == "no-measurement" and "not on this host's GPUs" in str(found)


def test_a_tp_that_cannot_be_told_is_no_measurement(package: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --tp and without an nvidia-smi answer, the TP-2 result is not taken."""
    save_result(package, recorded())
    monkeypatch.setattr(fuse_limit, "_gpus", lambda: None)
    found = refusal(package, None)
    assert found.code == "no-measurement" and "add --tp with it (--tp 2 if that is it)" in str(found)


def test_sglang_on_a_release_without_a_limit_is_usage(tmp_path: Path) -> None:
    unlimited = from_directory(write_mini_sglang(tmp_path / "site"))
    with pytest.raises(EnvironmentProblem) as raised:
        fuse_limit.resolve(unlimited, SGLANG, None)
    assert raised.value.code == "usage" and "has no fusion token limit of its own" in str(raised.value)
