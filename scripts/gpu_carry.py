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
* ``carry-cmd``: prints the shell prefix a device command uses to install both;
* ``sglang``: downloads sglang 0.5.13 and what its distributed / fusion / norm modules need to
  import (``SGLANG_CARRY``), with a slice of ``sglang-kernel`` (its 323 MB wheel, cut down to the
  Python files and the sm_90 ops: ``SGL_KERNEL_KEEP``), into ``.carry/a/`` and ``.carry/b/``.
  A device call carries at most 64 MiB, so the two folders travel in two consecutive calls
  (``carry=[".carry/a"]``, then ``carry=[".carry/b"]``) and are installed into the same
  ``/tmp/site``, which the machine keeps between warm calls;
* ``sglang-cmd``: prints the two device command prefixes for that (also printed by ``sglang``).

``.whl/``, ``.fi_aot/`` and ``.carry/`` are git-ignored: binaries are never committed. The full
downloads for ``.carry/`` stay outside the repository, in ``SGLANG_DL``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
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

# sglang carry. The device has torch 2.11.0+cu130 and many of sglang's smaller dependencies (see
# the research note unfused-path.md section 5); these are what it lacks for
# ``sglang.srt.distributed.{parallel_state,communication_op,device_communicators.custom_all_reduce}``
# and ``sglang.srt.layers.{layernorm,flashinfer_comm_fusion}``. Everything is pinned; installed
# with --no-deps. Folder "a" holds the kernel packages, "b" sglang and the Python packages.
SGLANG = "sglang==0.5.13"  # pins torch==2.11.0, the device's; its wheel is cp312 manylinux_2_34
SGL_KERNEL = "sglang-kernel==0.4.3"  # sglang 0.5.13's pin; sliced, see SGL_KERNEL_KEEP
SGLANG_CARRY = {
    "a": [
        FLASHINFER,  # sglang pins 0.6.12, whose flashinfer.comm needs cuda.tile; 0.6.18 imports without
        TVM_FFI,
        "torchcodec==0.11.1",  # sglang's pin
    ],
    "b": [
        SGLANG,
        "transformers==5.8.1",  # sglang's pin; the device's 5.17 clashes with sglang's config registrations
        "tokenizers==0.22.2",  # transformers 5.8.1 wants <=0.23.0; the device has 0.23.2
        "openai==2.6.1",  # sglang's pin
        "distro==1.9.0",  # openai's
        "jiter==0.19.0",  # openai's
        "sniffio==1.3.1",  # openai's
        "pydantic==2.14.4",
        "pydantic-core==2.50.5",  # pydantic 2.14.4's exact pin
        "annotated-types==0.8.0",  # pydantic's
        "typing-inspection==0.4.5",  # pydantic's
        "typing-extensions==4.16.0",  # pydantic(-core) 2.14 want >=4.16.0; the device's may be older
        "orjson==3.13.0",
        "pybase64==1.5.1",
        "starlette==1.10.0",
        "pyzmq==27.3.0",
        "msgspec==0.23.0",  # not on the five modules' import path, but sglang's managers import it
        "partial-json-parser==0.2.1.1.post7",  # layernorm -> server_args -> function_call parsers
        "dill==0.4.1",  # layernorm -> sampling.custom_logit_processor
        "compressed-tensors==0.20.1",  # layernorm -> layers.quantization
        "loguru==0.7.3",  # compressed-tensors'
        "gguf==0.19.0",  # layernorm -> layers.quantization.gguf
        "ipython==9.18.1",  # sglang/utils.py: from IPython.display import ...
        "ipython-pygments-lexers==1.1.1",  # ipython's, and below (only traitlets is loaded on import)
        "jedi==0.20.1",
        "parso==0.8.7",
        "matplotlib-inline==0.2.2",
        "traitlets==5.16.1",
        "pexpect==4.9.0",
        "ptyprocess==0.7.0",
        "prompt-toolkit==3.0.53",
        "wcwidth==0.9.4",
        "stack-data==0.6.3",
        "executing==2.3.0",
        "asttokens==3.0.2",
        "pure-eval==0.2.4",
        "libcst==1.9.0",  # sm120patch's own, to apply and verify there (pyyaml is on the device)
        # bench --server (sglang's bench_one_batch) also imports these; fastapi 0.120 is the last
        # without opentelemetry-api (annotated-doc is on the device)
        "fastapi==0.120.4",
        "uvicorn==0.54.0",
        "setproctitle==1.3.8",
    ],
}
SGL_KERNEL_FOLDER = "a"
# Of sglang-kernel's wheel: every sgl_kernel/**.py and these; flash_ops.abi3.so (1 GB) is imported
# in a try, sm100/ is for other GPUs, triton_kernels/, _mscclpp, lib/ and include/ are not used.
SGL_KERNEL_KEEP = ("sgl_kernel/sm90/common_ops.abi3.so", "sgl_kernel/spatial_ops.abi3.so")
SGLANG_PLATFORMS = ["manylinux_2_34_x86_64", *PLATFORMS]  # pip also accepts the older manylinux_2_N
CARRY = ROOT / ".carry"
CARRY_LIMIT = 58 * 2**20  # per folder: a device call carries 64 MiB, the repository is ~3 MiB
SGLANG_DL = Path("/root/sglang-carry-dl")  # full downloads, never carried
SITE = "/tmp/site"
DEVICE_ENV = "FLASHINFER_DISABLE_JIT=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"

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


def pip_download(dest: Path, reqs: list[str], platforms: list[str] = PLATFORMS) -> None:
    plat = [a for p in platforms for a in ("--platform", p)]
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
            str(dest),
            *reqs,
        ]
    )


def cmd_wheels(_: argparse.Namespace) -> None:
    WHL.mkdir(exist_ok=True)
    pip_download(WHL, DEVICE_WHEELS)
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
        f"export {DEVICE_ENV}"
    )


def wheel_for(req: str, folder: Path) -> Path:
    """The downloaded wheel of a pinned requirement (wheel file names normalise - and . to _)."""
    name, version = req.split("==")
    stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"
    found = [w for w in folder.glob("*.whl") if w.name.lower().startswith(stem)]
    if len(found) != 1:
        sys.exit(f"{req}: expected one wheel in {folder}, found {[w.name for w in found]}")
    return found[0]


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def slice_sgl_kernel(src: Path, dest: Path) -> None:
    """Re-pack sglang-kernel's wheel (same name, version and tags) with only what the device loads."""
    with zipfile.ZipFile(src) as zin:
        dist_info = next(n.split("/")[0] for n in zin.namelist() if n.split("/")[0].endswith(".dist-info"))
        record_name = f"{dist_info}/RECORD"
        keep = [
            n
            for n in zin.namelist()
            if (n.startswith("sgl_kernel/") and n.endswith(".py"))
            or n in SGL_KERNEL_KEEP
            or (n.startswith(f"{dist_info}/") and n != record_name)
        ]
        missing = set(SGL_KERNEL_KEEP) - set(keep)
        if missing:
            sys.exit(f"{src.name} lacks {sorted(missing)}")
        record = []
        with zipfile.ZipFile(dest / src.name, "w") as zout:
            for name in keep:
                data = zin.read(name)
                zout.writestr(zin.getinfo(name), data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
                record.append(f"{name},{record_hash(data)},{len(data)}")
            record.append(f"{record_name},,")
            info = zipfile.ZipInfo(record_name, zin.getinfo(record_name).date_time)
            info.external_attr = zin.getinfo(record_name).external_attr
            zout.writestr(info, "\n".join(record) + "\n", compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)


def cmd_sglang(_: argparse.Namespace) -> None:
    SGLANG_DL.mkdir(parents=True, exist_ok=True)
    reqs = [r for folder in SGLANG_CARRY.values() for r in folder]
    pip_download(SGLANG_DL, [*reqs, SGL_KERNEL], SGLANG_PLATFORMS)
    for key, folder_reqs in SGLANG_CARRY.items():
        folder = CARRY / key
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for req in folder_reqs:
            shutil.copy2(wheel_for(req, SGLANG_DL), folder)
        if key == SGL_KERNEL_FOLDER:
            slice_sgl_kernel(wheel_for(SGL_KERNEL, SGLANG_DL), folder)
    over = []
    for key in SGLANG_CARRY:
        folder = CARRY / key
        total = 0
        print(f".carry/{key}/:")
        for whl in sorted(folder.glob("*.whl")):
            total += whl.stat().st_size
            print(f"{whl.stat().st_size / 2**20:8.2f} MiB  {whl.name}")
        print(f"{total / 2**20:8.2f} MiB  total (limit {CARRY_LIMIT / 2**20:.0f} MiB)")
        if total > CARRY_LIMIT:
            over.append(key)
    if over:
        sys.exit(f"over the per-call carry limit: .carry/{', .carry/'.join(over)}")
    print_sglang_cmds()


def sglang_cmds() -> tuple[str, str]:
    pip = f"python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target {SITE}"
    first = f"rm -rf {SITE} && {pip} .carry/a/*.whl"
    second = (
        f"test -d {SITE}/flashinfer || {{ echo '{SITE} lacks .carry/a (machine not warm?): run the first call again'; "
        f"exit 1; }}; {pip} .carry/b/*.whl && export PYTHONPATH={SITE} {DEVICE_ENV}"
    )
    return first, second


def print_sglang_cmds() -> None:
    first, second = sglang_cmds()
    print("device call 1, carry=['.carry/a']:")
    print(f"  {first}")
    print("device call 2, carry=['.carry/b'], then the command itself after ' && ':")
    print(f"  {second}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("wheels", help="download device wheels and build sm120patch's into .whl/")
    build = sub.add_parser("build-module", help="build trtllm_comm.so for sm_90a into .fi_aot/")
    build.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="ninja jobs (MAX_JOBS)")
    build.add_argument("--cuda-home", default="/usr/local/cuda")
    sub.add_parser("carry-cmd", help="print the device command prefix that installs .whl/ and .fi_aot/")
    sub.add_parser("sglang", help="download sglang 0.5.13 and its import needs into .carry/a and .carry/b")
    sub.add_parser("sglang-cmd", help="print the two device command prefixes that install .carry/a, .carry/b")
    args = parser.parse_args()
    if args.cmd == "wheels":
        cmd_wheels(args)
    elif args.cmd == "build-module":
        cmd_build_module(args)
    elif args.cmd == "sglang":
        cmd_sglang(args)
    elif args.cmd == "sglang-cmd":
        print_sglang_cmds()
    else:
        print(carry_cmd())


if __name__ == "__main__":
    main()
