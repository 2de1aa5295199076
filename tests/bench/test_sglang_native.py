"""bench_sglang: naming the allreduce sglang picked, from sglang's own dispatch and objects.

The fakes stand for what only exists on a CUDA host: ``FakeTensor`` (a CUDA tensor's size and
device), ``FakeCustomAllreduce`` (sglang's custom-allreduce communicator, which needs CUDA IPC
to exist) and ``FakeGroup`` (the ``GroupCoordinator`` holding it).  The dispatch wrapper is
run against a module object with the three functions ``GroupCoordinator.all_reduce`` calls.
"""

from __future__ import annotations

import logging
import types
from typing import Any

import pytest

from sm120patch.bench.remote import bench_sglang as sg


class FakeTensor:
    def __init__(self, tokens: int, hidden: int = 7168, cpu: bool = False) -> None:
        self.tokens, self.hidden, self.is_cpu = tokens, hidden, cpu

    def numel(self) -> int:
        return self.tokens * self.hidden

    def element_size(self) -> int:
        return 2  # bf16


class FakeCustomAllreduce:
    def __init__(self, disabled: bool = False, max_size: int = 8 * 1024 * 1024) -> None:
        self.disabled, self.max_size = disabled, max_size


class FakeGroup:
    def __init__(self, ca: Any = None, world_size: int = 2) -> None:
        self.ca_comm, self.world_size = ca, world_size


def native(group: FakeGroup, seen: list[str], warnings: tuple[str, ...] = (), custom: bool = True) -> sg.Native:
    found = object.__new__(sg.Native)
    found.group, found.seen = group, list(seen)
    found.warnings = sg._Warnings()
    found.warnings.lines.extend(warnings)
    found.ps = types.SimpleNamespace(_ENABLE_CUSTOM_ALL_REDUCE=custom)
    return found


def test_the_custom_allreduce_is_named_by_its_class() -> None:
    ca = FakeCustomAllreduce()
    assert native(FakeGroup(ca), ["ca"]).allreduce_name(FakeTensor(16)) == (
        "sglang custom allreduce (FakeCustomAllreduce)",
        "",
    )


def test_over_the_limit_says_the_sizes() -> None:
    name, why = native(FakeGroup(FakeCustomAllreduce()), ["inplace"]).allreduce_name(FakeTensor(2048))
    assert name == sg.METHOD_NAMES["inplace"]
    assert why == "29360128 bytes is over custom allreduce's limit of 8388608"


@pytest.mark.parametrize(
    ("group", "warnings", "custom", "why"),
    [
        (
            FakeGroup(None),
            ("Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs.", "other"),
            True,
            "sglang did not create its custom allreduce: Custom allreduce is disabled because it's not supported "
            "on more than two PCIe-only GPUs.",
        ),
        (FakeGroup(None), (), False, "custom allreduce turned off (--disable-custom-all-reduce)"),
        (FakeGroup(None), ("unrelated",), True, "sglang did not create its custom allreduce"),
        (
            FakeGroup(FakeCustomAllreduce(disabled=True)),
            ("Custom allreduce is disabled because your platform lacks GPU P2P capability",),
            True,
            "sglang disabled its custom allreduce: Custom allreduce is disabled because your platform lacks GPU P2P "
            "capability",
        ),
        (FakeGroup(FakeCustomAllreduce()), (), True, "custom allreduce declined this tensor (should_custom_ar)"),
    ],
)
def test_why_not_the_custom_allreduce_in_sglangs_words(
    group: FakeGroup, warnings: tuple[str, ...], custom: bool, why: str
) -> None:
    assert native(group, ["inplace"], warnings, custom).allreduce_name(FakeTensor(16)) == (
        sg.METHOD_NAMES["inplace"],
        why,
    )


def test_the_early_returns_of_all_reduce() -> None:
    assert native(FakeGroup(None, world_size=1), []).allreduce_name(FakeTensor(1)) == (
        "none (TP 1: sglang skips the allreduce)",
        "",
    )
    assert native(FakeGroup(None), []).allreduce_name(FakeTensor(1, cpu=True))[0] == (
        "torch.distributed all_reduce (gloo: a CPU tensor)"
    )
    name, _ = native(FakeGroup(FakeCustomAllreduce()), []).allreduce_name(FakeTensor(1))
    assert name == sg.METHOD_NAMES["symm_mem_pynccl"]  # no dispatch function called, on CUDA


def test_the_dispatch_is_recorded_from_sglangs_own_calls() -> None:
    calls: list[tuple] = []
    module = types.SimpleNamespace(
        outplace_all_reduce=lambda *a, **k: calls.append(("out", a, k)) or "out",
        inplace_all_reduce=lambda *a, **k: calls.append(("in", a, k)),
        flashinfer_allreduce=lambda *a, **k: calls.append(("fi", a, k)) or "fi",
    )
    found = object.__new__(sg.Native)
    found.ps, found.seen = module, []
    found._record_dispatch()
    assert module.outplace_all_reduce("x", group_name="tp:0", outplace_all_reduce_method="ca") == "out"
    module.outplace_all_reduce("x", "tp:0", "pcie_ipc")  # positional, as older releases call it
    module.inplace_all_reduce("x", group_name="tp:0")
    assert module.flashinfer_allreduce("x", group_name="tp:0") == "fi"
    assert found.seen == ["ca", "pcie_ipc", "inplace", "flashinfer"]
    assert [c[0] for c in calls] == ["out", "out", "in", "fi"]  # sglang's own functions still run


def test_a_release_without_a_dispatch_function_is_left_alone() -> None:
    module = types.SimpleNamespace(inplace_all_reduce=lambda *a, **k: None)
    found = object.__new__(sg.Native)
    found.ps, found.seen = module, []
    found._record_dispatch()
    assert not hasattr(module, "flashinfer_allreduce") and not hasattr(module, "outplace_all_reduce")


def test_sglangs_warnings_are_heard_and_filtered() -> None:
    handler = sg._Warnings()
    with sg.listening(handler):
        logging.getLogger("sglang.srt.distributed").warning("Custom allreduce is disabled: %s", "no P2P")
        logging.getLogger("sglang.srt.layers").info("FlashInfer workspace initialized")
        logging.getLogger("elsewhere").warning("not sglang's")
    assert handler.lines == ["Custom allreduce is disabled: no P2P", "FlashInfer workspace initialized"]
    assert sg.about_allreduce(handler.lines) == ["Custom allreduce is disabled: no P2P"]
    assert logging.getLogger("sglang").handlers == []  # taken off again


def test_the_stand_in_at_tp4_without_nvlink_is_nccl_and_says_why() -> None:
    standin = sg.StandInAllreduce(torch=None, dist=None, rank=0, world=4, full_nvlink=False)
    assert standin.handle is None and not standin.takes(FakeTensor(1))
    assert standin.name(FakeTensor(1)) == (
        "NCCL (torch.distributed)",
        "no custom-allreduce stand-in at TP 4 without full NVLink: sglang runs NCCL there too, and FlashInfer's "
        "vllm_ar would return garbage (flashinfer#4393)",
    )


def test_the_stand_in_takes_what_sglangs_custom_allreduce_takes() -> None:
    standin = object.__new__(sg.StandInAllreduce)
    standin.handle, standin.note = 1, ""
    assert standin.takes(FakeTensor(585)) and not standin.takes(FakeTensor(586))  # 8 MiB at hidden 7168, bf16
    assert standin.name(FakeTensor(1))[0] == "FlashInfer vllm_ar (stand-in for sglang's custom allreduce v1)"
    assert standin.name(FakeTensor(2048)) == ("NCCL (torch.distributed)", "over custom allreduce's 8 MiB limit")


def test_nvlink_unknown_reads_as_pcie(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # NVML absent: import fails
    assert sg.full_nvlink(2) is False


def test_an_unimportable_sglang_is_one_sentence() -> None:
    with pytest.raises(sg.SglangUnavailable, match=r"^sglang's modules do not import here: ModuleNotFoundError"):
        sg.Native(torch=None, version=None)
