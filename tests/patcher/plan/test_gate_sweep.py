"""The sweep's reading of one file (plan/gate_sweep.py): which expressions are SM checks, which
admit SM12x, what is on the fused path, and what the known list matches."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import NoReturn

import libcst as cst
import pytest

from sm120patch.patcher.kit import sm_terms
from sm120patch.patcher.kit.model import State
from sm120patch.patcher.plan import gate_sweep
from sm120patch.patcher.plan.gate_sweep import checks_in, on_path, prefiltered
from sm120patch.patcher.plan.types import FilePlan, PatchReport, Plan
from sm120patch.sglang.fusion_path import KNOWN_GATES
from sm120patch.sglang.tree import from_directory

COMM = "srt/layers/flashinfer_comm_fusion.py"


def found(source: str, rel: str = COMM) -> list[tuple[int, str, str]]:
    checks = checks_in(rel, textwrap.dedent(source).encode())
    assert not isinstance(checks, str)
    return [(c.line, c.function, c.expression) for c in checks]


@pytest.mark.parametrize("spelling", sm_terms.SPELLINGS, ids=lambda s: s.name)
def test_each_spelling_the_patches_match_is_read_alike(spelling: sm_terms.Spelling) -> None:
    """The sweep reads the standard library's tree: for every spelling the patches match, it
    sees the same architecture, and the SM120 term the patches add reads as admitting SM12x."""
    node = cst.parse_expression(spelling.example)
    term = sm_terms.sm_term_of(node)
    assert term is not None
    widened = cst.Module([]).code_for_node(spelling.sm120(node))  # type: ignore[arg-type]
    assert found(f"def allreduce_fusion_ok():\n    return {spelling.example}\n") == [
        (2, "allreduce_fusion_ok", spelling.example)
    ]
    assert found(f"def allreduce_fusion_ok():\n    return {spelling.example} or {widened}\n") == []
    assert gate_sweep._terms(compile_expr(spelling.example))[0] == {term.arch}


def compile_expr(text: str) -> object:
    import ast

    return ast.parse(text, mode="eval").body


GATE_TESTS = [
    ("major == 10", True),
    ("major != 10", True),
    ("torch.cuda.get_device_capability() in [(9, 0), (10, 0)]", True),
    ("torch.cuda.get_device_capability() in [(9, 0), (10, 0), (12, 0)]", False),
    ("torch.cuda.get_device_capability() >= (9, 0)", False),
    ("get_device_sm() >= 90", False),
    ("get_device_sm() == 100", True),
    ("major == 12", False),
    ("TABLE.get((torch.cuda.get_device_capability(), tp))", True),
    ("x == 10", False),  # not the capability
    ("is_blackwell()", False),  # admits SM12x already
    ("_is_sm100_supported and not _is_sm120_supported", False),  # names SM12x
    ("torch.cuda.get_device_capability()[0] < 10", False),  # alone: which way is the statement's
    ("(9, 0) <= torch.cuda.get_device_capability() < (11, 0)", True),  # a chain: both links
    ("(9, 0) <= torch.cuda.get_device_capability() < (13, 0)", False),
    ("90 <= get_device_sm() < 120", True),  # the constant on the left
    ("torch.cuda.get_device_capability()[0] >= 9 and torch.cuda.get_device_capability()[0] < 11", True),
    ("major >= 9 and x", False),
    ("major >= 9 and major <= 12", False),  # passes on SM12x; the rest is not about the GPU
    ("x or major == 10", True),  # SM12x only where something else is true
    ("major == 10 or major >= 12", False),
    ("(10, 0) <= torch.cuda.get_device_capability() <= (12, 0)", False),  # up to and including SM120
    ("90 <= get_device_sm() <= 120", False),  # the constant at SM scale: SM120 is 120
    ("20 <= get_device_sm() < 130", False),  # from sm_20 (Fermi) on: 20 is at SM scale too
    ("TABLE[get_device_capability()]", True),  # the helper imported by name
    ("_is_sm100_supported and major >= 9", True),  # the SM100 term fails on SM12x, the threshold does not save it
    ("major >= 9 and TABLE[torch.cuda.get_device_capability()]", True),  # the table fails on SM12x
    ("(x and tp) or is_sm100_supported()", True),  # no SM check on the left: SM12x only where x and tp hold
    ("major < 11 and x", False),  # one threshold and-ed with no other: alone, which way is the statement's
    ("tp < 8 and major < 11", False),  # tp is no capability: its threshold makes no range
    ("get_device_capability() < (12, 0) and get_device_capability() in [(10, 0), (12, 0)]", False),  # `in`: no range
    ("major in (9, 12)", False),  # `in` ints: the majors it lists, not one capability (9, 12)
    ("get_device_sm() in (90, 120)", False),
    ("get_device_sm() == 121", False),  # SM121 (DGX Spark) is SM12x
    ("9 == torch.cuda.get_device_capability()[0]", True),  # the constant on the left of `==`
    ("torch.cuda.get_device_capability()[0] >= MIN_MAJOR", False),  # no constant: no verdict
    ("major in (12, x)", False),  # not all constants: no verdict
    ("is_sm100_supported() or tp < 8", True),  # tp is no capability: the SM100 term decides
    ("is_sm120_supported() and is_sm100_supported()", False),  # names SM12x, wherever it stands
    ("get_platform().is_cuda() and _is_sm100_supported", True),  # a platform attribute that is no SM term
    ("TABLE.get(tp, torch.cuda.get_device_capability())", False),  # the capability is the default, not the key
]


@pytest.mark.parametrize(
    ("expression", "reported"),
    GATE_TESTS,
    ids=[expression for expression, _ in GATE_TESTS],
)
def test_raw_comparisons_and_tables(expression: str, reported: bool) -> None:
    assert bool(found(f"def allreduce_fusion_ok(major, x, tp):\n    if {expression}:\n        return 1\n")) is reported


@pytest.mark.parametrize(
    "source",
    [
        "from sglang.srt.utils import is_sm100_supported as sm\n\ndef allreduce_fusion_ok():\n    return sm()\n",
        "from sglang.srt.utils import _is_sm100_supported as sm100\n\ndef allreduce_fusion_ok():\n    return sm100\n",
        "from sglang.srt import utils\n\ndef allreduce_fusion_ok():\n    return utils.is_sm100_supported()\n",
    ],
    ids=["helper-alias", "flag-alias", "module-attribute"],
)
def test_a_term_imported_under_another_name_or_called_on_its_module_is_read(source: str) -> None:
    assert [(line, function) for line, function, _ in found(source, "srt/x.py")] == [(4, "allreduce_fusion_ok")]


def test_raw_comparisons_and_tables_test_the_capability() -> None:
    """What the known gates of raw comparisons list (``archs``), so they match."""
    for expression in ("major == 10", "TABLE[get_device_capability()]", "_is_sm100_supported and major >= 9"):
        assert gate_sweep.RAW in gate_sweep._terms(compile_expr(expression))[0]


def test_a_check_on_the_files_first_line_is_quoted_from_its_first_character() -> None:
    assert found("def allreduce_fusion_ok(): return is_sm100_supported()\n") == [
        (1, "allreduce_fusion_ok", "is_sm100_supported()")
    ]


def test_a_term_imported_under_another_name_is_read_inside_and_or() -> None:
    """An aliased SM100 flag ``and``-ed with a threshold still fails on SM12x: reported."""
    source = (
        "from sglang.srt.utils import _is_sm100_supported as sm100\n\n"
        "def allreduce_fusion_ok(major):\n    return sm100 and major >= 9\n"
    )
    assert [(line, expression) for line, _, expression in found(source, "srt/x.py")] == [(4, "sm100 and major >= 9")]


def test_a_camelcase_class_is_on_the_path_by_its_words() -> None:
    source = """
        class FlashInferAllReduceFusionRunner:
            def __init__(self):
                if not is_sm100_supported():
                    raise RuntimeError("SM100 only")
    """
    data = textwrap.dedent(source).encode()
    assert prefiltered("srt/layers/x.py", data)  # "AllReduce", not "allreduce"
    assert found(source, "srt/layers/x.py") == [
        (4, "FlashInferAllReduceFusionRunner.__init__", "not is_sm100_supported()")
    ]
    assert on_path("srt/x.py", "TrtllmAllreduceWorkspace.create")
    assert not on_path("srt/x.py", "LinearFusion.run")  # "ar_fusion" is a word, not "linear_fusion"
    assert not on_path("srt/x.py", "linear_fusion")


def test_functions_are_named_as_sglang_names_them() -> None:
    source = """
        _is_sm100_supported = is_cuda() and is_sm100_supported()  # defines the flag: no check
        USE = is_sm100_supported()


        class Fuser:
            def forward(self):
                def inner():
                    return _is_sm100_supported
                while is_sm90_supported():
                    break
                assert not is_sm100_supported(), "sm100 only"
    """
    assert found(source) == [
        (3, "<module>", "is_sm100_supported()"),
        (9, "Fuser.forward.inner", "_is_sm100_supported"),
        (10, "Fuser.forward", "is_sm90_supported()"),
        (12, "Fuser.forward", "not is_sm100_supported()"),
    ]


PATH_FUNCTIONS = [
    (COMM, "_resolve_backend", True),
    ("srt/layers/layer_boundary/fusions/allreduce.py", "FusedAllReduce.forward", True),
    ("srt/layers/communicator.py", "apply_flashinfer_allreduce_fusion", True),
    ("srt/layers/communicator.py", "LayerCommunicator.should_fuse_mlp_allreduce_with_next_layer", True),
    ("srt/layers/layer_boundary/residual/add_norm.py", "flashinfer_ar_fusion_applies", True),
    ("srt/distributed/parallel_state.py", "GroupCoordinator.fused_allreduce_rmsnorm", True),
    ("srt/models/beam.py", "BeamModel._flashinfer_ar_band", True),
    ("srt/layers/flashinfer_trtllm.py", "create_trtllm_allreduce_workspace", True),
    ("srt/layers/x.py", "FLASHINFER_ALLREDUCE_FUSION", True),  # a name in capitals, by its words too
    ("srt/server_args.py", "ServerArgs._handle_model_specific_adjustments", False),
    ("srt/layers/attention/flashinfer_backend.py", "FlashInferAttnBackend.init_forward_metadata", False),
    ("srt/arg_groups/speculative_hook.py", "_resolve_dflash_draft_attention_backend", False),
]


@pytest.mark.parametrize(
    ("rel", "function", "expected"),
    PATH_FUNCTIONS,
    ids=[function for _, function, _ in PATH_FUNCTIONS],
)
def test_on_the_path_by_name(rel: str, function: str, expected: bool) -> None:
    assert on_path(rel, function) is expected


def test_the_prefilter_needs_the_fusion_and_an_sm_term() -> None:
    assert prefiltered("srt/x.py", b"allreduce ... is_sm100_supported()")
    assert not prefiltered("srt/x.py", b"allreduce only")
    assert not prefiltered("srt/x.py", b"is_sm100_supported() only")
    assert prefiltered(COMM, b"is_sm100_supported() in a module on the path")
    assert prefiltered("srt/x.py", b"allreduce ... torch.cuda.get_device_capability()")


RESOLVER = """
    def _resolve_backend(backend, is_multi_node=False):
        if backend == "cutedsl":
            if not get_platform().is_sm100:
                raise ValueError("cutedsl needs Blackwell")
        if backend == "auto":
            if get_platform().is_sm100:
                return "mnnvl"
            return "trtllm"
        if not get_platform().is_sm100:
            raise ValueError("only SM100 from now on")
"""


def test_a_known_gate_needs_its_word_so_a_new_check_beside_it_is_reported() -> None:
    source = textwrap.dedent(RESOLVER).encode()
    checks = checks_in(COMM, source)
    assert not isinstance(checks, str)
    known = [gate_sweep._known(COMM, c, Plan(SimpleNamespace(), [])) for c in checks]  # type: ignore[arg-type]
    assert [(c.line, k.kind if k else None) for c, k in zip(checks, known, strict=True)] == [
        (4, "an SM100-only backend"),  # inside the cutedsl branch
        (7, "an SM100-only backend"),  # returns mnnvl
        (10, None),  # names neither: reported
    ]
    assert [c.function for c in checks] == ["_resolve_backend"] * 3


def test_a_known_gate_in_a_target_found_by_role_is_known_under_its_new_name() -> None:
    """The resolver renamed (a role find): its deliberate SM100-only branches stay known, and a
    check beside them that names neither word is still reported."""
    source = textwrap.dedent(RESOLVER).replace("_resolve_backend", "_pick_backend").encode()
    checks = checks_in(COMM, source)
    assert not isinstance(checks, str)
    report = PatchReport(
        "fusion-backend-resolver", "", (), COMM, State.APPLIED, "", found_by="role", found_at=f"{COMM}:_pick_backend"
    )
    plan = Plan(SimpleNamespace(), [FilePlan(COMM, Path(COMM), b"", reports=[report])])  # type: ignore[arg-type]
    known = [gate_sweep._known(COMM, c, plan) for c in checks]
    assert [k.kind if k else None for k in known] == ["an SM100-only backend", "an SM100-only backend", None]
    assert [gate_sweep._known(COMM, c, Plan(SimpleNamespace(), [])) for c in checks] == [None] * 3  # type: ignore[arg-type]


def test_known_gates_are_data_with_reasons() -> None:
    assert len({(k.module, k.function) for k in KNOWN_GATES}) == len(KNOWN_GATES)
    for known in KNOWN_GATES:
        assert known.reason and known.kind and known.words and known.archs and known.seen
        assert on_path(known.module, known.function)  # else it could never be reported


def test_a_file_that_does_not_parse_is_said_so() -> None:
    assert checks_in(COMM, b"x = 1\ndef f(:\n") == (
        f"sglang/{COMM}:2 does not parse (invalid syntax): not swept for SM checks"
    )


MODEL = """\
import torch


class DecoderLayer:
    def forward(self, x):
        if is_sm100_supported():  # not on the path: never parsed
            return x

    def _should_fuse_mlp_allreduce_with_next_layer(
        self, batch
    ) -> bool:
        # a comment at the left margin of the body
        if not _is_sm100_supported:
            return False
        return batch > 0


def other():
    return is_sm90_supported()
"""


def test_outside_modules_on_the_path_only_definitions_on_it_are_read() -> None:
    expected = [(13, "DecoderLayer._should_fuse_mlp_allreduce_with_next_layer", "not _is_sm100_supported")]
    assert found(MODEL, "srt/models/m.py") == expected
    # A string at the left margin inside the function: the part alone does not parse, the file does.
    odd = MODEL.replace("        return batch > 0", '        doc = """\nleft\n"""\n        return batch > 0')
    assert [c for c in found(odd, "srt/models/m.py") if on_path("srt/models/m.py", c[1])] == expected


TERMS_ON_COMPUTED_OBJECTS = [
    ('importlib.import_module("sglang.srt.utils").is_sm100_supported()', True),  # on a module a call returns
    ('BACKENDS["trtllm"]().is_sm100_supported()', True),  # on an object a factory makes
    ("get_platform().is_sm100", True),
    ("HOOKS[0]() and is_sm100_supported()", True),  # a call of a table entry is no SM term
]


@pytest.mark.parametrize(
    ("expression", "reported"),
    TERMS_ON_COMPUTED_OBJECTS,
    ids=[expression for expression, _ in TERMS_ON_COMPUTED_OBJECTS],
)
def test_a_helper_called_on_a_computed_object_is_read(expression: str, reported: bool) -> None:
    assert bool(found(f"def allreduce_fusion_ok():\n    if {expression}:\n        return 1\n")) is reported


def test_a_class_attribute_that_defines_the_flag_is_no_check_in_a_file_read_whole() -> None:
    """A string at the left margin cuts the class's lines short, so the whole file is parsed:
    what defines the flag in the class body is still not a check, the method's gate is."""
    source = '''\
class FlashInferAllReduceFusionRunner:
    _is_sm100_supported = is_sm100_supported()

    def run(self):
        doc = """
left
"""
        if not is_sm90_supported():
            return None
'''
    rel = "srt/layers/x.py"
    checks = [c for c in found(source, rel) if on_path(rel, c[1])]
    assert checks == [(8, "FlashInferAllReduceFusionRunner.run", "not is_sm90_supported()")]


def test_a_warning_python_gives_about_a_file_read_whole_names_that_file() -> None:
    """An invalid escape in sglang's source (a SyntaxWarning from Python 3.12): the warning
    printed while the file is read says which file, not ``<unknown>``."""
    import warnings

    source = '''\
class FlashInferAllReduceFusionRunner:
    def run(self):
        doc = """
left
"""
        pattern = "\\d+"
        if not is_sm90_supported():
            return None
'''
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [c[:2] for c in found(source, "srt/layers/x.py")] == [(7, "FlashInferAllReduceFusionRunner.run")]
    assert [(w.filename, w.lineno) for w in caught] == [("srt/layers/x.py", 6)]


def test_definitions_are_named_at_any_depth_and_lines_count_from_the_first() -> None:
    """By lines, no parsing: a file that starts with an empty line, four definitions deep."""
    data = b"\nclass A:\n    class B:\n        class C:\n            def d(self):\n                pass\n"
    data += b"    def e():\n        class F:\n            pass\n"
    assert gate_sweep._definitions(data) == [
        gate_sweep._Definition("A", 2, 0, is_function=False, within_function=False),
        gate_sweep._Definition("A.B", 3, 4, is_function=False, within_function=False),
        gate_sweep._Definition("A.B.C", 4, 8, is_function=False, within_function=False),
        gate_sweep._Definition("A.B.C.d", 5, 12, is_function=True, within_function=False),
        gate_sweep._Definition("A.e", 7, 4, is_function=True, within_function=False),
        gate_sweep._Definition("A.e.F", 8, 8, is_function=False, within_function=True),
    ]


def test_a_definitions_block_runs_to_the_next_line_of_code_at_its_indentation() -> None:
    """Lines at its own indentation or less that only close a bracket, or are comments,
    continue it; the next definition beside it ends it."""
    source = [
        b"def f(\n",
        b"    x,\n",
        b"):\n",
        b"    y = [\n",
        b"        1,\n",
        b"]\n",
        b"# a comment at the margin\n",
        b"\n",
        b"    z = y\n",
        b"    return z\n",
        b"def g():\n",
        b"    pass\n",
    ]
    f, g = gate_sweep._definitions(b"".join(source))
    assert gate_sweep._block(source, f) == b"".join(source[:10])
    assert gate_sweep._block(source, g) == b"".join(source[10:])


def test_an_error_reading_the_package_ahead_is_raised_where_the_sweep_asks(
    mini: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fake: the package reading (``_scan``) fails in the helper thread."""
    failure = PermissionError(13, "Permission denied")

    def unreadable(tree: object) -> NoReturn:
        raise failure

    monkeypatch.setattr(gate_sweep, "_scan", unreadable)
    with pytest.raises(PermissionError) as raised:
        gate_sweep.Prefetch(from_directory(mini)).result()
    assert raised.value is failure


@pytest.mark.offline
def test_a_process_exits_while_the_package_is_still_being_read_ahead(mini: Path) -> None:
    """A Ctrl-C (or any exit) while the helper thread still reads: the process ends without
    waiting for it.  Fake: a package reading (``_scan``) that never returns."""
    assert COMM in gate_sweep.Prefetch(from_directory(mini)).result().files  # here: a reading that ends
    code = (
        "import threading\n"
        "from sm120patch.patcher.plan import gate_sweep\n"
        "gate_sweep._scan = lambda tree: threading.Event().wait()\n"
        "gate_sweep.Prefetch(None)\n"
    )
    ended = subprocess.run([sys.executable, "-c", code], timeout=30, capture_output=True, text=True)
    assert ended.returncode == 0, ended.stderr


def test_a_flag_set_inside_a_function_decides_and_each_check_carries_the_ifs_around_it() -> None:
    """A class attribute or module name that defines the flag is no check; set inside a
    function (or a block of one) it decides something.  A check's statement starts with the
    tests of the ``if`` and ``while`` around it: the words a known gate is recognised by."""
    checks = checks_in(
        COMM,
        textwrap.dedent(
            """
            class Fuser:
                _is_sm100_supported = is_sm100_supported()

                def forward(self, backend):
                    _is_sm100_supported = is_sm100_supported()
                    if backend == "mnnvl":
                        while x:
                            _is_sm90_supported = is_sm90_supported()


            def allreduce_fusion_ok():
                _is_sm100_supported = is_sm100_supported()
            """
        ).encode(),
    )
    assert not isinstance(checks, str)
    assert [(c.line, c.function, c.statement) for c in checks] == [
        (6, "Fuser.forward", " _is_sm100_supported = is_sm100_supported()"),
        (9, "Fuser.forward", ' backend == "mnnvl" x _is_sm90_supported = is_sm90_supported()'),
        (13, "allreduce_fusion_ok", " _is_sm100_supported = is_sm100_supported()"),
    ]


@pytest.mark.parametrize("rel", [COMM, "srt/models/m.py"], ids=["read whole", "definition read alone"])
def test_a_file_in_another_encoding_is_swept_without_failing(rel: str) -> None:
    """PEP 263: a Latin-1 file.  ast counts UTF-8 columns, the file's bytes are Latin-1, so the
    quoted text may be off around a non-ASCII character; the check is still found at its line."""
    source = '# -*- coding: latin-1 -*-\ndef allreduce_fusion_ok():\n    return "\xe9t\xe9" and is_sm100_supported()\n'
    checks = checks_in(rel, source.encode("latin-1"))
    assert not isinstance(checks, str)
    assert [(c.line, c.function, c.archs) for c in checks] == [(3, "allreduce_fusion_ok", {"sm100"})]


def test_checks_are_read_in_every_block_of_a_statement() -> None:
    """``except``, ``else``, ``finally`` and ``case`` bodies; an annotated assignment; an
    ``if`` whose test spans lines (quoted with its body, ending on its last line)."""
    source = """
        def allreduce_fusion_ok(x):
            try:
                pass
            except ValueError:
                a = is_sm90_supported()
            else:
                b = is_sm100_supported()
            finally:
                c = is_sm90_supported()
            match x:
                case 1:
                    d: bool = is_sm100_supported()
            if (
                is_sm100_supported()
                and x
            ):
                return 1
    """
    checks = checks_in(COMM, textwrap.dedent(source).encode())
    assert not isinstance(checks, str)
    assert sorted((c.line, c.end_line, c.statement) for c in checks) == [
        (6, 6, " a = is_sm90_supported()"),
        (8, 8, " b = is_sm100_supported()"),
        (10, 10, " c = is_sm90_supported()"),
        (13, 13, " d: bool = is_sm100_supported()"),
        (15, 16, " is_sm100_supported()\n        and x return 1"),
    ]


ON_PATH_ONLY = """\
import torch


def build():
    class FusedAllReduce:
        _is_sm100_supported = is_sm100_supported()
    return FusedAllReduce


def allreduce_fusion_ok(batch):
    if (
        _is_sm100_supported
        and batch > 0
    ):
        return True
    def allreduce_fusion_probe(): return is_sm90_supported()
"""


def test_a_definition_read_alone_is_read_as_in_its_whole_file() -> None:
    """Outside the modules on the path only the definitions on it are parsed, each alone: their
    checks are those of the whole file read on the path, at the same lines; a definition
    inside one already read is not read twice; a class inside a function is in a function."""
    whole = found(ON_PATH_ONLY)  # COMM: a module on the path, read whole
    assert whole == [
        (6, "build.FusedAllReduce", "is_sm100_supported()"),
        (12, "allreduce_fusion_ok", "_is_sm100_supported"),
        (16, "allreduce_fusion_ok.allreduce_fusion_probe", "is_sm90_supported()"),
    ]
    alone = checks_in("srt/models/m.py", ON_PATH_ONLY.encode())
    assert not isinstance(alone, str)
    assert [(c.line, c.function, c.expression) for c in alone] == whole
    assert [(c.line, c.end_line) for c in alone] == [(6, 6), (12, 13), (16, 16)]


class ReadAhead:
    """Fake: a package reading (``Prefetch``) that found what the test says, not the disk."""

    def __init__(self, scan: gate_sweep._Scan) -> None:
        self.scan = scan

    def result(self) -> gate_sweep._Scan:
        return self.scan


def test_the_files_judged_are_those_the_package_reading_ahead_found(mini: Path) -> None:
    scan = gate_sweep._Scan([], [], {"srt/layers/x.py": b"allreduce is_sm100_supported()"}, [])
    tree = from_directory(mini)
    files, used = gate_sweep.files_to_judge(tree, Plan(tree, []), ReadAhead(scan))  # type: ignore[arg-type]
    assert used is scan and files == scan.kept


def test_a_planned_change_is_judged_as_changed_and_dropped_where_it_leaves_no_sm_term(mini: Path) -> None:
    kept = {"srt/a.py": b"allreduce is_sm100_supported()", "srt/c.py": b"allreduce is_sm90_supported()"}
    tree = from_directory(mini)
    plan = Plan(
        tree,
        [
            FilePlan("srt/a.py", mini / "srt/a.py", kept["srt/a.py"], b"allreduce"),  # the SM term gone
            FilePlan("srt/b.py", mini / "srt/b.py", b"x", b"y"),  # never kept, still not
            FilePlan("srt/c.py", mini / "srt/c.py", kept["srt/c.py"], b"allreduce is_sm120_supported()"),
        ],
    )
    files, _ = gate_sweep.files_to_judge(tree, plan, ReadAhead(gate_sweep._Scan([], [], dict(kept), [])))  # type: ignore[arg-type]
    assert files == {"srt/c.py": b"allreduce is_sm120_supported()"}


def test_the_sweep_says_what_did_not_parse_and_what_could_not_be_read(mini: Path) -> None:
    unreadable = "sglang/srt/x.py cannot be read (Permission denied): not swept for SM checks"
    scan = gate_sweep._Scan(
        ["srt"], [COMM], {COMM: b"def allreduce_fusion_ok(:\n    return is_sm100_supported()\n"}, [unreadable]
    )
    tree = from_directory(mini)
    found = gate_sweep.sweep(tree, Plan(tree, []), ReadAhead(scan))  # type: ignore[arg-type]
    assert found.unread == [f"sglang/{COMM}:1 does not parse (invalid syntax): not swept for SM checks", unreadable]
    assert (found.dirs, found.files, found.kept) == (("srt",), (COMM,), (COMM,))


def test_a_module_on_the_path_is_judged_for_the_checks_outside_its_definitions(mini: Path) -> None:
    tree = from_directory(mini)
    found, _ = gate_sweep.verdicts({COMM: b"import x\n\nif is_sm100_supported():\n    X = 1\n"}, Plan(tree, []))
    assert [(v.check.line, v.check.function) for v in found] == [(3, "<module>")]


def test_camelcase_names_are_read_by_their_words() -> None:
    assert gate_sweep._snake("FlashInferAllReduceFusion.run") == "flashinfer_allreduce_fusion.run"
    assert gate_sweep._snake("ALLREDUCE.run_RMSNorm") == "allreduce.run_rmsnorm"


def test_every_file_is_judged_past_one_off_the_path_or_one_that_does_not_parse(mini: Path) -> None:
    files = {
        "srt/a.py": b"def other():\n    return is_sm100_supported()\n",  # no definition on the path
        "srt/b.py": b"def allreduce_fusion_ok(:\n    return is_sm100_supported()\n",
        "srt/c.py": b"def allreduce_fusion_ok():\n    return is_sm100_supported()\n",
    }
    tree = from_directory(mini)
    found, unread = gate_sweep.verdicts(files, Plan(tree, []))
    assert [(v.check.file, v.check.line, v.reported) for v in found] == [("srt/c.py", 2, True)]
    assert unread == ["sglang/srt/b.py:1 does not parse (invalid syntax): not swept for SM checks"]


def test_a_known_gate_is_judged_known_and_not_reported(mini: Path) -> None:
    tree = from_directory(mini)
    found, _ = gate_sweep.verdicts({COMM: textwrap.dedent(RESOLVER).encode()}, Plan(tree, []))
    assert [(v.check.line, v.known.kind if v.known else None, v.reported) for v in found] == [
        (4, "an SM100-only backend", False),
        (7, "an SM100-only backend", False),
        (10, None, True),
    ]


def test_a_folder_that_cannot_be_listed_is_said_and_the_rest_is_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fake: ``os.scandir`` fails for the first two folders below the package it is asked to
    list: one removed meanwhile (nothing to say), one it may not read (said)."""
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "m.py").write_text("")
    real, failed = os.scandir, []

    def scandir(path: str) -> object:
        if path != str(tmp_path) and len(failed) < 2:
            failed.append(Path(path).name)
            raise FileNotFoundError(2, "No such file") if len(failed) == 1 else PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(gate_sweep.os, "scandir", scandir)
    problems: list[str] = []
    files = [rel for rel, _, is_dir in gate_sweep._walk(tmp_path, problems) if not is_dir]
    assert problems == [f"sglang/{failed[1]} cannot be listed (Permission denied): not swept for SM checks"]
    assert files == [f"{name}/m.py" for name in {"a", "b", "c"} - set(failed)]


def test_a_package_that_cannot_be_listed_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake: ``os.scandir`` fails for the package folder itself."""

    def scandir(path: str) -> NoReturn:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(gate_sweep.os, "scandir", scandir)
    problems: list[str] = []
    assert [rel for rel, _, _ in gate_sweep._walk(tmp_path, problems)] == [""]
    assert problems == ["sglang/. cannot be listed (Permission denied): not swept for SM checks"]


def test_the_scan_reads_on_past_a_file_removed_or_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake: ``_read`` fails for the package's top-level files (listed before any folder below):
    one removed meanwhile (nothing to say), the others not readable (said); the folder below is
    still read."""
    gate = b"def allreduce_fusion_ok():\n    return is_sm100_supported()\n"
    for name in ("gone.py", "denied.py", "denied_too.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "srt").mkdir()
    (tmp_path / "srt" / "allreduce.py").write_bytes(gate)
    real = gate_sweep._read

    def read(path: str) -> bytes:
        name = Path(path).name
        if name == "gone.py":
            raise FileNotFoundError(2, "No such file")
        if name.startswith("denied"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(gate_sweep, "_read", read)
    scan = gate_sweep._scan(SimpleNamespace(package_dir=tmp_path))  # type: ignore[arg-type]  # only its folder is read
    assert sorted(scan.unreadable) == [
        f"sglang/{name} cannot be read (Permission denied): not swept for SM checks"
        for name in ("denied.py", "denied_too.py")
    ]
    assert scan.files == ["srt/allreduce.py"] and scan.kept == {"srt/allreduce.py": gate}
    assert sorted(scan.dirs) == ["", "srt"]


def test_a_module_that_is_a_link_to_a_file_is_read_through_it(tmp_path: Path) -> None:
    """uv's ``--link-mode=symlink`` installs every module as a link into its cache: each is
    swept as the file it leads to, in or out of the package, never taken for a folder."""
    gate = b"def allreduce_fusion_ok():\n    return is_sm100_supported()\n"
    cache, package = tmp_path / "cache", tmp_path / "sglang"
    cache.mkdir()
    (package / "srt").mkdir(parents=True)
    (cache / "allreduce.py").write_bytes(gate)
    (package / "srt" / "inside.py").write_bytes(gate)
    (package / "srt" / "allreduce.py").symlink_to(cache / "allreduce.py")
    (package / "allreduce_link.py").symlink_to(package / "srt" / "inside.py")
    problems: list[str] = []
    files = sorted(rel for rel, _, is_dir in gate_sweep._walk(package, problems) if not is_dir)
    assert problems == []
    assert files == ["allreduce_link.py", "srt/allreduce.py", "srt/inside.py"]


def test_an_unknown_check_is_said_as_its_sm_clause_on_one_line_without_comments() -> None:
    source = textwrap.dedent(
        """
        def flashinfer_ar_fusion_applies(batch_size):
            return (
                # the SM check
                (_is_sm90_supported
                 or _is_sm100_supported)  # datacenter only
                and _is_flashinfer_available
                and batch_size <= FUSE_ALLREDUCE_MAX_BATCH_SIZE
            )
        """
    ).encode()
    checks = checks_in("srt/layers/x.py", source)
    assert not isinstance(checks, str)
    assert [(c.line, c.function, c.expression) for c in checks] == [
        (5, "flashinfer_ar_fusion_applies", "_is_sm90_supported or _is_sm100_supported")
    ]
