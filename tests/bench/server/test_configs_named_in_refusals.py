"""What a refusal of ``--configs`` names: every unknown configuration, comma-separated, or the
value as given when it names none; a release of unknown version reads as such."""

from __future__ import annotations

import dataclasses
import re

import pytest

from sm120patch.bench.server.configs import BY_NAME, parse_names, why_not
from tests.bench.server.test_configs import RELEASE


@pytest.mark.parametrize(
    ("value", "named"),
    [("nope,fusion,also", "nope, also:"), (" , ", "' , ':"), ("", "'':")],
)
def test_the_unknown_configurations_are_named(value: str, named: str) -> None:
    with pytest.raises(ValueError, match=f"^unknown configuration {re.escape(named)}"):
        parse_names(value)


def test_a_release_of_unknown_version_without_pcie_ipc() -> None:
    release = dataclasses.replace(RELEASE, version=None, pcie_ipc=False)
    assert (why_not(BY_NAME["pcie-ipc"], release) or "").startswith("sglang (unknown version) has no PCIe-IPC")
