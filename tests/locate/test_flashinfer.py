"""Whether the FlashInfer beside sglang has the SM12x allreduce kernel: by its code first,
by its version only where no code is at hand (a pin)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.locate import flashinfer


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
