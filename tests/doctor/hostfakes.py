"""Named fakes of what lies outside Python, for doctor's host tests (doctor's own: no import
from other test folders).

* ``fake_nvidia_smi``: an ``nvidia-smi`` script on PATH that answers doctor's three queries
  (index,name,compute_cap / index,uuid / index,name) with fixed bytes and exit codes.
* ``stub_torch``: a ``torch`` package ("StubTorch", not PyTorch) and a ``cuda.bindings.driver``
  module ("StubDriver") over the same GPUs, both honouring ``CUDA_VISIBLE_DEVICES`` as CUDA
  does (indices or UUID prefixes; the first entry naming no GPU ends the list; an empty
  value or a repeated GPU shows none), plus a ``torch/lib/libc10.so`` holding the
  allocator variable names that torch's c10 reads.
* ``serving_python``: a ``python`` script that runs this interpreter with the stubs first on
  its path (and, optionally, its own environment): the serving interpreter.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

RTX_PRO_6000 = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
H200 = "NVIDIA H200"
QUERIES = {
    "main": "--query-gpu=index,name,compute_cap",
    "uuid": "--query-gpu=index,uuid",
    "names": "--query-gpu=index,name",
}


@dataclass(frozen=True)
class FakeGpu:
    name: str = RTX_PRO_6000
    compute_cap: str = "12.0"  # as nvidia-smi prints it: "12.0", "[N/A]", "[Not Supported]"
    capability: tuple[int, int] = (12, 0)  # what the CUDA driver (and so torch) reports
    uuid: str = ""  # GPU-...; made up from the index when empty
    multicast: int = 0
    gdr_vmm: int = 1


def uuid_of(gpu: FakeGpu, index: int) -> str:
    return gpu.uuid or f"GPU-{index:08x}-1111-2222-3333-44445555{index:04x}"


def two_rtx(compute_cap: str = "12.0") -> list[FakeGpu]:
    return [FakeGpu(compute_cap=compute_cap), FakeGpu(compute_cap=compute_cap)]


def fake_nvidia_smi(
    bin_dir: Path,
    gpus: list[FakeGpu],
    main: bytes | None = None,
    main_rc: int = 0,
    main_err: bytes = b"",
    uuid_rc: int = 0,
    names_rc: int = 0,
    sleeps: dict[str, float] | None = None,
    reads_stdin: bool = False,
) -> Path:
    """FakeNvidiaSmi: ``nvidia-smi QUERY --format=csv,noheader`` prints the answer written
    for QUERY (``main`` replaces the compute_cap query's stdout with any bytes); any other
    query exits 9.  ``sleeps``: seconds to wait before answering, per query ("main", "uuid",
    "names"); ``reads_stdin``: copy whatever stdin holds to stdout before the answer.  Each
    call's query is logged; ``nvidia_smi_calls`` reads the log."""
    answers = bin_dir / "nvidia-smi-answers"
    answers.mkdir(parents=True, exist_ok=True)
    (answers / "calls").write_text("")
    for query in QUERIES:
        (answers / f"{query}.sleep").unlink(missing_ok=True)
    for query, seconds in (sleeps or {}).items():
        (answers / f"{query}.sleep").write_text(f"{seconds}")
    (answers / "reads-stdin").unlink(missing_ok=True)
    if reads_stdin:
        (answers / "reads-stdin").write_text("")
    rows = {
        "main": "".join(f"{i}, {g.name}, {g.compute_cap}\n" for i, g in enumerate(gpus)).encode(),
        "uuid": "".join(f"{i}, {uuid_of(g, i)}\n" for i, g in enumerate(gpus)).encode(),
        "names": "".join(f"{i}, {g.name}\n" for i, g in enumerate(gpus)).encode(),
    }
    if main is not None:
        rows["main"] = main
    for query, rc in (("main", main_rc), ("uuid", uuid_rc), ("names", names_rc)):
        (answers / f"{query}.out").write_bytes(rows[query] if rc == 0 or query == "main" else b"")
        (answers / f"{query}.err").write_bytes(main_err if query == "main" else b"")
        (answers / f"{query}.rc").write_text(str(rc))
    cases = "\n".join(f'  "{flag} --format=csv,noheader") q={query} ;;' for query, flag in QUERIES.items())
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        '# FakeNvidiaSmi (sm120patch tests): fixed answers from "$(dirname "$0")/nvidia-smi-answers"\n'
        'here="$(dirname "$0")/nvidia-smi-answers"\n'
        'case "$1 $2" in\n'
        f"{cases}\n"
        '  *) echo "unexpected" >>"$here/calls"; echo "unexpected query: $*" >&2; exit 9 ;;\n'
        "esac\n"
        'echo "$q" >>"$here/calls"\n'
        'if [ -f "$here/$q.sleep" ]; then sleep "$(cat "$here/$q.sleep")"; fi\n'
        'if [ -f "$here/reads-stdin" ]; then cat; fi\n'
        'cat "$here/$q.out"\n'
        'cat "$here/$q.err" >&2\n'
        'exit "$(cat "$here/$q.rc")"\n'
    )
    script.chmod(0o755)
    return script


def nvidia_smi_calls(bin_dir: Path) -> list[str]:
    """The queries FakeNvidiaSmi in ``bin_dir`` was asked, in order ("main", "uuid",
    "names", "unexpected")."""
    return (bin_dir / "nvidia-smi-answers" / "calls").read_text().split()


_VISIBLE = '''
import json as _json
import os as _os

with open(_os.path.join(_os.path.dirname(__file__), "gpus.json")) as _f:
    _ALL = _json.load(_f)  # every GPU of the host, in CUDA's order


def _visible():
    """The GPUs CUDA shows under CUDA_VISIBLE_DEVICES, by CUDA's rules."""
    value = _os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return list(_ALL)
    shown = []
    for entry in value.split(","):
        entry = entry.strip()
        if entry.startswith("GPU-"):
            found = [g for g in _ALL if g["uuid"].startswith(entry)]
            if len(found) != 1:
                break
            gpu = found[0]
        else:
            digits = ""
            for char in entry:
                if not char.isdigit():
                    break
                digits += char
            if not digits or int(digits) >= len(_ALL):
                break
            gpu = _ALL[int(digits)]
        if gpu in shown:
            return []
        shown.append(gpu)
    return shown
'''

_TORCH = (
    '"""StubTorch: the GPUs of gpus.json as CUDA shows them, for sm120patch tests; not PyTorch."""\n'
    "import types\n"
    + _VISIBLE
    + """
__version__ = "0.0-stub"
version = types.SimpleNamespace(cuda="12.9")


def _gpu(i):
    shown = _visible()
    if not 0 <= i < len(shown):
        raise RuntimeError("CUDA error: invalid device ordinal")
    return shown[i]


cuda = types.SimpleNamespace(
    is_available=lambda: bool(_visible()),
    device_count=lambda: len(_visible()),
    get_device_capability=lambda i=0: tuple(_gpu(i)["capability"]),
    get_device_name=lambda i=0: _gpu(i)["name"],
    get_device_properties=lambda i=0: types.SimpleNamespace(
        name=_gpu(i)["name"], major=_gpu(i)["capability"][0], minor=_gpu(i)["capability"][1],
        uuid=_gpu(i)["uuid"][len("GPU-"):],
    ),
    can_device_access_peer=lambda i, j: _gpu(i) is not None and _gpu(j) is not None,
)
"""
)

_DRIVER = """

class CUresult(enum.Enum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_DEVICE = 101


class CUdevice_attribute(enum.Enum):
    CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 132
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED = 119


def cuInit(flags):
    return (CUresult.CUDA_SUCCESS,)


def cuDeviceGetCount():
    return CUresult.CUDA_SUCCESS, len(_visible())


def cuDeviceGet(i):
    return CUresult.CUDA_SUCCESS, i


def cuDeviceGetAttribute(attr, device):
    gpu = _visible()[device]
    if attr is CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED:
        return CUresult.CUDA_SUCCESS, gpu["multicast"]
    return CUresult.CUDA_SUCCESS, gpu["gdr_vmm"]
"""


def stub_torch(
    root: Path,
    gpus: list[FakeGpu],
    alloc_names: tuple[str, ...] | None = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"),
    driver: bool = True,
) -> Path:
    """StubTorch (and StubDriver unless ``driver`` is False) under ``root``, over ``gpus``;
    ``torch/lib/libc10.so`` holds ``alloc_names`` as NUL-terminated literals (None: no
    library at all).  Returns ``root``, to put on the serving interpreter's path."""
    data = [
        {
            "name": g.name,
            "capability": list(g.capability),
            "uuid": uuid_of(g, i),
            "multicast": g.multicast,
            "gdr_vmm": g.gdr_vmm,
        }
        for i, g in enumerate(gpus)
    ]
    package = root / "torch"
    package.mkdir(parents=True, exist_ok=True)
    (package / "gpus.json").write_text(json.dumps(data))
    (package / "__init__.py").write_text(_TORCH)
    if alloc_names is not None:
        (package / "lib").mkdir(exist_ok=True)
        blob = b"\x7fELF stub c10\x00" + b"".join(n.encode() + b"\x00" for n in alloc_names) + b"other\x00"
        (package / "lib" / "libc10.so").write_bytes(blob)
    if driver:
        bindings = root / "cuda" / "bindings"
        bindings.mkdir(parents=True, exist_ok=True)
        (root / "cuda" / "__init__.py").write_text("")
        (bindings / "__init__.py").write_text("")
        driver_source = _VISIBLE.replace(
            '_os.path.join(_os.path.dirname(__file__), "gpus.json")',
            '_os.path.join(_os.path.dirname(_os.path.dirname(_os.path.dirname(__file__))), "torch", "gpus.json")',
        )
        (bindings / "driver.py").write_text(
            '"""StubDriver: cuda.bindings.driver over torch/gpus.json as CUDA shows it; for sm120patch tests."""\n'
            "import enum\n" + driver_source + _DRIVER
        )
    return root


def serving_python(directory: Path, *paths: Path, env: dict[str, str] | None = None, body: str = "") -> str:
    """A ``python`` that runs this interpreter with ``paths`` first on ``sys.path`` and
    ``env`` exported: the serving interpreter.  ``body``: shell lines run before it instead
    (to print bytes of one's own, hang, ...)."""
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / "python"
    path = ":".join(str(p) for p in paths)
    exports = "".join(f"export {k}='{v}'\n" for k, v in (env or {}).items())
    exe.write_text(
        "#!/bin/sh\n"
        "# the serving interpreter (sm120patch tests): this python with the stubs first on its path\n"
        f"{exports}{body}\n"
        f'PYTHONPATH="{path}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n'
    )
    exe.chmod(0o755)
    return str(exe)
