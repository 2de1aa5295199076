"""imports: where a new name goes in an existing ``from ... import``, and how it is laid out."""

from __future__ import annotations

import libcst as cst
import pytest

from sm120patch.patcher.kit.cst_helpers import without_comment
from sm120patch.patcher.kit.imports import find_import_site, insert_after

UTILS = ("sglang.srt.utils", "sglang.srt.utils.common")
NEW = "is_sm120_supported"


def added(source: str, anchor: str | None = "is_sm100_supported") -> str:
    module = cst.parse_module(source)
    site = find_import_site(module, UTILS, anchor, NEW)
    assert site is not None
    return module.deep_replace(site.node, insert_after(site, NEW)).code


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            "from sglang.srt.utils import is_cuda, is_sm100_supported\n",
            "from sglang.srt.utils import is_cuda, is_sm100_supported, is_sm120_supported\n",
        ),
        (
            "from sglang.srt.utils import is_sm100_supported, is_cuda\n",
            "from sglang.srt.utils import is_sm100_supported, is_sm120_supported, is_cuda\n",
        ),
        (
            "from sglang.srt.utils import (\n    is_cuda,\n    is_sm100_supported,\n)\n",
            "from sglang.srt.utils import (\n    is_cuda,\n    is_sm100_supported,\n    is_sm120_supported,\n)\n",
        ),
        (  # the last name without a trailing comma stays without one
            "from sglang.srt.utils import (is_cuda,\n    is_sm100_supported)\n",
            "from sglang.srt.utils import (is_cuda,\n    is_sm100_supported,\n    is_sm120_supported)\n",
        ),
        (  # the anchor's comment stays on the anchor's line, once
            "from sglang.srt.utils import (\n    is_cuda,\n    is_sm100_supported,  # dc\n    log_info,\n)\n",
            "from sglang.srt.utils import (\n    is_cuda,\n    is_sm100_supported,  # dc\n    is_sm120_supported,\n"
            "    log_info,\n)\n",
        ),
        (  # a block of one on one line: a space, as between any two names
            "from sglang.srt.utils import (is_sm100_supported)\n",
            "from sglang.srt.utils import (is_sm100_supported, is_sm120_supported)\n",
        ),
        (
            "from sglang.srt.utils import is_sm100_supported\n",
            "from sglang.srt.utils import is_sm100_supported, is_sm120_supported\n",
        ),
        (  # a block of one over lines: the opening parenthesis' line break and indent
            "from sglang.srt.utils import (\n    is_sm100_supported\n)\n",
            "from sglang.srt.utils import (\n    is_sm100_supported,\n    is_sm120_supported\n)\n",
        ),
        (
            "from sglang.srt.utils import (\n    is_sm100_supported,\n)\n",
            "from sglang.srt.utils import (\n    is_sm100_supported,\n    is_sm120_supported,\n)\n",
        ),
        (  # the separator is the first comma's, and an anchor sharing its line keeps it shared
            "from sglang.srt.utils import (\n    a,\n    is_sm100_supported, b,\n)\n",
            "from sglang.srt.utils import (\n    a,\n    is_sm100_supported, is_sm120_supported, b,\n)\n",
        ),
        (
            "from sglang.srt.utils import (\n    a, b,\n    is_sm100_supported\n)\n",
            "from sglang.srt.utils import (\n    a, b,\n    is_sm100_supported, is_sm120_supported\n)\n",
        ),
    ],
    ids=[
        "one line",
        "anchor first",
        "block",
        "no trailing comma",
        "anchor's comment",
        "block of one on one line",
        "one name",
        "block of one over lines",
        "block of one with its comma",
        "anchor sharing its line",
        "names sharing a line",
    ],
)
def test_the_name_goes_right_after_the_anchor_in_the_blocks_own_layout(before: str, after: str) -> None:
    assert added(before) == after


def test_an_aliased_anchor_a_function_local_import_or_another_module_is_no_site() -> None:
    for source in (
        "from sglang.srt.utils import is_sm100_supported as sm100\n",
        "def f():\n    from sglang.srt.utils import is_sm100_supported\n",
        "from sglang.srt.layers.utils import is_sm100_supported\n",
        "from sglang.srt.utils import *\n",
    ):
        assert find_import_site(cst.parse_module(source), UTILS, "is_sm100_supported", NEW) is None, source


def test_an_import_under_a_module_level_if_is_a_site_with_its_source() -> None:
    module = cst.parse_module("if True:\n    from sglang.srt.utils.common import is_cuda, is_sm100_supported\n")
    site = find_import_site(module, UTILS, "is_sm100_supported", NEW)
    assert site is not None and site.source == "sglang.srt.utils.common"


def test_without_an_anchor_the_name_follows_the_last_name_sorting_before_it() -> None:
    assert (
        added("from sglang.srt.utils import ceil_align, get_bindings, log_info\n", anchor=None)
        == "from sglang.srt.utils import ceil_align, get_bindings, is_sm120_supported, log_info\n"
    )
    # Nothing sorts before it: it goes last.
    assert (
        added("from sglang.srt.utils import x_a, y_b\n", anchor=None)
        == "from sglang.srt.utils import x_a, y_b, is_sm120_supported\n"
    )


def test_without_comment_drops_the_comment_and_blank_lines_but_keeps_the_indent() -> None:
    module = cst.parse_module("x = (a  # note\n\n    or b)\n")
    operator = module.body[0].body[0].value.operator
    plain = without_comment(operator.whitespace_before)
    assert isinstance(plain, cst.ParenthesizedWhitespace)
    assert plain.first_line.comment is None and plain.empty_lines == ()
    assert plain.last_line == operator.whitespace_before.last_line
    simple = cst.SimpleWhitespace(" ")
    assert without_comment(simple) is simple


def test_without_an_anchor_a_star_import_is_passed_over_and_equal_names_do_not_sort_before() -> None:
    module = cst.parse_module("from sglang.srt.utils import *\nfrom sglang.srt.utils import a, is_sm120_supported, z\n")
    site = find_import_site(module, UTILS, None, NEW)
    assert site is not None and site.source == "sglang.srt.utils"
    assert site.node is module.body[1].body[0] and site.anchor.name.value == "a"


def test_the_first_import_of_the_anchor_is_the_site() -> None:
    module = cst.parse_module(
        "from sglang.srt.utils import is_cuda\n"
        "from sglang.srt.utils.common import is_sm100_supported\n"
        "from sglang.srt.utils import is_sm100_supported\n"
    )
    site = find_import_site(module, UTILS, "is_sm100_supported", NEW)
    assert site is not None and site.source == "sglang.srt.utils.common" and site.node is module.body[1].body[0]
