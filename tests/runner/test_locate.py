"""locate: finding sglang in another interpreter (--python), an editable install, a checkout;
and the FlashInfer installed beside it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sm120patch.errors import EnvironmentProblem
from sm120patch.runner.locate import locate
from sm120patch.sglang.tree import InstallKind, from_directory
from tests.support.cli import jrun_process
from tests.support.realtrees import bare_venv, installed_release

pytestmark = pytest.mark.slow  # real sglang releases from the package index


def test_python_option_finds_sglang_in_another_venv(tmp_path: Path) -> None:
    python, site = bare_venv(tmp_path / "serving-env")
    source = installed_release("0.5.9")
    for entry in ("sglang", "sglang-0.5.9.dist-info"):
        subprocess.run(["cp", "-al", str(source / entry), str(site / entry)], check=True)

    tree = locate(python=str(python))
    assert tree.version == "0.5.9"
    assert tree.package_dir == (site / "sglang").resolve()
    assert tree.install_kind is InstallKind.WHEEL
    assert tree.python and tree.python.startswith(str(tmp_path))
    assert tree.record.sha256("srt/layers/communicator.py")  # RECORD read through the find_sglang dist-info
    assert locate(python=str(tmp_path / "serving-env")).package_dir == tree.package_dir  # env root

    code, data, _ = jrun_process("verify", "--python", python)
    assert code == 1 and data["sglang"]["location"] == str(tree.package_dir)
    assert data["sglang"]["found_by"] == f"--python {python}"


def test_python_option_without_sglang_says_what_was_searched(tmp_path: Path) -> None:
    python, site = bare_venv(tmp_path / "empty-env")
    with pytest.raises(EnvironmentProblem) as info:
        locate(python=str(python))
    assert "no sglang found in --python" in str(info.value)
    assert str(site) in str(info.value)
    with pytest.raises(EnvironmentProblem, match="no such interpreter"):
        locate(python=str(tmp_path / "nope" / "python"))


def test_editable_install_is_reported_as_such(tmp_path: Path) -> None:
    """pip install -e of a checkout: dist-info in site-packages, code in the checkout."""
    python, site = bare_venv(tmp_path / "env")
    checkout = tmp_path / "sgl-workspace" / "sglang" / "python"
    checkout.mkdir(parents=True)
    source = installed_release("0.5.9")
    shutil.copytree(source / "sglang", checkout / "sglang")
    (checkout / "pyproject.toml").write_text('[project]\nname = "sglang"\nversion = "0.5.9"\n')
    dist = site / "sglang-0.5.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n")
    (dist / "RECORD").write_text("sglang-0.5.9.dist-info/METADATA,,\n__editable__.sglang.pth,,\n")
    (dist / "direct_url.json").write_text(json.dumps({"url": checkout.as_uri(), "dir_info": {"editable": True}}))
    (site / "__editable__.sglang.pth").write_text(str(checkout) + "\n")

    tree = locate(python=str(python))
    assert tree.install_kind is InstallKind.EDITABLE
    assert tree.package_dir == (checkout / "sglang").resolve()
    assert tree.version == "0.5.9"

    bare = from_directory(checkout)  # --sglang-path on the checkout: version from pyproject
    assert (bare.install_kind, bare.version) == (InstallKind.PATH, "0.5.9")
    assert bare.record.sha256("srt/layers/communicator.py") is None
    assert "no install metadata" in (bare.record.problem or "")


def test_flashinfer_beside_sglang_is_read_for_the_warning(release) -> None:
    package = release("0.5.18")
    tree = from_directory(package)
    assert tree.flashinfer is None  # --no-deps: not installed, the pin is used for the warning
    dist = package.parent / "flashinfer_python-0.6.17.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.6.17\n")
    assert from_directory(package).flashinfer == "0.6.17"
    from sm120patch.sglang import flashinfer as flashinfer_kernel
    from sm120patch.sglang import releases

    assert releases.flashinfer_warning(flashinfer_kernel.inspect("0.6.17", None), "0.5.18") is None
    assert "0.6.12" in releases.flashinfer_warning(flashinfer_kernel.inspect("0.6.12", None), "0.5.18")
    assert "sglang 0.5.14 pins 0.6.12" in releases.flashinfer_warning(flashinfer_kernel.inspect(None, None), "0.5.14")
