"""Build and run images with podman, as root, inside a VM sandbox without a container daemon.

What works there (Debian 12 host, podman 4.3, cgroup v1, no systemd, outbound HTTPS through a
proxy with its own CA), found by trying, all in private configuration files so the host's
podman setup is neither read nor changed:

- ``runtime = "runc"``: the runtime podman is installed with here (``apt-get install podman
  runc``, no crun);
- ``default_ulimits`` at or below the sandbox's hard limits (``nofile=20000``,
  ``nproc=32768``): podman's default raises RLIMIT_NOFILE to 1048576 and runc fails with
  "error setting rlimits for ready process: ... operation not permitted";
- ``cgroup_manager = "cgroupfs"``, ``events_logger = "file"``: no systemd, no journald;
- storage in a private directory with the ``overlay`` driver (native overlay works on the
  host's ext4; ``vfs`` only when that directory itself sits on overlayfs, as in a container);
- ``podman build --volume /etc/ssl/certs:/etc/ssl/certs:ro``: RUN steps reach the package
  index through the default (CNI bridge) network, but only with the host's CA bundle;
- default OCI isolation: no ``--isolation chroot`` needed.

The official ``lmsysorg/sglang`` image cannot be pulled here; ``stand_in_image`` builds one
from a debootstrap'd Debian (cached as a tarball) with the real sglang and FlashInfer wheels
laid out as the official image has them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from sm120patch.patcher.commands.demo import cache_root

ROOTFS = cache_root() / "rootfs"  # SM120PATCH_CACHE, else ~/.cache/sm120patch
MIRROR = os.environ.get("SM120PATCH_DEBIAN_MIRROR") or "http://deb.debian.org/debian"
SUITE = "bookworm"  # python3 3.11, like the host this was written on
# python-is-python3: the entrypoint execs `python`, as the official image has it.
PACKAGES = ("python3", "python3-venv", "python3-pip", "python-is-python3", "ca-certificates")
TOOLS = ("podman", "runc", "debootstrap")

CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
REGISTRIES_CONF = """\
unqualified-search-registries = ["docker.io"]
short-name-mode = "permissive"
"""
CA_MOUNT = "/etc/ssl/certs:/etc/ssl/certs:ro"  # the host's CA bundle, for pip in RUN steps


def missing() -> str | None:
    """Why this machine cannot run the podman tests, or None."""
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    if absent:
        return f"{', '.join(absent)} not installed (apt-get install -y podman runc debootstrap)"
    if os.geteuid() != 0:
        return "podman builds here run as root (debootstrap, rootful storage)"
    return None


def filesystem(path: Path) -> str:
    proc = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True)
    return proc.stdout.strip()


@dataclass
class Podman:
    """podman with private configuration and storage under ``root``."""

    root: Path

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        driver = "vfs" if filesystem(self.root) == "overlayfs" else "overlay"
        (self.root / "containers.conf").write_text(CONTAINERS_CONF)
        (self.root / "registries.conf").write_text(REGISTRIES_CONF)
        (self.root / "storage.conf").write_text(
            f'[storage]\ndriver = "{driver}"\ngraphroot = "{self.root / "graph"}"\nrunroot = "{self.root / "run"}"\n'
        )
        self.env = dict(
            os.environ,
            CONTAINERS_CONF=str(self.root / "containers.conf"),
            CONTAINERS_STORAGE_CONF=str(self.root / "storage.conf"),
            CONTAINERS_REGISTRIES_CONF=str(self.root / "registries.conf"),
        )

    def __call__(
        self, *args: str, cwd: Path | None = None, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["podman", *args], capture_output=True, text=True, env=self.env, cwd=cwd, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"podman {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-4000:]}{proc.stderr}"
            )
        return proc

    def close(self) -> None:
        """Remove the storage: with no container left, no layer is mounted."""
        self("rm", "--all", "--force", check=False)
        self("unmount", "--all", check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def _unmount_below(root: Path) -> None:
    """debootstrap mounts proc and sys in its target; a failed run can leave them mounted."""
    with open("/proc/mounts") as fh:
        points = [line.split()[1] for line in fh]
    for point in sorted((p for p in points if p.startswith(f"{root}/")), reverse=True):
        subprocess.run(["umount", "-l", point], check=False)


def debian_rootfs(suite: str = SUITE) -> Path:
    """A minbase Debian with python3 as a tarball, built once by debootstrap and cached."""
    tarball = ROOTFS / f"debian-{suite}-minbase-python3.tar"
    if tarball.is_file():
        return tarball
    ROOTFS.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=ROOTFS, prefix=f".{suite}-"))
    target = tmp / "root"
    try:
        command = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", suite, str(target), MIRROR]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=1200)
        if proc.returncode != 0:
            raise AssertionError(f"debootstrap {suite} failed:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (target / junk).glob("*"):
                if entry.is_file():
                    entry.unlink()
        subprocess.run(["tar", "-C", str(target), "--numeric-owner", "-cf", str(tmp / "rootfs.tar"), "."], check=True)
        os.replace(tmp / "rootfs.tar", tarball)
    finally:
        _unmount_below(target)
        shutil.rmtree(tmp, ignore_errors=True)
    return tarball


def flashinfer_pin(sglang_wheel: Path) -> str:
    """The FlashInfer version an sglang wheel pins (``Requires-Dist: flashinfer_python==X``)."""
    with zipfile.ZipFile(sglang_wheel) as whl:
        (metadata,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        lines = whl.read(metadata).decode().splitlines()
    for line in lines:
        if line.startswith("Requires-Dist:"):
            requirement = Requirement(line.partition(":")[2].strip())
            pins = [s.version for s in requirement.specifier if s.operator == "=="]
            if requirement.name.replace("_", "-") == "flashinfer-python" and pins and requirement.marker is None:
                return pins[0]
    raise AssertionError(f"{sglang_wheel.name} pins no flashinfer-python")


STAND_IN = """\
FROM {base}
COPY wheels/ /tmp/wheels/
COPY pyproject.toml /sgl-workspace/sglang/python/pyproject.toml
# sglang as the official image has it: an editable checkout under /sgl-workspace/sglang/python
# (here the wheel's own files; there is no sdist of this release), FlashInfer from its wheel in
# the system Python.  No dependencies: apply and verify only read files.
RUN cd /sgl-workspace/sglang/python \\
 && python3 -m zipfile -e /tmp/wheels/{sglang} /tmp/sglang-wheel \\
 && mv /tmp/sglang-wheel/sglang . \\
 && python3 -m pip install --no-deps --no-index --no-build-isolation --break-system-packages -e . \\
 && for wheel in /tmp/wheels/flashinfer*.whl; do [ ! -e "$wheel" ] \\
    || python3 -m pip install --no-deps --no-index --break-system-packages "$wheel" || exit 1; done \\
 && rm -rf /tmp/wheels /tmp/sglang-wheel /root/.cache
WORKDIR /sgl-workspace/sglang
"""
CHECKOUT_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "sglang"
version = "{version}"

[tool.setuptools.packages.find]
include = ["sglang*"]
"""
BASE = "localhost/sm120patch-test/debian:{suite}"


def stand_in_image(podman: Podman, tag: str, sglang_wheel: Path, flashinfer_wheel: Path | None, workdir: Path) -> str:
    """Tag ``docker.io/lmsysorg/sglang:<tag>``: Debian + python3, sglang editable under
    /sgl-workspace/sglang/python, FlashInfer (when given) in the system site-packages."""
    base = BASE.format(suite=SUITE)
    if podman("image", "exists", base, check=False).returncode != 0:
        podman("import", str(debian_rootfs()), base)
    context = workdir / f"stand-in-{tag}"
    (context / "wheels").mkdir(parents=True)
    for wheel in (sglang_wheel, flashinfer_wheel):
        if wheel is not None:
            shutil.copyfile(wheel, context / "wheels" / wheel.name)
    version = sglang_wheel.name.split("-")[1]
    (context / "pyproject.toml").write_text(CHECKOUT_PYPROJECT.format(version=version))
    (context / "Containerfile").write_text(STAND_IN.format(base=base, sglang=sglang_wheel.name))
    image = f"docker.io/lmsysorg/sglang:{tag}"
    try:
        podman("build", "--pull=never", "-t", image, "-f", str(context / "Containerfile"), str(context))
    finally:
        shutil.rmtree(context)  # copies of the wheels
    return image
