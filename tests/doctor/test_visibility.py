"""``doctor.visibility``: CUDA_VISIBLE_DEVICES read as CUDA reads it, against nvidia-smi's GPUs."""

from __future__ import annotations

import pytest

from sm120patch.doctor.gpus import Gpu
from sm120patch.doctor.visibility import gpu_names, select
from tests.doctor.facts import host_with

UUIDS = ("GPU-aaaa1111-0000", "GPU-bbbb2222-0000")
TWO = tuple(Gpu(i, "NVIDIA RTX PRO 6000", (12, 0), UUIDS[i]) for i in (0, 1))
MIXED = (Gpu(0, "NVIDIA H200", (9, 0)), Gpu(1, "NVIDIA RTX PRO 6000", (12, 0)))


@pytest.mark.parametrize(
    ("value", "shown", "why"),
    [
        (None, (0, 1), "CUDA_VISIBLE_DEVICES is not set: CUDA shows every GPU"),
        ("", (), 'CUDA_VISIBLE_DEVICES="" hides every GPU from CUDA'),
        (" ", (), 'CUDA_VISIBLE_DEVICES=" " hides every GPU from CUDA'),
        ("0", (0,), "CUDA_VISIBLE_DEVICES=0 shows GPU 0 only to CUDA"),
        ("1,0", (1, 0), "CUDA_VISIBLE_DEVICES=1,0 shows every GPU to CUDA"),
        ("1gpu", (1,), "CUDA_VISIBLE_DEVICES=1gpu shows GPU 1 only to CUDA"),
        (
            "0,5,1",
            (0,),
            "CUDA_VISIBLE_DEVICES=0,5,1: there is no GPU 5 (nvidia-smi lists 2), so CUDA ignores it and every "
            "entry after it and shows GPU 0 only",
        ),
        (
            "GPU-dead",
            (),
            "CUDA_VISIBLE_DEVICES=GPU-dead: GPU-dead matches no GPU nvidia-smi lists, so CUDA ignores it and "
            "every entry after it and shows no GPU",
        ),
        ("GPU-bbbb", (1,), "CUDA_VISIBLE_DEVICES=GPU-bbbb shows GPU 1 only to CUDA"),
        ("0,0", (), "CUDA_VISIBLE_DEVICES=0,0 names GPU 0 twice, which hides every GPU from CUDA"),
        (
            "-1,0",
            (),
            "CUDA_VISIBLE_DEVICES=-1,0: -1 is neither a GPU index nor a GPU UUID, so CUDA ignores it and every "
            "entry after it and shows no GPU",
        ),
    ],
)
def test_select(value: str | None, shown: tuple[int, ...], why: str) -> None:
    selection = select(value, TWO)
    assert selection.gpus is not None and tuple(g.index for g in selection.gpus) == shown
    assert selection.why == why


def test_uuids_without_nvidia_smi_uuids_cannot_be_told() -> None:
    selection = select("GPU-aaaa", tuple(Gpu(g.index, g.name, g.capability) for g in TWO))
    assert selection.gpus is None and selection.why.endswith("names GPUs by UUID, and nvidia-smi gave no UUIDs")
    assert select("MIG-1234", TWO).gpus is None


def test_indices_over_different_gpus_warn_of_cuda_s_own_order() -> None:
    assert select("1", MIXED).why.endswith("unless CUDA_DEVICE_ORDER=PCI_BUS_ID)")
    assert select("1", MIXED, "PCI_BUS_ID").why == "CUDA_VISIBLE_DEVICES=1 shows GPU 1 only to CUDA"


def test_gpu_names() -> None:
    assert gpu_names(TWO[:1]) == "GPU 0" and gpu_names(TWO) == "GPUs 0, 1"


def test_capabilities_are_filled_in_from_torch_only_where_the_gpu_is_certainly_the_same() -> None:
    unknown = tuple(Gpu(i, "NVIDIA RTX PRO 6000", None, raw_capability="[N/A]") for i in (0, 1))
    by_name = host_with(smi=unknown, torch_gpus=TWO)
    assert {g.capability_from for g in by_name.visible_gpus()[0]} == {"torch, same name"}
    other_names = tuple(Gpu(i, "GPU", (12, 0)) for i in (0, 1))
    every = host_with(smi=unknown, torch_gpus=other_names).visible_gpus()[0]
    assert [(g.capability, g.capability_from) for g in every] == [((12, 0), "torch, which sees them all")] * 2
    fewer = host_with(smi=unknown, torch_gpus=other_names[:1]).visible_gpus()[0]
    assert [g.capability for g in fewer] == [None, None]  # which one torch sees is not certain
    hidden = host_with(smi=unknown, torch_gpus=other_names, serving_environ={"CUDA_VISIBLE_DEVICES": "1,0"})
    assert [g.capability for g in hidden.visible_gpus()[0]] == [None, None]
