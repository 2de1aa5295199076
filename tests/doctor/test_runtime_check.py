"""``doctor.runtime``: ``import_check``'s answer typed, written back in the same shape, judged."""

from __future__ import annotations

import pytest

from sm120patch.doctor.runtime import ModuleImport, RuntimeCheck, Sm120Probe, TorchImport, judge, parse
from sm120patch.errors import ExitCode

PASSED: dict = {
    "python": "/env/bin/python",
    "torch": {"ok": True, "version": "2.9.0", "cuda": "12.9", "capability": [12, 0], "device": "RTX PRO 6000"},
    "sglang": {"ok": True},
    "probe": {"ok": True, "expression": "get_platform().is_sm120", "value": True},
    "modules": [
        {"module": "sglang.srt.layers.communicator", "ok": True, "flags": {"_is_sm120_supported": True}},
        {"module": "sglang.srt.server_args", "ok": True, "flags": {}},
    ],
}
ANSWERS = [
    PASSED,
    {**PASSED, "torch": {"ok": True, "version": "2.9.0", "cuda": None}},  # no GPU visible
    {"python": "/env/bin/python", "torch": {"ok": False, "error": "E"}, "sglang": None, "probe": None, "modules": []},
    {**PASSED, "sglang": {"ok": False, "error": "ModuleNotFoundError: x"}, "probe": None, "modules": []},
    {**PASSED, "probe": {"ok": False, "error": "E"}},
    {**PASSED, "modules": [{"module": "sglang.srt.layers.communicator", "ok": False, "error": "ImportError: y"}]},
]


@pytest.mark.parametrize("answer", ANSWERS)
def test_to_json_writes_the_answer_back_in_its_shape(answer: dict) -> None:
    result = parse(answer, 4)
    assert result.to_json() == {**answer, "exit_code": 4}
    assert list(result.to_json()) == ["python", "torch", "sglang", "probe", "modules", "exit_code"]


def test_parse_types_the_answer() -> None:
    result = parse(PASSED, 0)
    assert result.torch == TorchImport(True, "2.9.0", "12.9", (12, 0), "RTX PRO 6000")
    assert result.probe == Sm120Probe(True, "get_platform().is_sm120", True)
    assert result.modules[0] == ModuleImport("sglang.srt.layers.communicator", True, {"_is_sm120_supported": True})


def test_odd_sections_read_as_not_reached() -> None:
    result = parse({"torch": "2.9", "sglang": [], "modules": "none"}, 3)
    assert result == RuntimeCheck(None, None, None, None, (), 3)


def test_odd_fields_do_not_raise() -> None:
    result = parse(
        {
            **PASSED,
            "torch": {"ok": True, "version": 2.9, "capability": [12], "device": None},
            "probe": {"ok": True, "expression": "x", "value": "yes"},
            "modules": [{"module": "a", "ok": True, "flags": {"_is_sm120_supported": 1, "_is_sm90": False}}],
        },
        0,
    )
    assert result.torch == TorchImport(True, "2.9", None, None, None)
    assert result.probe == Sm120Probe(True, "x", None)
    assert result.modules == (ModuleImport("a", True, {"_is_sm90": False}),)


@pytest.mark.parametrize(
    ("entry", "module"),
    [
        (
            "sglang.srt.layers.communicator",
            ModuleImport("(unnamed)", False, error="odd import_check entry: 'sglang.srt.layers.communicator'"),
        ),
        (
            {"module": "a", "ok": True},
            ModuleImport("a", False, error="odd import_check entry: {'module': 'a', 'ok': True}"),
        ),
        ({"module": "a", "ok": False, "error": "E"}, ModuleImport("a", False, error="E")),
    ],
)
def test_an_odd_module_entry_is_a_failed_import(entry: object, module: ModuleImport) -> None:
    assert parse({**PASSED, "modules": [entry]}, 0).modules == (module,)


def test_judge_a_passed_check() -> None:
    code, line = judge(parse(PASSED, 0), "/env/bin/python")
    assert code is ExitCode.OK
    assert line == (
        "runtime: get_platform().is_sm120 = True in /env/bin/python (cc 12.0): this host takes the SM12x "
        "branches; every patched module imports"
    )
    no_gpu = parse({**PASSED, "torch": {"ok": True}, "probe": {"ok": True, "expression": "x", "value": False}}, 0)
    assert judge(no_gpu, "py")[1] == (
        "runtime: x = False in py (no CUDA GPU visible to torch): this host does not take the SM12x branches; "
        "every patched module imports"
    )


@pytest.mark.parametrize(
    ("index", "code", "start"),
    [
        (2, ExitCode.ENVIRONMENT, "torch does not import in py (E): "),
        (3, ExitCode.NOT_AS_ASKED, "sglang does not import in py: ModuleNotFoundError: x ("),
        (4, ExitCode.NOT_AS_ASKED, "the release's SM120 probe failed in py: E"),
        (
            5,
            ExitCode.NOT_AS_ASKED,
            "the patched tree does not import in py: sglang.srt.layers.communicator: ImportError: y",
        ),
    ],
)
def test_judge_a_failed_check(index: int, code: ExitCode, start: str) -> None:
    got, headline = judge(parse(ANSWERS[index], 1), "py")
    assert got is code and headline.startswith(start)


def test_judge_steps_not_reached() -> None:
    assert judge(RuntimeCheck(None, None, None, None, (), 3), "py")[0] is ExitCode.ENVIRONMENT
    torch_only = RuntimeCheck(None, TorchImport(True), None, None, (), 4)
    assert judge(torch_only, "py") == (
        ExitCode.NOT_AS_ASKED,
        "sglang does not import in py: None (is this the interpreter that serves sglang, with its dependencies?)",
    )
