"""``exports.gate_modules`` of a package path that is no folder (a file where sglang was
expected): no saved state is read there, and the modules are every layout known."""

from __future__ import annotations

from pathlib import Path

from sm120patch.patcher.exports import gate_modules
from sm120patch.sglang.layout import GATE, files_keeping, module_name


def test_a_file_for_a_package_reads_no_state_and_gives_every_known_layout(tmp_path: Path) -> None:
    package = tmp_path / "sglang"
    package.write_text("not a package\n")
    assert gate_modules(package) == tuple(dict.fromkeys(module_name(rel) for rel in files_keeping(GATE)))
