"""Prepare what a network-less GPU machine needs to run FlashInfer's trtllm allreduce fusion.

The device machine (x86_64, Python 3.12, torch 2.11+cu130, H200 = sm_90) has no network and
must not JIT-compile FlashInfer there (one module takes ~20 minutes). So, on a GPU-less
machine with nvcc, this script:

* ``wheels``: downloads the few wheels the device lacks (flashinfer-python, apache-tvm-ffi,
  libcst) and builds the sm120patch wheel, all into ``.whl/``;
* ``build-module``: builds FlashInfer's ``trtllm_comm`` module for sm_90a through FlashInfer's
  own JIT spec and places it where FlashInfer loads prebuilt AOT modules from
  (``flashinfer/jit/env.py`` ``_get_aot_dir`` -> ``<package>/data/aot``;
  ``flashinfer/jit/core.py`` ``JitSpecNvcc.aot_path`` -> ``<aot>/<name>/<name>.so``), under
  ``.fi_aot/``, so that with ``FLASHINFER_DISABLE_JIT=1`` nothing compiles on the device;
* ``carry-cmd``: prints the shell prefix a device command uses to install both.

``.whl/`` and ``.fi_aot/`` are git-ignored: binaries built from FlashInfer are never committed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHL = ROOT / ".whl"
AOT_REL = Path("flashinfer/data/aot/trtllm_comm/trtllm_comm.so")
AOT = ROOT / ".fi_aot" / AOT_REL

FLASHINFER = "flashinfer-python==0.6.18"
TVM_FFI = "apache-tvm-ffi==0.1.15.post2"  # flashinfer 0.6.18 wants >=0.1.6,<0.2 (not 0.1.8/0.1.8.post0)
DEVICE_WHEELS = [FLASHINFER, TVM_FFI, "libcst"]  # pyyaml (libcst's dependency) is already on the device
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]

# Build venv: the packages the device already has, plus FlashInfer without its dependencies, so a
# successful ``import flashinfer.comm`` here also shows the device needs nothing more.
DEVICE_HAS = [
    "torch==2.13.0",
    "numpy",
    "requests",
    "tqdm",
    "jinja2",
    "nvidia-ml-py",
    "cuda-bindings",
    "filelock",
    "click",
    "rich",
    "packaging",
    "ninja",
]
VENV = Path("/root/fibuild-venv")
WORK = Path("/root/fibuild-work")  # FLASHINFER_WORKSPACE_BASE: where the ninja build happens
ARCH_LIST = "9.0a"  # compilation_context.CompilationContext reads FLASHINFER_CUDA_ARCH_LIST

# Runs inside the build venv: let FlashInfer write its own build.ninja for the module, drop
# -lcuda (this machine has no libcuda and the objects reference no driver symbol), run ninja.
BUILD_CODE = r"""
import re, sys
from flashinfer.jit.comm import gen_trtllm_comm_module
from flashinfer.jit.cpp_ext import run_ninja
spec = gen_trtllm_comm_module()
spec.write_ninja()
text = spec.ninja_path.read_text()
new = re.sub(r"(?<=\s)-lcuda(?=\s|$)", "", text, flags=re.M)
assert new != text, "no -lcuda found in build.ninja"
spec.ninja_path.write_text(new)
print("ninja file:", spec.ninja_path, flush=True)
run_ninja(spec.build_dir, spec.ninja_path, verbose=True)
print("BUILT", spec.jit_library_path, flush=True)
"""


def sh(cmd: list[str], **kw: object) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def cmd_wheels(_: argparse.Namespace) -> None:
    WHL.mkdir(exist_ok=True)
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    sh(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            "--implementation",
            "cp",
            *plat,
            "-d",
            str(WHL),
            *DEVICE_WHEELS,
        ]
    )
    for old in WHL.glob("sm120patch-*.whl"):
        old.unlink()
    sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(WHL), str(ROOT)])
    for whl in sorted(WHL.glob("*.whl")):
        print(f"{whl.stat().st_size / 2**20:8.2f} MiB  {whl.name}")


def venv_python() -> Path:
    py = VENV / "bin" / "python"
    if not py.exists():
        sh([sys.executable, "-m", "venv", str(VENV)])
        sh([str(py), "-m", "pip", "install", "-q", *DEVICE_HAS])
        sh([str(py), "-m", "pip", "install", "-q", "--no-deps", FLASHINFER, TVM_FFI])
    return py


def cmd_build_module(args: argparse.Namespace) -> None:
    start = time.monotonic()
    py = venv_python()
    env = dict(
        os.environ,
        FLASHINFER_CUDA_ARCH_LIST=ARCH_LIST,
        FLASHINFER_WORKSPACE_BASE=str(WORK),
        MAX_JOBS=str(args.jobs),
        CUDA_HOME=args.cuda_home,
    )
    env.pop("FLASHINFER_DISABLE_JIT", None)
    out = subprocess.run([str(py), "-c", BUILD_CODE], env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    print(out, flush=True)
    built = Path(out.rsplit("BUILT ", 1)[1].strip())
    AOT.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(built, AOT)
    print(f"{AOT}: {AOT.stat().st_size / 2**20:.2f} MiB, built in {(time.monotonic() - start) / 60:.1f} min")
    nm = subprocess.run(["nm", "-D", "--undefined-only", str(AOT)], check=True, stdout=subprocess.PIPE, text=True)
    driver = [
        ln.split()[-1] for ln in nm.stdout.splitlines() if ln.split()[-1][:2] == "cu" and ln.split()[-1][2:3].isupper()
    ]
    if driver:
        sys.exit(f"undefined CUDA driver symbols (need libcuda): {' '.join(driver)}")
    print("no undefined cu* driver symbols")


def carry_cmd() -> str:
    site = "/tmp/site"
    dest = f"{site}/{AOT_REL.parent}"
    return (
        f"python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target {site} "
        f".whl/*.whl && export PYTHONPATH={site} && mkdir -p {dest} && cp .fi_aot/{AOT_REL} {dest}/ && "
        "export FLASHINFER_DISABLE_JIT=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("wheels", help="download device wheels and build sm120patch's into .whl/")
    build = sub.add_parser("build-module", help="build trtllm_comm.so for sm_90a into .fi_aot/")
    build.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="ninja jobs (MAX_JOBS)")
    build.add_argument("--cuda-home", default="/usr/local/cuda")
    sub.add_parser("carry-cmd", help="print the device command prefix that installs .whl/ and .fi_aot/")
    args = parser.parse_args()
    if args.cmd == "wheels":
        cmd_wheels(args)
    elif args.cmd == "build-module":
        cmd_build_module(args)
    else:
        print(carry_cmd())


if __name__ == "__main__":
    main()
