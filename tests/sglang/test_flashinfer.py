"""Whether the FlashInfer beside sglang has the SM12x allreduce kernel: by its code first,
by its version only where no code is at hand (a pin)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.sglang import flashinfer


@pytest.mark.parametrize(
    ("version", "has"),
    [
        ("0.6.16", False),
        ("0.6.16.post4", False),
        ("0.6.17rc1", True),  # the first tag with flashinfer#3903
        ("0.6.17", True),
        ("0.6.18", True),
        ("0.7.2", True),
        ("0.2.7.post1", False),
        ("not a version", None),
        (None, None),
    ],
    ids=["0.6.16", "0.6.16.post4", "0.6.17rc1", "0.6.17", "0.6.18", "0.7.2", "0.2.7.post1", "not a version", "None"],
)
def test_the_version_threshold(version: str | None, has: bool | None) -> None:
    assert flashinfer.by_version(version) is has


def write_comm(package: Path, majors: str) -> Path:
    (package / "jit").mkdir(parents=True)
    spec = f"gen_jit_spec('trtllm_comm', [], supported_major_versions={majors})"
    (package / "jit" / "comm.py").write_text(f"def gen_trtllm_comm_module():\n    return {spec}\n")
    return package


def test_the_code_outranks_the_version(tmp_path: Path) -> None:
    """A 0.6.18 whose code still builds for [9, 10] (a hand-built wheel) has no SM12x kernel;
    a 0.6.3 patched by hand to [9, 10, 12] has one."""
    assert flashinfer.inspect("0.6.18", write_comm(tmp_path / "a", "[9, 10]")).sm12x_kernel is False
    assert flashinfer.inspect("0.6.3", write_comm(tmp_path / "b", "[9, 10, 12]")).sm12x_kernel is True


def test_code_of_another_shape_falls_back_to_the_version_and_says_so(tmp_path: Path) -> None:
    facts = flashinfer.inspect("0.6.16", write_comm(tmp_path / "c", "ARCHS"))
    assert facts.sm12x_kernel is False and facts.majors is None
    assert "judged by the version against 0.6.17" in facts.source


def test_the_kernel_is_read_from_the_builder_alone(tmp_path: Path) -> None:
    """Imports and other functions that pass ``supported_major_versions`` (another kernel's
    JIT spec) come first in the real file; only ``gen_trtllm_comm_module`` counts."""
    package = tmp_path / "flashinfer"
    (package / "jit").mkdir(parents=True)
    comm = package / "jit" / "comm.py"
    comm.write_text(
        "import os\nfrom .core import gen_jit_spec\n\n\n"
        "def gen_other_module():\n    return gen_jit_spec('other', [], supported_major_versions=[9, 10, 12])\n\n\n"
        "def gen_trtllm_comm_module():\n    return gen_jit_spec('trtllm_comm', [], supported_major_versions=[9, 10])\n"
    )
    assert flashinfer.inspect("0.6.18", package) == flashinfer.FlashInfer(
        "0.6.18",
        package,
        (9, 10),
        False,
        f"{comm}: gen_trtllm_comm_module(supported_major_versions=[9, 10])",
    )


@pytest.mark.parametrize("majors", ["[9, '10', 12]", "{12: 'sm120'}", "12"])
def test_majors_that_are_not_a_list_of_numbers_are_not_read(tmp_path: Path, majors: str) -> None:
    package = write_comm(tmp_path / "flashinfer", majors)
    assert flashinfer.supported_majors(package / "jit" / "comm.py") is None
    facts = flashinfer.inspect("0.6.16", package)
    assert (facts.majors, facts.sm12x_kernel) == (None, False)  # judged by the version instead


def test_the_sibling_package_is_a_flashinfer_with_an_init(tmp_path: Path) -> None:
    assert flashinfer.sibling_package(tmp_path) is None  # none beside sglang
    (tmp_path / "flashinfer").mkdir()
    assert flashinfer.sibling_package(tmp_path) is None  # an empty directory an uninstall left
    (tmp_path / "flashinfer" / "__init__.py").write_text("")
    assert flashinfer.sibling_package(tmp_path) == tmp_path / "flashinfer"
