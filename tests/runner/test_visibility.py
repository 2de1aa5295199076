"""``doctor.visibility``: CUDA_VISIBLE_DEVICES read as CUDA reads it, against nvidia-smi's GPUs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sm120patch.doctor.host import (
    TorchFacts,
    TorchView,
    torch_view,
)
from sm120patch.runner.gpus import Gpu, GpuReport
from sm120patch.runner.visibility import (
    Selection,
    _leading_number,
    assignment,
    gpu_names,
    select,
)
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


# --- the variable written back, and entries read as CUDA reads them ---------------------------


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("0,1", "CUDA_VISIBLE_DEVICES=0,1"),
        ("", 'CUDA_VISIBLE_DEVICES=""'),
        ("0, 1", 'CUDA_VISIBLE_DEVICES="0, 1"'),
        (" 0", 'CUDA_VISIBLE_DEVICES=" 0"'),
        ("0\t", 'CUDA_VISIBLE_DEVICES="0\t"'),
        ("GPU-aaaa", "CUDA_VISIBLE_DEVICES=GPU-aaaa"),
    ],
)
def test_assignment_quotes_only_an_empty_value_or_one_with_blanks(value: str, written: str) -> None:
    assert assignment(value) == written


@pytest.mark.parametrize(
    ("token", "number"),
    [
        ("1", 1),
        ("1gpu", 1),
        ("01", 1),
        ("12345", 12345),
        ("123456", None),  # six digits: more than CUDA reads as an index
        ("gpu1", None),
        ("", None),
        ("-1", None),
        ("\u0661", None),  # an Arabic-Indic one: a digit, but not CUDA's
        ("1\u0662", 1),
    ],
)
def test_leading_number(token: str, number: int | None) -> None:
    assert _leading_number(token) == number


@pytest.mark.parametrize(
    ("value", "shown", "why"),
    [
        ("1", (1,), "CUDA_VISIBLE_DEVICES=1 shows GPU 1 only to CUDA"),  # the last index there is
        (
            "2",
            (),
            "CUDA_VISIBLE_DEVICES=2: there is no GPU 2 (nvidia-smi lists 2), so CUDA ignores it and every entry "
            "after it and shows no GPU",
        ),
        ("0,1", (0, 1), "CUDA_VISIBLE_DEVICES=0,1 shows every GPU to CUDA"),
        (" 1 , 0 ", (1, 0), 'CUDA_VISIBLE_DEVICES=" 1 , 0 " shows every GPU to CUDA'),
        (
            "0,,1",
            (0,),
            "CUDA_VISIBLE_DEVICES=0,,1: an empty entry is neither a GPU index nor a GPU UUID, so CUDA ignores it "
            "and every entry after it and shows GPU 0 only",
        ),
        (
            "0,1,x",
            (0, 1),
            "CUDA_VISIBLE_DEVICES=0,1,x: x is neither a GPU index nor a GPU UUID, so CUDA ignores it and every "
            "entry after it and shows GPUs 0, 1 only",
        ),
        ("gpu-BBBB2222", (1,), "CUDA_VISIBLE_DEVICES=gpu-BBBB2222 shows GPU 1 only to CUDA"),  # any case
        ("GPU-bbbb2222-0000", (1,), "CUDA_VISIBLE_DEVICES=GPU-bbbb2222-0000 shows GPU 1 only to CUDA"),
        (
            "GPU-",
            (),
            "CUDA_VISIBLE_DEVICES=GPU-: GPU- matches more than one GPU nvidia-smi lists, so CUDA ignores it and "
            "every entry after it and shows no GPU",
        ),
        (
            "1,GPU-bbbb",
            (),
            "CUDA_VISIBLE_DEVICES=1,GPU-bbbb names GPU 1 twice, which hides every GPU from CUDA",
        ),
        (
            "0,5,MIG-1",  # the list ends at 5, before the MIG entry
            (0,),
            "CUDA_VISIBLE_DEVICES=0,5,MIG-1: there is no GPU 5 (nvidia-smi lists 2), so CUDA ignores it and every "
            "entry after it and shows GPU 0 only",
        ),
    ],
)
def test_select_boundaries(value: str, shown: tuple[int, ...], why: str) -> None:
    selection = select(value, TWO)
    assert selection.gpus is not None and tuple(g.index for g in selection.gpus) == shown
    assert selection.why == why


def test_indices_count_in_index_order_whatever_order_nvidia_smi_listed() -> None:
    selection = select("0", TWO[::-1])
    assert selection == Selection((TWO[0],), "CUDA_VISIBLE_DEVICES=0 shows GPU 0 only to CUDA")


def test_one_gpu_shown_of_one_is_every_gpu() -> None:
    assert select("0", TWO[:1]).why == "CUDA_VISIBLE_DEVICES=0 shows every GPU to CUDA"


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("MIG-1234", "CUDA_VISIBLE_DEVICES=MIG-1234 names MIG instances (MIG-1234): not told apart here"),
        ("0, mig-ab", 'CUDA_VISIBLE_DEVICES="0, mig-ab" names MIG instances (mig-ab): not told apart here'),
    ],
)
def test_mig_instances_cannot_be_told(value: str, why: str) -> None:
    assert select(value, TWO) == Selection(None, why)


def test_uuids_are_matched_against_the_gpus_that_have_one() -> None:
    partly = (Gpu(0, "NVIDIA RTX PRO 6000", (12, 0)), TWO[1])
    assert select("GPU-bbbb", partly).gpus == (TWO[1],)
    assert select("gpu-aaaa", partly).why.startswith("CUDA_VISIBLE_DEVICES=gpu-aaaa: gpu-aaaa matches no GPU")
    none = tuple(Gpu(g.index, g.name, g.capability) for g in TWO)
    assert select("gpu-aaaa", none) == Selection(
        None, "CUDA_VISIBLE_DEVICES=gpu-aaaa names GPUs by UUID, and nvidia-smi gave no UUIDs"
    )


MIXED_UUIDS = tuple(Gpu(g.index, g.name, g.capability, UUIDS[g.index]) for g in MIXED)
ORDER_NOTE = " (by index in nvidia-smi's order; CUDA numbers the fastest GPU first unless CUDA_DEVICE_ORDER=PCI_BUS_ID)"


@pytest.mark.parametrize(
    ("value", "order", "noted"),
    [
        ("1", None, True),
        ("1", "FASTEST_FIRST", True),
        ("1", "PCI_BUS_ID", False),
        ("-1", None, True),  # also when the list ends at once
        ("GPU-bbbb", None, False),  # by UUID: the order does not matter
        (" GPU-bbbb ", None, False),
        ("GPU-bbbb,0", None, True),
    ],
)
def test_the_order_note_is_for_indices_over_different_gpus(value: str, order: str | None, noted: bool) -> None:
    assert select(value, MIXED_UUIDS, order).why.endswith(ORDER_NOTE) is noted
    assert not select(value, TWO, order).why.endswith(ORDER_NOTE)  # one model: either order is the same


# --- what torch sees against what nvidia-smi lists ------------------------------------------

TORCH_TWO = tuple(Gpu(i, "NVIDIA RTX PRO 6000", (12, 0), UUIDS[i].removeprefix("GPU-")) for i in (0, 1))
NO_UUIDS = tuple(Gpu(i, "NVIDIA RTX PRO 6000", (12, 0)) for i in (0, 1))


def test_no_view_where_there_is_nothing_to_compare() -> None:
    assert torch_view(host_with(smi=TWO, torch_gpus=TORCH_TWO)) is None  # torch sees them all
    assert torch_view(host_with(smi=TWO[:1], torch_gpus=TORCH_TWO)) is None  # and more
    assert torch_view(host_with(smi=(), torch_gpus=())) is None
    assert torch_view(host_with(smi=TWO, torch_gpus=(), torch=TorchFacts(ok=False, error="E"))) is None
    assert torch_view(host_with(smi=TWO, torch_gpus=(), error="could not run")) is None
    unanswered = host_with(smi=TWO, torch_gpus=())
    assert torch_view(replace(unanswered, gpus=GpuReport(TWO, "nvidia-smi", "nvidia-smi failed"))) is None


def test_the_hidden_gpus_by_uuid() -> None:
    host = host_with(smi=TWO, torch_gpus=TORCH_TWO[1:], serving_environ={"CUDA_VISIBLE_DEVICES": "1"})
    assert torch_view(host) == TorchView(
        2, 1, (TWO[0],), "CUDA_VISIBLE_DEVICES=1 shows GPU 1 only to CUDA", explained=True
    )


def test_the_uuids_decide_where_the_variable_would_say_otherwise() -> None:
    host = host_with(smi=TWO, torch_gpus=TORCH_TWO[1:], serving_environ={"CUDA_VISIBLE_DEVICES": "0"})
    assert torch_view(host) == TorchView(
        2, 1, (TWO[0],), "CUDA_VISIBLE_DEVICES=0 shows GPU 0 only to CUDA", explained=True
    )


def test_the_hidden_gpus_by_the_variable_where_torch_gives_no_uuids() -> None:
    host = host_with(smi=TWO, torch_gpus=NO_UUIDS[1:], serving_environ={"CUDA_VISIBLE_DEVICES": "1"})
    view = torch_view(host)
    assert view is not None and view.hidden == (TWO[0],) and view.explained is True


def test_every_gpu_hidden() -> None:
    host = host_with(smi=TWO, torch_gpus=(), serving_environ={"CUDA_VISIBLE_DEVICES": "GPU-dead"})
    view = torch_view(host)
    assert view is not None and (view.listed, view.seen, view.hidden, view.explained) == (2, 0, TWO, True)
    assert view.why == (
        "CUDA_VISIBLE_DEVICES=GPU-dead: GPU-dead matches no GPU nvidia-smi lists, so CUDA ignores it and every "
        "entry after it and shows no GPU"
    )


def test_every_gpu_hidden_though_the_variable_shows_some() -> None:
    host = host_with(smi=TWO, torch_gpus=(), serving_environ={"CUDA_VISIBLE_DEVICES": "0"})
    assert torch_view(host) == TorchView(
        2,
        0,
        TWO,
        "CUDA_VISIBLE_DEVICES=0 shows GPU 0 only to CUDA; yet torch sees 0: something else hides GPUs too",
        explained=False,
    )


def test_fewer_gpus_without_the_variable() -> None:
    host = host_with(smi=TWO, torch_gpus=NO_UUIDS[:1])
    assert torch_view(host) == TorchView(
        2,
        1,
        None,
        "CUDA_VISIBLE_DEVICES is not set in /env/bin/python: its CUDA runtime lists fewer GPUs than the driver "
        "(a GPU in a bad state, a container limiting devices, or a driver/runtime mismatch)",
        explained=False,
    )
    failed = host_with(smi=TWO, torch_gpus=NO_UUIDS[:1], torch=TorchFacts(True, "2.9.0", "12.9", "CUDA error: 2"))
    view = torch_view(failed)
    assert view is not None and view.why.endswith("driver/runtime mismatch); torch said: CUDA error: 2")


def test_a_variable_that_cannot_be_told() -> None:
    host = host_with(smi=TWO, torch_gpus=NO_UUIDS[:1], serving_environ={"CUDA_VISIBLE_DEVICES": "MIG-1"})
    assert torch_view(host) == TorchView(
        2,
        1,
        None,
        "CUDA_VISIBLE_DEVICES=MIG-1 names MIG instances (MIG-1): not told apart here; torch sees 1",
        explained=None,
    )


def test_the_serving_interpreter_s_device_order_counts() -> None:
    mixed_torch = (Gpu(1, "NVIDIA RTX PRO 6000", (12, 0)),)
    env = {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    view = torch_view(host_with(smi=MIXED, torch_gpus=mixed_torch, serving_environ=env))
    assert view is not None and view.why == "CUDA_VISIBLE_DEVICES=1 shows GPU 1 only to CUDA"
    assert view.hidden == (MIXED[0],)
    fastest = torch_view(host_with(smi=MIXED, torch_gpus=mixed_torch, serving_environ={"CUDA_VISIBLE_DEVICES": "1"}))
    assert fastest is not None and fastest.why.endswith(ORDER_NOTE)
