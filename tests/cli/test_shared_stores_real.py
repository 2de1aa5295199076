"""Real installers, real releases: what apply writes in one environment never reaches another
that shares its files, nor the installer's store.

For uv (``--link-mode`` symlink, hardlink, copy and clone, which falls back to hard links where
the filesystem cannot clone), pip, and ``pip install -e`` of an sglang sdist: two environments
installed the same way, ``apply --python a``, ``verify --python b``, ``revert --python a``, and
the store hashed (files by bytes, links by text) before and after.  Releases: 0.5.23 and 0.5.9
(the platform wheels of 0.5.11+ and the pure-Python ones before).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from sm120patch.patcher.commands.demo import fetch_wheel, wheel_cache
from sm120patch.sglang.layout import COMMUNICATOR, SERVER_ARGS
from tests.support.cli import run
from tests.support.realtrees import bare_venv, pip_install_into
from tests.support.shared_store import store_digest

pytestmark = pytest.mark.slow  # real installs of real releases from the package index

RELEASES = ["0.5.23", "0.5.9"]


def uv(*args: str | Path, cache: Path) -> None:
    from uv import find_uv_bin

    subprocess.run([find_uv_bin(), *map(str, args), "--cache-dir", str(cache), "--quiet"], check=True)


def uv_env(root: Path, wheel: Path, mode: str, cache: Path) -> tuple[Path, Path]:
    """A venv with sglang installed by uv in ``mode``: (its python, its site-packages)."""
    uv("venv", "--python", sys.executable, root, cache=cache)
    python = root / "bin" / "python"
    uv("pip", "install", "--python", python, "--no-deps", "--link-mode", mode, wheel, cache=cache)
    (site,) = root.glob("lib/python*/site-packages")
    return python, site


def targets(site: Path, version: str) -> list[Path]:
    """The files apply patches in this release (each of its eras patches these two or more)."""
    wanted = [COMMUNICATOR, SERVER_ARGS] if version == "0.5.9" else ["srt/layers/flashinfer_comm_fusion.py"]
    return [site / "sglang" / rel for rel in wanted]


def cycle(a: Path, b: Path, a_site: Path, b_site: Path, store: Callable[[], str]) -> tuple[str, str]:
    """apply in a, verify in b and a, revert in a, each checked, with ``store()`` (the
    store's digest) the same throughout; apply's and revert's messages."""
    a_before, b_before, store_before = store_digest(a_site), store_digest(b_site), store()
    code, _, applied = run("apply", "--python", str(a), "--allow-missing-kernel")
    assert code == 0, applied
    assert store() == store_before and store_digest(b_site) == b_before
    code, _, err = run("verify", "--python", str(b))
    assert code == 1 and "not patched" in err, err
    code, _, err = run("verify", "--python", str(a))
    assert code == 0 and "all patches applied" in err, err
    code, _, err_revert = run("revert", "--python", str(a))
    assert code == 0, err_revert
    assert store_digest(a_site) == a_before  # byte for byte, links by their text
    assert store() == store_before and store_digest(b_site) == b_before
    return applied, err_revert


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("mode", ["symlink", "hardlink", "copy", "clone"])
def test_uv_installs_share_nothing_apply_wrote(tmp_path: Path, version: str, mode: str) -> None:
    wheel, cache = fetch_wheel(version), tmp_path / "uv-cache"
    a, a_site = uv_env(tmp_path / "a", wheel, mode, cache)
    b, b_site = uv_env(tmp_path / "b", wheel, mode, cache)
    files = targets(a_site, version)
    (laid_out,) = {"symlink" if f.is_symlink() else "hardlink" if f.stat().st_nlink > 1 else "copy" for f in files}
    # clone: a copy-on-write copy, or hard links where the filesystem cannot clone (ext4)
    assert laid_out in ({"copy", "hardlink"} if mode == "clone" else {mode})

    applied, reverted = cycle(a, b, a_site, b_site, lambda: store_digest(cache))
    said = " ".join(applied.split())
    if mode == "symlink":
        assert "were links into" in said and f"{cache}" in said and "was not written" in said
        assert "are links again" in " ".join(reverted.split())
        assert all(f.is_symlink() for f in files)  # and their text as installed: the digest above
    if laid_out == "hardlink":
        assert "shared their data with other hard links" in said


@pytest.mark.parametrize("version", RELEASES)
def test_pip_installs_from_one_wheel_share_nothing_apply_wrote(tmp_path: Path, version: str) -> None:
    wheel = fetch_wheel(version)
    a, a_site = bare_venv(tmp_path / "a")
    b, b_site = bare_venv(tmp_path / "b")
    pip_install_into(a, str(wheel))
    pip_install_into(b, str(wheel))
    # pip copies every file out of the wheel: the wheel is all the two share
    cycle(a, b, a_site, b_site, lambda: hashlib.sha256(wheel.read_bytes()).hexdigest())


def sdist(version: str) -> Path:
    """sglang's sdist from the package index, cached beside the wheels."""
    cache = wheel_cache()
    found = sorted(cache.glob(f"sglang-{version}.tar.gz"))
    if not found:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
        command += ["--disable-pip-version-check", "-d", str(cache), f"sglang=={version}"]
        subprocess.run(command, check=True)
        found = sorted(cache.glob(f"sglang-{version}.tar.gz"))
    return found[0]


def test_an_editable_install_patches_its_checkout_which_both_environments_share(tmp_path: Path) -> None:
    """``pip install -e`` of an sdist: the package is the checkout, so apply patches the
    checkout, and a second environment installed from the same checkout sees it patched;
    revert gives the checkout back byte for byte."""
    with tarfile.open(sdist("0.5.9")) as archive:
        archive.extractall(tmp_path / "src", filter="data")
    (checkout,) = (tmp_path / "src").iterdir()
    a, b = bare_venv(tmp_path / "a")[0], bare_venv(tmp_path / "b")[0]
    for python in (a, b):
        pip_install_into(python, "-e", str(checkout))
    before = store_digest(checkout)
    code, _, err = run("apply", "--python", str(a))
    assert code == 0, err
    assert "[editable]" in err  # the checkout is the package: patched there, as the header says
    code, _, err = run("verify", "--python", str(b))
    assert code == 0 and "all patches applied" in err, err
    code, _, err = run("revert", "--python", str(a))
    assert code == 0, err
    assert store_digest(checkout) == before
