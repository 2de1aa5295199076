"""scripts/sm120_emulation: on a Hopper GPU, only the modules sm120patch patches see SM120.

The sglang here is a small package written like 0.5.13's (``lru_cache(partial(...))`` checks in
``utils/common.py`` re-exported by ``utils/__init__.py``; flags cached at import time in
``communicator.py``; server_args calling the checks at run time). Its one fake is
``FakeH200``: the compute capability torch would report, (9, 0).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.offline  # each test starts processes: the slow tier (tests/conftest.py)

EMULATION = Path(__file__).resolve().parents[1] / "scripts" / "sm120_emulation"

COMMON = """
from functools import lru_cache, partial

FAKE_H200_CAPABILITY = (9, 0)  # FakeH200: what torch.cuda.get_device_capability() would say


def _check_cuda_device_version(device_capability_majors, cuda_version):
    return FAKE_H200_CAPABILITY[0] in device_capability_majors


def is_cuda():
    return True


is_blackwell_supported = is_blackwell = lru_cache(maxsize=1)(
    partial(_check_cuda_device_version, device_capability_majors=[10, 11, 12], cuda_version=(12, 8))
)
is_sm120_supported = lru_cache(maxsize=1)(
    partial(_check_cuda_device_version, device_capability_majors=[12], cuda_version=(12, 8))
)
is_sm100_supported = lru_cache(maxsize=1)(
    partial(_check_cuda_device_version, device_capability_majors=[10], cuda_version=(12, 8))
)
is_sm90_supported = lru_cache(maxsize=1)(
    partial(_check_cuda_device_version, device_capability_majors=[9], cuda_version=(12, 3))
)
"""

UNPATCHED_COMMUNICATOR = """
from sglang.srt.utils import is_cuda, is_sm90_supported, is_sm100_supported

_is_cuda = is_cuda()
_is_sm90_supported = _is_cuda and is_sm90_supported()
_is_sm100_supported = _is_cuda and is_sm100_supported()


def apply_flashinfer_allreduce_fusion(batch_size):
    return 0 < batch_size <= 2048 and (_is_sm90_supported or _is_sm100_supported)
"""

# As sm120patch leaves it: the import, the cached flag and the widened gate.
PATCHED_COMMUNICATOR = """
from sglang.srt.utils import is_cuda, is_sm90_supported, is_sm100_supported, is_sm120_supported

_is_cuda = is_cuda()
_is_sm90_supported = _is_cuda and is_sm90_supported()
_is_sm100_supported = _is_cuda and is_sm100_supported()
_is_sm120_supported = _is_cuda and is_sm120_supported()


def apply_flashinfer_allreduce_fusion(batch_size):
    return 0 < batch_size <= 2048 and (_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)
"""

SERVER_ARGS = """
from sglang.srt.utils import is_sm90_supported, is_sm100_supported


def auto_enable_fusion():
    return is_sm90_supported() or is_sm100_supported()
"""

ATTENTION = """
from sglang.srt.utils import is_sm90_supported

picks_fa3 = is_sm90_supported()
"""


def fake_sglang(root: Path, communicator: str) -> Path:
    files = {
        "__init__.py": "",
        "srt/__init__.py": "",
        "srt/utils/__init__.py": "from sglang.srt.utils.common import *\n",
        "srt/utils/common.py": COMMON,
        "srt/layers/__init__.py": "",
        "srt/layers/communicator.py": communicator,
        "srt/layers/attention.py": ATTENTION,
        "srt/server_args.py": SERVER_ARGS,
    }
    for rel, text in files.items():
        path = root / "sglang" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


PROBE = """
import json
import sglang.srt.utils as utils
from sglang.srt.layers import attention, communicator
from sglang.srt import server_args
print(json.dumps({
    "fused_at_1_token": communicator.apply_flashinfer_allreduce_fusion(1),
    "auto_enable": server_args.auto_enable_fusion(),
    "attention_sees_sm90": attention.picks_fa3,
    "utils_sees_sm90": utils.is_sm90_supported(),
}))
"""


def probe(site: Path, emulated: bool) -> tuple[dict[str, bool], str]:
    path = [str(EMULATION)] if emulated else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(site)])}
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def test_only_the_patched_gate_opens_under_emulation(tmp_path: Path) -> None:
    unpatched = fake_sglang(tmp_path / "unpatched", UNPATCHED_COMMUNICATOR)
    patched = fake_sglang(tmp_path / "patched", PATCHED_COMMUNICATOR)

    # Without the emulation, the H200's own SM90 gate fuses, patched or not.
    assert probe(unpatched, emulated=False)[0]["fused_at_1_token"] is True

    before, said = probe(unpatched, emulated=True)
    assert before == {
        "fused_at_1_token": False,  # an RTX PRO 6000 with sglang as released: no fusion
        "auto_enable": False,
        "attention_sees_sm90": True,  # what the patches do not touch sees the real GPU
        "utils_sees_sm90": True,
    }
    assert "[sm120 emulation] sglang.srt.layers.communicator: sees SM120" in said

    after, _ = probe(patched, emulated=True)
    assert after["fused_at_1_token"] is True
    assert (after["attention_sees_sm90"], after["utils_sees_sm90"]) == (True, True)


def test_a_gate_module_imported_before_sglangs_utils_still_sees_sm120(tmp_path: Path) -> None:
    site = fake_sglang(tmp_path, PATCHED_COMMUNICATOR)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EMULATION), str(site)])}
    code = "from sglang.srt.layers import communicator as c; print(c._is_sm90_supported, c._is_sm120_supported)"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["False", "True"], proc.stderr
