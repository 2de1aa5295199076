"""Scratch directories of the server bench (and the logs it keeps) go under each test's tmp_path."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from sm120patch.bench.server import driver
from tests.bench.server.hand import gpu, probe


@pytest.fixture(autouse=True)
def _scratch_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A release with the benchmark (a file), and a stand-in for the GPU probe answering two idle GPUs."""
    package = tmp_path / "site" / "sglang"
    package.mkdir(parents=True)
    (package / "bench_one_batch.py").write_text("")
    monkeypatch.setattr(driver, "run_probe", lambda s: probe([gpu(0), gpu(1)]))
    return package
