"""The configurations as data: which apply to a release and a TP, why not, and ``--configs``."""

from __future__ import annotations

import dataclasses

import pytest

from sm120patch.bench.server import configs
from sm120patch.bench.server.configs import BY_NAME, CONFIGS, NAMES, Release, parse_names, select, why_not
from sm120patch.sglang.options import PCIE_IPC_FLAG
from tests.bench.server.hand import FLAGS

RELEASE = Release("0.5.23", pcie_ipc=True, tp=4, dtype="bf16", fuse_up_to=None)


def names(found: tuple[configs.Config, ...]) -> list[str]:
    return [c.name for c in found]


def test_every_configuration_has_a_name_a_fusion_mode_and_a_sentence() -> None:
    assert NAMES == ("default", "fusion", "fusion-limit", "pcie-ipc", "pcie-ipc+fusion", "pcie-ipc+fusion-limit")
    assert all(c.fusion in configs.FUSION_MODES and c.sentence for c in CONFIGS)
    assert [dict(c.env) for c in CONFIGS if c.pcie_ipc] == [{PCIE_IPC_FLAG: "1"}] * 3
    assert CONFIGS[0].name == configs.DEFAULT  # run first: the others are checked against it


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        (RELEASE, ["default", "fusion", "pcie-ipc", "pcie-ipc+fusion"]),
        (dataclasses.replace(RELEASE, fuse_up_to=256), list(NAMES)),
        (dataclasses.replace(RELEASE, pcie_ipc=False, fuse_up_to=256), ["default", "fusion", "fusion-limit"]),
        (dataclasses.replace(RELEASE, tp=3), ["default", "fusion"]),
        (dataclasses.replace(RELEASE, tp=1), ["default", "fusion"]),
        (dataclasses.replace(RELEASE, dtype="fp16"), ["default", "fusion"]),
        (dataclasses.replace(RELEASE, tp=8), ["default", "fusion", "pcie-ipc", "pcie-ipc+fusion"]),
    ],
)
def test_by_default_every_configuration_that_applies_runs(release: Release, expected: list[str]) -> None:
    assert select(None, release) == (tuple(BY_NAME[n] for n in expected), [])


def test_why_a_configuration_does_not_apply() -> None:
    old = dataclasses.replace(RELEASE, version="0.5.19", pcie_ipc=False)
    assert why_not(BY_NAME["pcie-ipc"], old) == (
        f"sglang 0.5.19 has no PCIe-IPC allreduce ({PCIE_IPC_FLAG} came in 0.5.21)"
    )
    assert why_not(BY_NAME["pcie-ipc"], dataclasses.replace(RELEASE, tp=6)) == (
        "PCIe-IPC runs at TP 2, 4, 8 only, not TP 6"
    )
    assert why_not(BY_NAME["pcie-ipc+fusion"], dataclasses.replace(RELEASE, dtype="fp16")) == (
        "PCIe-IPC runs in bf16 only, not fp16"
    )
    assert why_not(BY_NAME["fusion-limit"], RELEASE) == "it needs a token limit: --fuse-up-to N|measured"
    assert why_not(BY_NAME["fusion"], dataclasses.replace(RELEASE, tp=6)) is None


def test_configs_asked_for_run_in_the_tables_order_with_the_default_added() -> None:
    chosen, notes = select(("pcie-ipc+fusion", "pcie-ipc"), RELEASE)
    assert names(chosen) == ["default", "pcie-ipc", "pcie-ipc+fusion"]
    assert notes == ["sglang's default runs too: every configuration's answers are checked against it"]
    assert select(("default", "fusion"), RELEASE) == ((BY_NAME["default"], BY_NAME["fusion"]), [])


def test_a_configuration_asked_for_that_does_not_apply_says_why() -> None:
    with pytest.raises(ValueError, match=r"^--configs pcie-ipc does not apply: PCIe-IPC runs at TP 2, 4, 8 only"):
        select(("fusion", "pcie-ipc"), dataclasses.replace(RELEASE, tp=3))


def test_configs_option_names_known_configurations_only() -> None:
    assert parse_names(" pcie-ipc , default,pcie-ipc") == ("default", "pcie-ipc")
    for value in ("fusion,nope", ""):
        with pytest.raises(ValueError, match="choose from default, fusion, fusion-limit, pcie-ipc, "):
            parse_names(value)


def test_a_new_configuration_is_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    row = configs.Config("nccl", "off", "every allreduce through NCCL", {"SGLANG_X": "1"})
    monkeypatch.setattr(configs, "CONFIGS", (*CONFIGS, row))
    monkeypatch.setattr(configs, "BY_NAME", {**BY_NAME, "nccl": row})
    assert names(select(None, RELEASE)[0])[-1] == "nccl"
    assert names(select(("nccl",), RELEASE)[0]) == ["default", "nccl"]
    assert configs.fusion_args(row, FLAGS) == FLAGS.off
