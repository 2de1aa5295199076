"""static_names: "does ``sglang.x.y`` define N?" answered from the source, never by importing
sglang.  The trees are small packages written under ``tmp_path`` (no fakes needed).

A file that does not parse tells which path gave an answer: the text alone may say "yes"
(a column-0 ``def``/assignment, here or behind a star import), every other answer needs the
parse, which refuses such a file.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sm120patch.errors import EnvironmentProblem, NotAsAsked
from sm120patch.sglang import static_names
from sm120patch.sglang.static_names import _exports, _parse, _resolve_relative, _text, defines, module_file

BROKEN = "\ndef (:\n"  # appended: the file no longer parses


def package(root: Path, files: dict[str, str]) -> Path:
    """An ``sglang`` package under ``root`` holding ``files`` (paths relative to it)."""
    pkg = root / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for rel, text in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pkg


# --- module_file ------------------------------------------------------------------------------


def test_module_file_finds_a_package_before_a_module_of_the_same_name(tmp_path: Path) -> None:
    pkg = package(tmp_path, {"srt/utils/__init__.py": "", "srt/utils.py": "", "srt/__init__.py": "", "a.py": ""})
    assert module_file(pkg, "sglang.srt.utils") == pkg / "srt/utils/__init__.py"
    assert module_file(pkg, "sglang.a") == pkg / "a.py"
    assert module_file(pkg, "sglang") == pkg / "__init__.py"


def test_module_file_outside_the_package_or_missing_is_none(tmp_path: Path) -> None:
    pkg = package(tmp_path, {"a.py": ""})
    assert module_file(pkg, "torch.a") is None
    assert module_file(pkg, "sglang.b") is None
    (pkg / "d").mkdir()  # a directory without __init__.py is no module
    assert module_file(pkg, "sglang.d") is None


# --- reading ----------------------------------------------------------------------------------


def test_a_file_that_cannot_be_read_is_an_environment_problem(tmp_path: Path) -> None:
    missing = tmp_path / "gone.py"
    with pytest.raises(EnvironmentProblem) as text_error:
        _text(missing, 1)
    assert str(text_error.value) == f"{missing}: cannot read (No such file or directory)"
    with pytest.raises(EnvironmentProblem) as parse_error:
        _parse(missing, 1)
    assert str(parse_error.value) == f"{missing}: cannot read (No such file or directory)"


def test_a_file_that_does_not_parse_is_not_guessed_at(tmp_path: Path) -> None:
    pkg = package(tmp_path, {"a.py": "x = 1\ny = (\n"})
    with pytest.raises(NotAsAsked) as error:
        defines(pkg, "sglang.a", "z")
    assert str(error.value).startswith(f"{pkg / 'a.py'}:2: does not parse (")
    assert str(error.value).endswith(
        "); sglang's own module is damaged or was edited by hand, so what it defines cannot be told"
    )


def test_source_that_ast_refuses_with_a_value_error_is_not_as_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pythons before 3.11.4 raise ValueError, not SyntaxError, for null bytes in the source."""
    path = tmp_path / "a.py"
    path.write_bytes(b"x = 1\0\n")

    def refuse(source: bytes, filename: str) -> None:
        raise ValueError("source code string cannot contain null bytes")

    monkeypatch.setattr(static_names.ast, "parse", refuse)
    with pytest.raises(NotAsAsked) as error:
        _parse(path, 12345)
    assert str(error.value) == f"{path}: cannot be read as Python source (source code string cannot contain null bytes)"


def test_an_edited_module_is_read_again(tmp_path: Path) -> None:
    pkg = package(tmp_path, {"a.py": "def name():\n    pass\n"})
    assert defines(pkg, "sglang.a", "name")
    (pkg / "a.py").write_text("def other():\n    pass\n")
    os.utime(pkg / "a.py", ns=(10**18, 10**18))
    assert not defines(pkg, "sglang.a", "name")


def test_an_edited_module_that_needs_the_parse_is_parsed_again(tmp_path: Path) -> None:
    # "from os import name" is no column-0 definition: both answers come from the parse.
    pkg = package(tmp_path, {"a.py": "from os import name\n"})
    assert defines(pkg, "sglang.a", "name")
    (pkg / "a.py").write_text("from os import other\n")
    os.utime(pkg / "a.py", ns=(10**18, 10**18))
    assert not defines(pkg, "sglang.a", "name")


def test_an_edited_all_is_read_again(tmp_path: Path) -> None:
    pkg = package(tmp_path, {"a.py": "from sglang.b import *\n", "b.py": "def name():\n    pass\n"})
    b = pkg / "b.py"
    steps = [("", True), ("__all__ = ['name']\n", True), ("__all__ = ['other']\n", False)]
    for ns, (all_line, exported) in enumerate(steps, start=1):
        b.write_text(all_line + "def name():\n    pass\n")
        os.utime(b, ns=(ns * 10**18, ns * 10**18))
        assert defines(pkg, "sglang.a", "name") is exported, all_line


# --- the quick "yes" from the text --------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    ["def name(x):", "async def name():", "async\tdef name():", "class name:", "name = 1", "name: int = 1", "name=1"],
)
def test_a_column_0_definition_is_a_yes_even_where_the_file_does_not_parse(tmp_path: Path, line: str) -> None:
    pkg = package(tmp_path, {"a.py": f"import os\n{line}\n" + BROKEN})
    assert defines(pkg, "sglang.a", "name")


@pytest.mark.parametrize(
    "line",
    ["def name_other():", "class names:", "name == 1", "namex = 1", "    name = 1", "other_name = 1"],
)
def test_what_only_looks_like_a_definition_goes_to_the_parse(tmp_path: Path, line: str) -> None:
    pkg = package(tmp_path, {"a.py": f"{line}\n" + BROKEN})
    with pytest.raises(NotAsAsked):
        defines(pkg, "sglang.a", "name")


def test_a_star_import_found_in_the_text_is_a_yes_where_the_file_does_not_parse(tmp_path: Path) -> None:
    pkg = package(
        tmp_path,
        {
            "srt/__init__.py": "",
            "srt/utils/__init__.py": "from os.path import *\nfrom .missing import *\nfrom .common import *\n" + BROKEN,
            "srt/utils/common.py": "def is_sm120_supported():\n    return True\n",
            "srt/flat.py": "from sglang.srt.utils.common import *\n" + BROKEN,
            "srt/sibling.py": "from .utils.common import *\n" + BROKEN,
            "srt/deep/inner.py": "  from ..utils.common import *\n" + BROKEN,
            "srt/deep/__init__.py": "",
        },
    )
    assert defines(pkg, "sglang.srt.utils", "is_sm120_supported")
    assert defines(pkg, "sglang.srt.flat", "is_sm120_supported")
    assert defines(pkg, "sglang.srt.sibling", "is_sm120_supported")
    assert defines(pkg, "sglang.srt.deep.inner", "is_sm120_supported")


def test_a_star_import_of_a_name_left_out_of_all_needs_the_parse(tmp_path: Path) -> None:
    pkg = package(
        tmp_path,
        {
            "a.py": "from sglang.b import *\n" + BROKEN,
            "b.py": "__all__ = ['other']\ndef name():\n    pass\n",
        },
    )
    with pytest.raises(NotAsAsked):
        defines(pkg, "sglang.a", "name")


# --- the parse --------------------------------------------------------------------------------

BINDS = [
    "if X:\n    def name():\n        pass\n",
    "if X:\n    async def name():\n        pass\n",
    "if X:\n    class name:\n        pass\n",
    "if X:\n    pass\nelse:\n    name = 1\n",
    "if X:\n    pass\nelif Y:\n    name = 1\n",
    "try:\n    name = 1\nexcept ImportError:\n    pass\n",
    "try:\n    import os\nexcept ImportError:\n    name = None\n",
    "try:\n    import os\nexcept ImportError:\n    pass\nelse:\n    name = 1\n",
    "try:\n    import os\nfinally:\n    name = 1\n",
    "if X:\n    a = name = 1\n",
    "if X:\n    name: int = 1\n",
    "if X:\n    import name\n",
    "if X:\n    import name.sub\n",
    "if X:\n    import os as name\n",
    "if X:\n    from os import name\n",
    "if X:\n    from os import path as name\n",
    # bound before a block: the block's statements are added to what came before it
    "from os import name\nif X:\n    pass\n",
    "from os import name\ntry:\n    pass\nexcept ImportError:\n    pass\n",
]
NO_BINDING = [
    "def f():\n    name = 1\n",
    "class C:\n    name = 1\n",
    "while X:\n    name = 1\n",
    "for x in y:\n    name = 1\n",
    "with X:\n    name = 1\n",
    "if X:\n    x.name = 1\n",
    "if X:\n    x.name: int = 1\n",
    "if X:\n    x[name] = 1\n",
    "if X:\n    import name as other\n",
    "if X:\n    import os.name\n",
    "if X:\n    from os import name as other\n",
    "if X:\n    print(name)\n",
    "def name_of():\n    pass\n",
]


@pytest.mark.parametrize("source", BINDS)
def test_import_time_bindings_are_found(tmp_path: Path, source: str) -> None:
    pkg = package(tmp_path, {"a.py": source})
    assert defines(pkg, "sglang.a", "name"), source


@pytest.mark.parametrize("source", NO_BINDING)
def test_what_binds_the_name_later_or_elsewhere_is_not_a_definition(tmp_path: Path, source: str) -> None:
    pkg = package(tmp_path, {"a.py": source})
    assert not defines(pkg, "sglang.a", "name"), source


def test_a_star_import_is_followed_in_the_parse(tmp_path: Path) -> None:
    """``name`` appears in the importing file (a comment), so only the parse follows the import."""
    pkg = package(
        tmp_path,
        {
            "srt/__init__.py": "def name():\n    pass\n",
            "srt/abs.py": "# name comes from b\nfrom sglang.b import *\n",
            "srt/rel.py": "# name comes from b\nif X:\n    from ..b import *\n",
            "srt/here.py": "# name comes from the package\ntry:\n    from . import *\nexcept ImportError:\n    pass\n",
            "srt/pkg/__init__.py": "# name comes from its sibling\nfrom .mod import *\n",
            "srt/pkg/mod.py": "name = 1\n",
            "srt/inner.py": "# name\ndef f():\n    from sglang.b import *\n",
            "srt/outside.py": "# name\nfrom os.path import *\n",
            "b.py": "def name():\n    pass\n",
        },
    )
    assert defines(pkg, "sglang.srt.abs", "name")
    assert defines(pkg, "sglang.srt.rel", "name")
    assert defines(pkg, "sglang.srt.here", "name")
    assert defines(pkg, "sglang.srt.pkg", "name")
    assert not defines(pkg, "sglang.srt.inner", "name")  # not at import time
    assert not defines(pkg, "sglang.srt.outside", "name")  # not sglang's


def test_star_imports_that_import_each_other_end(tmp_path: Path) -> None:
    pkg = package(
        tmp_path,
        {
            "a.py": "from sglang.b import *\n",
            "b.py": "from sglang.a import *\n",
            "c.py": "# name\nfrom sglang.d import *\n",
            "d.py": "# name\nfrom sglang.c import *\n",
        },
    )
    assert not defines(pkg, "sglang.a", "name")
    assert not defines(pkg, "sglang.c", "name")
    assert not defines(pkg, "sglang.missing", "name")


@pytest.mark.parametrize(
    ("exporter", "name", "taken"),
    [
        ("def name():\n    pass\n", "name", True),
        ("def _name():\n    pass\n", "_name", False),  # private: a star import leaves it
        ("__all__ = ['name']\ndef name():\n    pass\n", "name", True),
        ("VERSION = '1'\n__all__ = ['name']\ndef name():\n    pass\n", "name", True),
        ("__all__ = ['other']\ndef name():\n    pass\n", "name", False),
        ("__all__ = names()\ndef name():\n    pass\n", "name", True),  # not a literal: taken
        ("__all__: list = []\n__all__ += ['other']\ndef name():\n    pass\n", "name", True),  # no plain __all__ =
        ("x.__all__ = ['other']\ndef name():\n    pass\n", "name", True),
    ],
    ids=[
        "public def",
        "private def",
        "__all__ names it",
        "__all__ after a constant",
        "__all__ leaves it out",
        "__all__ computed",
        "__all__ annotated and extended",
        "another object's __all__",
    ],
)
def test_a_star_import_takes_what_all_exports(tmp_path: Path, exporter: str, name: str, taken: bool) -> None:
    pkg = package(tmp_path, {"a.py": f"# {name}\nfrom sglang.b import *\n", "b.py": exporter})
    assert defines(pkg, "sglang.a", name) is taken
    assert _exports(pkg / "b.py", name) is taken


# --- relative imports -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("here", "is_package", "level", "module", "resolved"),
    [
        ("sglang.srt.utils", True, 1, "common", "sglang.srt.utils.common"),
        ("sglang.srt.utils", False, 1, "common", "sglang.srt.common"),
        ("sglang.srt.utils", True, 2, "common", "sglang.srt.common"),
        ("sglang.srt.layers.x", False, 2, "utils", "sglang.srt.utils"),
        ("sglang.srt.layers.x", False, 3, "utils", "sglang.utils"),
        ("sglang.srt", True, 1, None, "sglang.srt"),
        ("sglang.srt.x", False, 1, None, "sglang.srt"),
    ],
    ids=[
        "package .common",
        "module .common",
        "package ..common",
        "module ..utils",
        "module ...utils",
        "package .",
        "module .",
    ],
)
def test_resolve_relative(here: str, is_package: bool, level: int, module: str | None, resolved: str) -> None:
    assert _resolve_relative(here, is_package, level, module) == resolved
