"""How a role find follows a name to the module that binds it (plan/role_find.py): module
files as an importer names them (absolute ``sglang.``, relative, a package's ``__init__``),
and ``from X import name [as alias]`` followed hop by hop, on small packages written here."""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120patch.patcher.plan.role_find import Package, binding_module
from sm120patch.sglang.tree import from_directory

FLAG = "_is_sm100_supported = _is_cuda and is_sm100_supported()\n"


def package(tmp_path: Path, files: dict[str, str]) -> Package:
    root = tmp_path / "site" / "sglang"
    for rel, text in {"__init__.py": "", "version.py": '__version__ = "0.5.24"\n', **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return Package(from_directory(root))


@pytest.mark.parametrize(
    ("dotted", "found"),
    [
        ("sglang.srt.utils", "srt/utils.py"),
        ("sglang.srt.layers", "srt/layers/__init__.py"),
        (".flags", "srt/layers/flags.py"),
        ("..utils", "srt/utils.py"),
        ("..layers.flags", "srt/layers/flags.py"),
        (".Xflags", "srt/layers/Xflags.py"),
        (".", "srt/layers/__init__.py"),
        ("torch.cuda", None),
        ("sglang.srt.gone", None),
        (".gone", None),
    ],
)
def test_a_module_file_is_found_as_its_importer_names_it(tmp_path: Path, dotted: str, found: str | None) -> None:
    files = {"srt/utils.py": "", "srt/layers/__init__.py": "", "srt/layers/flags.py": "", "srt/layers/gate.py": ""}
    files["srt/layers/Xflags.py"] = ""  # starts with an X: only the dots before it are stripped
    assert package(tmp_path, files).module_file(dotted, "srt/layers/gate.py") == found


def test_a_name_assigned_here_is_bound_here(tmp_path: Path) -> None:
    found = package(tmp_path, {"srt/layers/gate.py": FLAG})
    assert binding_module(found, "srt/layers/gate.py", "_is_sm100_supported") == "srt/layers/gate.py"


@pytest.mark.parametrize(
    "line",
    [
        "from sglang.srt.layers.flags import _is_sm100_supported as sm100\n",
        "from .flags import _is_sm100_supported as sm100\n",
    ],
)
def test_an_alias_is_followed_to_the_module_that_assigns_the_name(tmp_path: Path, line: str) -> None:
    found = package(tmp_path, {"srt/layers/gate.py": "import os\n" + line, "srt/layers/flags.py": FLAG})
    assert binding_module(found, "srt/layers/gate.py", "sm100") == "srt/layers/flags.py"


def test_a_re_export_is_followed_hop_by_hop(tmp_path: Path) -> None:
    files = {
        "srt/layers/gate.py": "from sglang.srt.layers import _is_sm100_supported\n",
        "srt/layers/__init__.py": "from ..flags import _is_sm100_supported\n",
        "srt/flags.py": "x = 1\n" + FLAG,
    }
    assert binding_module(package(tmp_path, files), "srt/layers/gate.py", "_is_sm100_supported") == "srt/flags.py"


@pytest.mark.parametrize(
    "files",
    [
        {"srt/layers/gate.py": "x = 1\n"},  # bound nowhere
        {"srt/layers/gate.py": "from torch.cuda import _is_sm100_supported\n"},  # not sglang's
        {"srt/layers/gate.py": "from sglang.srt.gone import _is_sm100_supported\n"},  # no such module
        {"srt/layers/gate.py": "from .other import something_else\n", "srt/layers/other.py": FLAG},  # another name
        {"srt/layers/gate.py": "def (:\n"},  # does not parse
        {  # a cycle: given up after a few hops
            "srt/layers/gate.py": "from .other import _is_sm100_supported\n",
            "srt/layers/other.py": "from .gate import _is_sm100_supported\n",
        },
    ],
    ids=["nowhere", "not-sglang", "no-module", "another-name", "unparsable", "cycle"],
)
def test_a_name_that_leads_nowhere_has_no_binding_module(tmp_path: Path, files: dict[str, str]) -> None:
    assert binding_module(package(tmp_path, files), "srt/layers/gate.py", "_is_sm100_supported") is None


def test_each_module_is_read_and_parsed_once_and_its_parse_is_shared_only_for_the_same_bytes(tmp_path: Path) -> None:
    found = package(tmp_path, {"srt/layers/gate.py": FLAG})
    first = found.parse("srt/layers/gate.py")
    assert first is not None and found.parse("srt/layers/gate.py") is first
    data = found.text("srt/layers/gate.py")
    assert data == FLAG.encode() and found.parsed("srt/layers/gate.py", data) is first
    assert found.parsed("srt/layers/gate.py", data + b"\n") is None
    assert found.parsed("srt/layers/flags.py", b"") is None  # never read
    assert found.text("srt/missing.py") is None and found.parse("srt/missing.py") is None
