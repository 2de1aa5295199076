"""Fakes of what lies outside Python, for tests that run the tool or sglang's code.

* ``fake_nvidia_smi``: an ``nvidia-smi`` on PATH that answers the GPU query with fixed GPUs.
* ``fake_torch_package``: a ``torch`` package that reports one GPU of a given capability
  (enough for sglang's SM probes and sm120patch's runtime check, nothing else).
* ``fake_flashinfer``: a FlashInfer install beside sglang: its dist-info and the one function
  of ``flashinfer/jit/comm.py`` that sm120patch reads.
* ``interrupting_executable``: an interpreter that sends Ctrl-C's SIGINT to whoever runs it.
* ``hanging_executable``: a hung program (a serving interpreter, nvidia-smi) whose child
  ignores SIGTERM; ``running`` says whether such a child is still there.
"""

from __future__ import annotations

import os
from pathlib import Path

RTX_PRO_6000 = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"


def fake_nvidia_smi(bin_dir: Path, gpus: list[tuple[str, str]]) -> Path:
    """``nvidia-smi --query-gpu=index,name,compute_cap --format=csv,noheader`` answering
    ``gpus`` ([(name, "12.0"), ...]); any other query fails, as a script would."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    lines = "\\n".join(f"{i}, {name}, {cap}" for i, (name, cap) in enumerate(gpus))
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--query-gpu=index,name,compute_cap" ] && [ "$2" = "--format=csv,noheader" ]; then\n'
        f"  printf '{lines}\\n'\n"
        "  exit 0\n"
        "fi\n"
        "echo 'unexpected query' >&2\nexit 9\n"
    )
    script.chmod(0o755)
    return script


def fake_torch_package(root: Path, capability: tuple[int, int], cuda: str = "12.9") -> Path:
    """A ``torch`` package under ``root`` reporting one GPU of ``capability``."""
    package = root / "torch"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(
        '"""FakeTorch: one GPU, for sm120patch tests; not PyTorch."""\n'
        "import types\n"
        '__version__ = "0.0-fake"\n'
        f"version = types.SimpleNamespace(cuda={cuda!r})\n"
        "cuda = types.SimpleNamespace(\n"
        "    is_available=lambda: True,\n"
        "    device_count=lambda: 1,\n"
        f"    get_device_capability=lambda device=None: {capability!r},\n"
        '    get_device_name=lambda device=None: "FakeGPU",\n'
        "    can_device_access_peer=lambda i, j: True,\n"
        ")\n"
    )
    return root


def fake_flashinfer(site: Path, version: str, majors: list[int]) -> None:
    """A FlashInfer ``version`` installed in ``site`` whose trtllm allreduce is built for the
    GPU majors ``majors`` (``supported_major_versions`` of ``gen_trtllm_comm_module``)."""
    (site / "flashinfer" / "jit").mkdir(parents=True)
    (site / "flashinfer" / "__init__.py").write_text("")
    (site / "flashinfer" / "jit" / "comm.py").write_text(
        f"def gen_trtllm_comm_module():\n    nvcc_flags = ctx.get_nvcc_flags_list(supported_major_versions={majors})\n"
    )
    dist = site / f"flashinfer_python-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version}\n")


def hanging_executable(path: Path, pids: Path) -> Path:
    """An executable at ``path`` that stands for a hung program (an interpreter, nvidia-smi):
    whatever it is asked, it starts a sleeping child that ignores SIGTERM, appends the child's pid to
    ``pids``, and waits for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/sh\n"
        "# Fake hung program (sm120patch tests): a child deaf to SIGTERM, then wait.\n"
        "sh -c 'trap \"\" TERM; exec sleep 300' &\n"
        f"echo $! >> '{pids}'\n"
        "wait\n"
    )
    path.chmod(0o755)
    return path


def interrupting_executable(path: Path) -> Path:
    """An executable at ``path`` that, whatever it is asked, sends SIGINT to the process that
    ran it (as Ctrl-C does to sm120patch), then hangs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/sh\n# Fake interpreter (sm120patch tests): Ctrl-C for its parent.\nkill -INT $PPID\nexec sleep 30\n"
    )
    path.chmod(0o755)
    return path


def running(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def kill_leftovers(pids: Path) -> None:
    """End what ``hanging_executable`` started and the tool left running (a failed test)."""
    for pid in pids_in(pids):
        if running(pid):
            os.kill(pid, 9)
