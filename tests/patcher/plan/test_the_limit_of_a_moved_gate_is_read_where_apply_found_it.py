"""plan/token_limit.sglang_sites on a release that moved the fusion gate (and its token limit)
out of communicator.py into a module no layout names: once apply found it there by role and
lowered the limit, sglang's own limit is read from that module's backup, the one in force from
that module, not from communicator.py, which is still there but has no limit."""

from __future__ import annotations

from pathlib import Path

from sm120patch.patcher.patches.fusion_token_limit import LIMIT_NAME
from sm120patch.patcher.plan.token_limit import sglang_sites
from sm120patch.sglang.tree import from_directory
from tests.support.cli import jrun
from tests.support.mini_sglang import COMM, FILES, write_mini_sglang

MOVED = "srt/layers/fusion_gate.py"
GATE = (
    "from sglang.srt.layers.communicator import _is_sm90_supported, _is_sm100_supported\n\n"
    f"{LIMIT_NAME} = 2048\n\n\n"
    "def use_flashinfer_allreduce_fusion(batch_size: int):\n"
    "    return (\n"
    "        (_is_sm90_supported or _is_sm100_supported)\n"
    f"        and batch_size <= {LIMIT_NAME}\n"
    "    )\n"
)


def test_sglangs_own_limit_is_read_from_the_module_the_gate_moved_to(tmp_path: Path) -> None:
    flags_only = FILES[COMM].split("\n\ndef apply_flashinfer_allreduce_fusion")[0] + "\n"
    package = write_mini_sglang(tmp_path / "site", files={**FILES, COMM: flags_only, MOVED: GATE})
    code, data = jrun("apply", "--sglang-path", str(package), "--fuse-up-to", "512")
    limit = next(p for p in data["patches"] if p["id"] == "fusion-token-limit")
    assert (code, limit["found_by"], limit["found_at"]) == (0, "role", f"sglang/{MOVED}: {LIMIT_NAME}")
    tree = from_directory(package)
    shipped, in_force = sglang_sites(tree), sglang_sites(tree, shipped=False)
    assert shipped is not None and [site.value for site in shipped] == [2048]
    assert in_force is not None and [site.value for site in in_force] == [512]
