"""What a role find gives (plan/role_find.locate), called directly on the miniature release with
its targets moved or renamed: a find that is a known row is none; one find or a reason per
patch, the search going on past each; a method's class kept; a follower found from the row its
leader was found through (or its role find), only when its own rows call for it; a follow into
a file the layout table names is a known layout.  The plans made of these finds:
tests/patcher/plan/test_planner.py and tests/cli/test_role_find_on_mini.py."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import libcst
import pytest

from sm120patch.patcher.kit.model import FOUND_BY_ROLE, KNOWN_UP_TO, Anchor, Kind, Releases, State
from sm120patch.patcher.patches.fusion_token_limit import LIMIT_NAME
from sm120patch.patcher.plan.registry import by_id
from sm120patch.patcher.plan.role_find import Located, Package, calls_for_role, locate, search
from sm120patch.sglang.layout import ADD_NORM
from sm120patch.sglang.tree import from_directory
from tests.support.mini_sglang import COMM, FILES, SERVER_ARGS, write_mini_sglang

GATE_ID, FLAG_ID, IMPORT_ID = "communicator-fusion-gate", "communicator-flag", "communicator-import"
LIMIT_ID, AUTO_ID, RESOLVER_ID = "fusion-token-limit", "server-args-auto-enable", "fusion-backend-resolver"
FLAGS_FILE = "srt/layers/flags.py"
#: The gate's row in the miniature release (0.5.11), as the planner's leaders give it.
GATE_ROW = Anchor(COMM, "apply_flashinfer_allreduce_fusion", Releases("0.5.8", "0.5.20"))

_HEAD = "from sglang.srt.utils import is_cuda, is_sm90_supported, is_sm100_supported\n\n"
_FLAGS_HERE = (
    "_is_cuda = is_cuda()\n"
    "_is_sm90_supported = _is_cuda and is_sm90_supported()\n"
    "_is_sm100_supported = _is_cuda and is_sm100_supported()\n"
)
_TEST = (
    "    return (\n"
    "        (_is_sm90_supported or _is_sm100_supported)\n"
    "        and get_global_server_args().enable_flashinfer_allreduce_fusion\n"
    "        and {batch}\n"
    "    )\n"
)


def gate(name: str = GATE_ROW.name, flags: str = _FLAGS_HERE, batch: str = "batch_size > 0") -> str:
    """A communicator whose gate (a function the gate's role matches) is ``name``."""
    return f"{_HEAD}{flags}\n\ndef {name}(batch_size: int):\n" + _TEST.format(batch=batch)


def method(cls: str, name: str) -> str:
    """A class whose method ``name`` is a gate."""
    body = textwrap.indent(_TEST.format(batch="batch_size > 0"), "    ")
    return f"class {cls}:\n    def {name}(self, batch_size: int):\n{body}"


def flags_from(module: str, sm100: str = "_is_sm100_supported") -> str:
    return f"from {module} import _is_sm90_supported, {sm100}\n"


FLAGS_MODULE = _HEAD + _FLAGS_HERE
ALL_DRIFT = {pid: State.DRIFT for pid in by_id()}


def find(
    tmp_path: Path,
    files: Mapping[str, str],
    asks: Mapping[str, State],
    leaders: Mapping[str, Anchor] | None = None,
    version: str | None = "0.5.11",
) -> tuple[dict[str, Located], dict[str, str]]:
    package = write_mini_sglang(tmp_path / "site", files={**FILES, **files})
    return locate(Package(from_directory(package)), by_id().values(), asks, leaders or {}, version)


def what(pid: str) -> str:
    role = by_id()[pid].role
    assert role is not None
    return role.what


def test_a_find_that_is_a_known_row_is_no_find_and_the_search_goes_on(tmp_path: Path) -> None:
    """The gate, the auto-enable (a method) and the preflight each found where their rows are:
    none is a role find; the resolver after the gate (not in 0.5.11) still says why."""
    found, why = find(tmp_path, {COMM: gate()}, ALL_DRIFT)
    assert found == {}
    assert set(why) == {RESOLVER_ID} and why[RESOLVER_ID].startswith("no function in the package is")


def test_a_renamed_method_is_found_with_its_class_after_a_patch_found_nowhere(tmp_path: Path) -> None:
    adjust = FILES[SERVER_ARGS].replace("_handle_model_specific_adjustments", "_adjust")
    found, why = find(tmp_path, {SERVER_ARGS: adjust}, ALL_DRIFT)
    assert RESOLVER_ID in why  # found nowhere, and the search went on
    located = found[AUTO_ID]
    assert located.where == f"{SERVER_ARGS}:ServerArgs._adjust"
    (row,) = located.rows
    assert (row.file, row.cls, row.name, row.kind) == (SERVER_ARGS, "ServerArgs", "_adjust", Kind.FUNCTION)
    assert (row.found_by, row.note) == (FOUND_BY_ROLE, what(AUTO_ID))


def test_two_gates_are_no_find_and_the_reason_names_both(tmp_path: Path) -> None:
    other = FLAGS_MODULE + "\n\n" + method("Fuser", "ar_fusion_enabled")
    files = {COMM: gate("ar_fusion_enabled"), "srt/layers/other.py": other}
    found, why = find(tmp_path, files, ALL_DRIFT)
    assert GATE_ID not in found
    assert why[GATE_ID].startswith("2 functions ")
    assert f"({COMM}:ar_fusion_enabled, srt/layers/other.py:Fuser.ar_fusion_enabled)" in why[GATE_ID]
    assert RESOLVER_ID in why  # the search went on past the gate


@pytest.mark.parametrize(("version", "looked"), [("0.5.11", True), (None, False)])
def test_a_target_its_row_expects_changed_that_reads_not_needed_is_looked_for(
    tmp_path: Path, version: str | None, looked: bool
) -> None:
    """Nothing to change where the 0.5.11 row expects a change: the gate went elsewhere, so it
    is looked for (with no release known, "not needed" is taken as said)."""
    found, _ = find(tmp_path, {COMM: gate("ar_fusion_enabled")}, {GATE_ID: State.NOT_NEEDED}, version=version)
    assert (GATE_ID in found) is looked


def test_a_follower_of_a_gate_found_by_role_that_finds_nothing_says_from_where(tmp_path: Path) -> None:
    """The renamed gate compares the batch with no limit: the limit is not found from it."""
    found, why = find(tmp_path, {COMM: gate("ar_fusion_enabled")}, ALL_DRIFT)
    assert found[GATE_ID].where == f"{COMM}:ar_fusion_enabled"
    assert why[LIMIT_ID].endswith(f": not found from {COMM}:ar_fusion_enabled")


def test_flags_and_import_follow_a_gate_moved_into_a_method_of_a_class(tmp_path: Path) -> None:
    """The gate is now ``Fuser.ar`` (another class has an ``ar`` too) and reads its flags from
    another module: the flags and their import are found there, as role finds."""
    other = "\n\nclass Other:\n    def ar(self):\n        return 1\n"
    comm = f"{_HEAD}{flags_from('sglang.srt.layers.flags')}\n\n{method('Fuser', 'ar')}{other}"
    found, why = find(tmp_path, {COMM: comm, FLAGS_FILE: FLAGS_MODULE}, ALL_DRIFT)
    assert found[GATE_ID].where == f"{COMM}:Fuser.ar"
    flag = found[FLAG_ID]
    assert (flag.where, flag.known) == (f"{FLAGS_FILE}: _is_sm100_supported", False)
    assert [(r.file, r.name, r.kind, r.note) for r in flag.rows] == [
        (FLAGS_FILE, "_is_sm100_supported", Kind.ASSIGNMENT, what(FLAG_ID))
    ]
    imported = found[IMPORT_ID]  # after the limit, which is not found from the gate
    assert LIMIT_ID in why and (imported.where, imported.known) == (FLAGS_FILE, False)
    assert [(r.file, r.name, r.kind, r.note) for r in imported.rows] == [
        (FLAGS_FILE, "is_sm100_supported", Kind.IMPORT, what(IMPORT_ID))  # its rows' one name
    ]


LIMITED = {
    COMM: f"{LIMIT_NAME} = 2048\n"
    + gate(flags=flags_from("sglang.srt.layers.flags"), batch=f"batch_size <= {LIMIT_NAME}"),
    FLAGS_FILE: FLAGS_MODULE,
}


@pytest.mark.parametrize(
    "asks",
    [{FLAG_ID: State.DRIFT, LIMIT_ID: State.DRIFT}, {FLAG_ID: State.NOT_NEEDED}],
    ids=["drift", "not-needed"],
)
def test_flags_moved_from_a_gate_its_rows_found_are_found_where_they_went(
    tmp_path: Path, asks: dict[str, State]
) -> None:
    """The gate where its row is, its flags imported from another module: the flags (their
    rows finding nothing, or nothing to change where a change is expected) and, after the
    limit (where its rows know it, or not looked for), their import are found there; not a
    known layout."""
    found, _ = find(tmp_path, LIMITED, asks, {GATE_ID: GATE_ROW})
    assert {pid: (located.file, located.known) for pid, located in found.items()} == {
        FLAG_ID: (FLAGS_FILE, False),
        IMPORT_ID: (FLAGS_FILE, False),
    }


def test_a_follower_whose_rows_call_for_nothing_is_not_followed(tmp_path: Path) -> None:
    found, why = find(tmp_path, LIMITED, {FLAG_ID: State.APPLIED}, {GATE_ID: GATE_ROW})
    assert (found, why) == ({}, {})


def test_a_leader_row_naming_no_function_there_leads_nowhere(tmp_path: Path) -> None:
    gone = Anchor(COMM, "gone", GATE_ROW.seen)
    found, why = find(tmp_path, LIMITED, {FLAG_ID: State.DRIFT}, {GATE_ID: gone})
    assert (found, why) == ({}, {})


def test_flags_followed_into_a_file_the_layout_table_names_are_a_known_layout(tmp_path: Path) -> None:
    """The flags under another name in add_norm.py, which the table names for the gate from
    0.5.21: found from the gate's known row, so a known layout, not a role find."""
    dotted = "sglang." + ADD_NORM.removesuffix(".py").replace("/", ".")
    files = {
        COMM: gate(flags=flags_from(dotted, "_is_sm100")).replace("_is_sm100_supported)", "_is_sm100)"),
        ADD_NORM: FLAGS_MODULE.replace("_is_sm100_supported =", "_is_sm100 ="),
        "srt/layers/layer_boundary/__init__.py": "",
        "srt/layers/layer_boundary/residual/__init__.py": "",
    }
    found, _ = find(tmp_path, files, {FLAG_ID: State.DRIFT}, {GATE_ID: GATE_ROW})
    flag = found[FLAG_ID]
    assert (flag.file, flag.rows[0].name, flag.known) == (ADD_NORM, "_is_sm100", True)


def test_with_no_import_row_known_the_import_is_not_found_from_the_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SM120PATCH_KNOWN_UP_TO before every row: the import follows the flags with no name of
    its own to look for, so it says it found nothing there."""
    monkeypatch.setenv(KNOWN_UP_TO, "0.5.3")
    found, why = find(tmp_path, {COMM: gate("ar_fusion_enabled")}, ALL_DRIFT)
    assert FLAG_ID in found and IMPORT_ID not in found
    assert why[IMPORT_ID].endswith(f": not found from {COMM}: _is_sm100_supported")


def search_gates(tmp_path: Path, files: Mapping[str, str]) -> list[tuple[str, str | None, str]]:
    package = write_mini_sglang(tmp_path / "site", files={**FILES, **files})
    return search(Package(from_directory(package)), by_id()[GATE_ID])


def test_the_search_passes_over_an_unreadable_module_and_module_level_blocks(tmp_path: Path) -> None:
    """A module that cannot be read (a dangling link) is passed over; a function under a
    module-level ``if`` is not one the search looks at."""
    comm = gate("ar_fusion_enabled") + "\n\nif _is_cuda:\n" + textwrap.indent(gate("cuda_gate"), "    ")
    package = write_mini_sglang(tmp_path / "site", files={**FILES, COMM: comm})
    (package / "srt" / "dangling.py").symlink_to(package / "srt" / "gone.py")
    assert search(Package(from_directory(package)), by_id()[GATE_ID]) == [(COMM, None, "ar_fusion_enabled")]


def test_a_module_either_parser_refuses_is_not_searched_and_the_search_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fakes: Python's parser refuses the modules that say ``ast-refuses``, libcst those that
    say ``libcst-refuses`` (the two do not read quite the same sources: Python 3.11's refuses
    the 3.12 syntax libcst reads); a gate in either is not a find, and the search goes on to
    the gate in a later module."""
    real_ast, real_cst = ast.parse, libcst.parse_module

    def ast_parse(source: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(source, bytes) and b"ast-refuses" in source:
            raise SyntaxError("refused")
        return real_ast(source, *args, **kwargs)

    def cst_parse(source: Any, *args: Any, **kwargs: Any) -> libcst.Module:
        if isinstance(source, bytes) and b"libcst-refuses" in source:
            raise ValueError("refused")
        return real_cst(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", ast_parse)
    monkeypatch.setattr(libcst, "parse_module", cst_parse)
    files = {
        "srt/a.py": "# ast-refuses\n" + gate("a_gate"),
        "srt/b.py": "# libcst-refuses\n" + gate("b_gate"),
        COMM: gate("ar_fusion_enabled"),
    }
    assert search_gates(tmp_path, files) == [(COMM, None, "ar_fusion_enabled")]


def test_only_a_patch_with_a_role_calls_for_a_role_find() -> None:
    """A drifted patch with a role asks for a role find; one without (a patch a fork adds to the
    registry, say) has nothing to find by, and asks for none."""
    gate = by_id()["communicator-fusion-gate"]
    roleless = type("RolelessGate", (type(gate),), {"role": None})()
    assert calls_for_role(gate, State.DRIFT, "0.5.11")
    assert not calls_for_role(roleless, State.DRIFT, "0.5.11")
