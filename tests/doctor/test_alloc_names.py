"""Which spellings of the allocator variable the serving torch reads, looked up in that
torch's own c10 libraries by ``host_facts.allocator_names``: on stub libraries (fast) and on
the real CPU build of torch 2.13.0 (slow; the cached venv the bench tests use)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sm120patch.doctor.host import run_host_facts
from sm120patch.doctor.remote import host_facts


def library(torch_dir: Path, name: str, blob: bytes) -> Path:
    (torch_dir / "lib").mkdir(parents=True, exist_ok=True)
    (torch_dir / "lib" / name).write_bytes(blob)
    return torch_dir


def test_the_names_are_nul_terminated_literals(tmp_path: Path) -> None:
    torch_dir = library(tmp_path / "torch", "libc10.so", b"\x00PYTORCH_CUDA_ALLOC_CONF\x00PYTORCH_ALLOC_CONF\x00")
    assert host_facts.allocator_names(str(torch_dir)) == {
        "reads": ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"],
        "evidence": str(torch_dir / "lib" / "libc10.so"),
    }


def test_a_name_inside_a_message_is_not_read(tmp_path: Path) -> None:
    """An out-of-memory hint that mentions the new spelling is not a getenv of it."""
    blob = b"\x00PYTORCH_CUDA_ALLOC_CONF\x00try setting PYTORCH_ALLOC_CONF=expandable_segments:True\x00"
    torch_dir = library(tmp_path / "torch", "libc10.so", blob)
    assert host_facts.allocator_names(str(torch_dir))["reads"] == ["PYTORCH_CUDA_ALLOC_CONF"]


def test_both_c10_libraries_are_read(tmp_path: Path) -> None:
    torch_dir = library(tmp_path / "torch", "libc10.so", b"\x00PYTORCH_ALLOC_CONF\x00")
    library(torch_dir, "libc10_cuda.so", b"\x00PYTORCH_CUDA_ALLOC_CONF\x00")
    found = host_facts.allocator_names(str(torch_dir))
    assert found["reads"] == ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"]
    assert found["evidence"] == f"{torch_dir / 'lib' / 'libc10_cuda.so'}, {torch_dir / 'lib' / 'libc10.so'}"


def test_without_a_c10_library_it_cannot_be_told(tmp_path: Path) -> None:
    found = host_facts.allocator_names(str(tmp_path / "torch"))
    assert found == {"reads": None, "evidence": f"no c10 library under {tmp_path / 'torch' / 'lib'}"}


@pytest.mark.slow
def test_torch_2_13_reads_both_spellings(cpu_torch_python: Path) -> None:
    facts = run_host_facts(str(cpu_torch_python), timeout=120)
    assert facts.error is None and facts.torch.ok and facts.torch.version == "2.13.0+cpu"
    assert facts.torch.alloc_reads == ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
    assert facts.torch.alloc_evidence is not None and facts.torch.alloc_evidence.endswith("/torch/lib/libc10.so")
    header = Path(facts.torch.path or "") / "include/c10/cuda/CUDAAllocatorConfig.h"
    source = header.read_text()  # where torch's own source says it: the same two names
    assert 'get_env("PYTORCH_CUDA_ALLOC_CONF")' in source and 'get_env("PYTORCH_ALLOC_CONF")' in source
    assert json.loads(json.dumps(facts.torch.alloc_reads)) == list(facts.torch.alloc_reads)
