from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sm120patch.patchkit.layout import ADD_NORM, COMM_FUSION, COMMUNICATOR, OVERRIDES, SERVER_ARGS
from tests.realtrees import TREES, copy_release, record_hashes, sha256

# Rich must not colour or wrap what the tests read.
os.environ.setdefault("NO_COLOR", "1")
os.environ.setdefault("COLUMNS", "200")


TARGETS = (COMMUNICATOR, ADD_NORM, SERVER_ARGS, OVERRIDES, COMM_FUSION)


@pytest.fixture
def release(tmp_path: Path) -> Callable[..., Path]:
    """``release("0.5.9")`` -> a private, pip-installed sglang package dir of that release."""
    counter = iter(range(1000))

    def make(version: str, hardlink: bool = True) -> Path:
        return copy_release(version, tmp_path / f"site-{next(counter)}", hardlink=hardlink)

    return make


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The cached installs are shared by hard links: prove no test wrote into them in place."""
    if not TREES.is_dir():
        return
    for site in TREES.iterdir():
        package = site / "sglang"
        if site.name.startswith(".") or not package.is_dir():
            continue
        record = record_hashes(package)
        for rel in TARGETS:
            if rel in record and sha256(package / rel) != record[rel]:
                raise AssertionError(f"cached tree {site} was modified in place: {rel}")
