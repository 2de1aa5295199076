"""``doctor.runtime``: ``import_check``'s answer typed, written back in the same shape, judged."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from sm120patch.errors import EnvironmentProblem, ExitCode
from sm120patch.patcher.runtime import (
    ModuleImport,
    RuntimeCheck,
    SglangImport,
    Sm120Probe,
    TorchImport,
    check,
    dotted,
    parse,
    runtime_verdict,
    spelling,
)
from sm120patch.sglang.tree import from_directory
from tests.support.fakes import fake_torch_package

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
    code, line = runtime_verdict(parse(PASSED, 0), "/env/bin/python")
    assert code is ExitCode.OK
    assert line == (
        "runtime: get_platform().is_sm120 = True in /env/bin/python (cc 12.0): this host takes the SM12x "
        "branches; every patched module imports"
    )
    no_gpu = parse({**PASSED, "torch": {"ok": True}, "probe": {"ok": True, "expression": "x", "value": False}}, 0)
    assert runtime_verdict(no_gpu, "py")[1] == (
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
    got, headline = runtime_verdict(parse(ANSWERS[index], 1), "py")
    assert got is code and headline.startswith(start)


def test_judge_steps_not_reached() -> None:
    assert runtime_verdict(RuntimeCheck(None, None, None, None, (), 3), "py")[0] is ExitCode.ENVIRONMENT
    torch_only = RuntimeCheck(None, TorchImport(True), None, None, (), 4)
    assert runtime_verdict(torch_only, "py") == (
        ExitCode.NOT_AS_ASKED,
        "sglang does not import in py: None (is this the interpreter that serves sglang, with its dependencies?)",
    )


# --- exact headlines ----------------------------------------------------------------------------


def test_judge_headlines_in_full() -> None:
    torch_missing = RuntimeCheck(None, None, None, None, (), 3)
    assert runtime_verdict(torch_missing, "py") == (
        ExitCode.ENVIRONMENT,
        "torch does not import in py (None): the runtime check needs the interpreter that serves sglang (--python)",
    )
    failed_torch = parse({**PASSED, "torch": {"ok": False, "error": "E"}, "sglang": {"ok": False}}, 3)
    assert runtime_verdict(failed_torch, "py") == (
        ExitCode.ENVIRONMENT,
        "torch does not import in py (E): the runtime check needs the interpreter that serves sglang (--python)",
    )
    assert runtime_verdict(parse(ANSWERS[3], 4), "py") == (
        ExitCode.NOT_AS_ASKED,
        "sglang does not import in py: ModuleNotFoundError: x (is this the interpreter that serves sglang, with its "
        "dependencies?)",
    )
    no_probe = RuntimeCheck(None, TorchImport(True), SglangImport(True), None, (), 0)
    assert runtime_verdict(no_probe, "py") == (ExitCode.NOT_AS_ASKED, "the release's SM120 probe failed in py: None")
    assert runtime_verdict(parse(ANSWERS[4], 0), "py") == (
        ExitCode.NOT_AS_ASKED,
        "the release's SM120 probe failed in py: E",
    )


def test_judge_names_the_first_module_that_does_not_import() -> None:
    modules = [
        {"module": "a", "ok": True, "flags": {}},
        {"module": "b", "ok": False, "error": "ImportError: b"},
        {"module": "c", "ok": False, "error": "ImportError: c"},
    ]
    result = parse({**PASSED, "modules": modules, "probe": {"ok": False, "error": "E"}}, 0)
    assert runtime_verdict(result, "py") == (
        ExitCode.NOT_AS_ASKED,
        "the patched tree does not import in py: b: ImportError: b",
    )


def test_judge_shows_the_capability_torch_reports() -> None:
    gb10 = parse({**PASSED, "torch": {"ok": True, "capability": [12, 1]}}, 0)
    assert "in py (cc 12.1): this host takes the SM12x branches" in runtime_verdict(gb10, "py")[1]


# --- odd answers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("torch", "typed"),
    [
        ({"ok": "yes"}, TorchImport(False)),
        ({"ok": True, "capability": [12, 0, 1]}, TorchImport(True)),
        ({"ok": True, "capability": [True, 0]}, TorchImport(True)),
        ({"ok": True, "capability": [12, 0.0]}, TorchImport(True)),
        ({"ok": True, "capability": (12, 0)}, TorchImport(True)),
        ({"ok": True, "capability": [9, 0], "device": 7}, TorchImport(True, capability=(9, 0), device="7")),
        ({"ok": False, "error": 3}, TorchImport(False, error="3")),
    ],
)
def test_torch_sections_of_another_shape(torch: dict, typed: TorchImport) -> None:
    assert parse({"torch": torch}, 0).torch == typed


def test_other_sections_of_another_shape() -> None:
    result = parse({"python": 3, "sglang": {"ok": 1, "error": None}, "probe": {"ok": True, "value": 1}}, 0)
    assert result.python == "3"
    assert result.sglang == SglangImport(False, None)
    assert result.probe == Sm120Probe(True, None, None, None)
    assert parse({"probe": {"ok": "true", "error": "E", "value": False}}, 0).probe == Sm120Probe(
        False, None, False, "E"
    )


def odd(entry: dict) -> ModuleImport:
    return ModuleImport(str(entry.get("module")), False, error=f"odd import_check entry: {entry!r}")


@pytest.mark.parametrize(
    ("entry", "module"),
    [
        ({"module": "", "ok": True, "flags": {}}, ModuleImport("(unnamed)", True, {})),
        ({"ok": False, "error": "E"}, ModuleImport("(unnamed)", False, error="E")),
        ({"module": "a", "ok": False}, odd({"module": "a", "ok": False})),
        ({"module": "a", "ok": 1, "flags": {}}, odd({"module": "a", "ok": 1, "flags": {}})),
        ({"module": "a", "ok": True, "flags": [True]}, odd({"module": "a", "ok": True, "flags": [True]})),
        (
            {"module": 5, "ok": True, "flags": {"_is_sm120_supported": True}},
            ModuleImport("5", True, {"_is_sm120_supported": True}),
        ),
    ],
)
def test_module_entries_of_another_shape(entry: dict, module: ModuleImport) -> None:
    assert parse({"modules": [entry]}, 0).modules == (module,)


def test_to_json_of_a_partial_answer() -> None:
    assert TorchImport(True, "2.9", None, None, "GPU").to_json() == {
        "ok": True,
        "version": "2.9",
        "cuda": None,
        "device": "GPU",
    }
    assert TorchImport(True, capability=(12, 0)).to_json() == {
        "ok": True,
        "version": None,
        "cuda": None,
        "capability": [12, 0],
    }
    assert TorchImport(False, "2.9", error="E").to_json() == {"ok": False, "error": "E"}
    assert Sm120Probe(False, "x", True, "E").to_json() == {"ok": False, "error": "E"}
    assert SglangImport(False, "E").to_json() == {"ok": False, "error": "E"}
    assert SglangImport(True, "E").to_json() == {"ok": True}
    assert ModuleImport("a", False, {"f": True}, "E").to_json() == {"module": "a", "ok": False, "error": "E"}
    assert ModuleImport("a", True, {"f": True}, "E").to_json() == {"module": "a", "ok": True, "flags": {"f": True}}


# --- the check itself, run from this process ----------------------------------------------------


def test_dotted() -> None:
    assert dotted("srt/layers/communicator.py") == "sglang.srt.layers.communicator"
    assert dotted("srt/server_args.py") == "sglang.srt.server_args"
    assert dotted("srt/py/x.py") == "sglang.srt.py.x"


def test_spelling_follows_the_release_s_own_probe(mini: Path) -> None:
    tree = from_directory(mini)
    assert spelling(tree) == "helper"
    (mini / "srt/runtime_context.py").write_text("def get_platform():\n    return None\n")
    assert spelling(tree) == "platform"


@pytest.mark.offline
def test_check_imports_the_miniature_tree_in_the_serving_interpreter(
    mini: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FakeTorch (tests/support/fakes.py) stands for torch: one GPU of cc 12.0."""
    torch = fake_torch_package(tmp_path / "faketorch", (12, 0))
    monkeypatch.setenv("PYTHONPATH", str(torch))
    result = check(from_directory(mini), ["srt/layers/communicator.py"], sys.executable, 60)
    assert result.exit_code == 0 and result.python == sys.executable
    assert result.torch == TorchImport(True, "0.0-fake", "12.9", (12, 0), "FakeGPU")
    assert result.sglang == SglangImport(True)
    assert result.probe == Sm120Probe(True, "is_sm120_supported()", True)
    assert [m.module for m in result.modules] == ["sglang.srt.layers.communicator"]
    assert result.modules[0].ok


def answering_python(tmp_path: Path, body: str) -> str:
    """FakeRuntimePython: a shell script standing for the serving interpreter.  It is run as
    ``python -c RUNNER import_check.py OUT SPELLING MODULE...``, so ``$4`` is the answer file,
    ``$5`` the spelling and ``$6`` on the modules."""
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return str(exe)


@pytest.mark.offline
def test_check_passes_the_tree_the_spelling_and_the_modules(
    mini: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = answering_python(
        tmp_path,
        'printf \'{"python": "%s|%s|%s|%s|%s", "modules": []}\' "$PYTHONPATH" "$5" "$6" "$7" "$(basename "$PWD")" '
        '> "$4"; exit 4',
    )
    tree = from_directory(mini)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    result = check(tree, ["srt/layers/communicator.py", "srt/server_args.py"], python, 30)
    assert result.exit_code == 4
    assert result.python is not None
    path, spelled, first, second, cwd = result.python.split("|")
    assert path == f"{mini.parent}{os.pathsep}/elsewhere"
    assert (spelled, first, second) == ("helper", "sglang.srt.layers.communicator", "sglang.srt.server_args")
    assert cwd.startswith("sm120patch-runtime-")
    monkeypatch.delenv("PYTHONPATH")
    alone = check(tree, [], python, 30).python
    assert alone is not None and alone.startswith(f"{mini.parent}|helper|||sm120patch-runtime-")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("echo 'Traceback: boom' >&2; exit 1", "{python} could not import the patched modules: Traceback: boom"),
        ("printf '{' > \"$4\"; exit 0", "{python} could not import the patched modules: exit 0"),
        ("printf '[1, 2]' > \"$4\"", "{python} answered the runtime check with a JSON list"),
        ('printf \'"x"\' > "$4"', "{python} answered the runtime check with a JSON str"),
    ],
)
@pytest.mark.offline
def test_a_check_without_an_answer_is_an_environment_problem(
    mini: Path, tmp_path: Path, body: str, message: str
) -> None:
    python = answering_python(tmp_path, body)
    with pytest.raises(EnvironmentProblem) as error:
        check(from_directory(mini), [], python, 30)
    assert str(error.value) == message.format(python=python)


@pytest.mark.offline
def test_a_check_that_cannot_start_or_hangs_is_an_environment_problem(mini: Path, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-python")
    with pytest.raises(EnvironmentProblem) as error:
        check(from_directory(mini), [], missing, 30)
    assert str(error.value) == f"could not run {missing} to import the patched modules: No such file or directory"
    python = answering_python(tmp_path, "exec sleep 30")
    with pytest.raises(EnvironmentProblem) as hung:
        check(from_directory(mini), [], python, 0.3)
    assert str(hung.value) == f"{python} did not import the patched modules within 0.3 s (--timeout raises the limit)"


@pytest.mark.offline
def test_an_answer_with_bytes_that_are_not_utf8_is_read_with_them_replaced(mini: Path, tmp_path: Path) -> None:
    """A module path in Latin-1 (an old locale) in the answer: the answer still reads."""
    python = answering_python(tmp_path, 'printf \'{"python": "caf\\351", "modules": []}\' > "$4"; exit 0')
    result = check(from_directory(mini), ["srt/layers/communicator.py"], python, 30)
    assert (result.exit_code, result.python) == (0, "caf\ufffd")


def test_a_check_that_stopped_before_torch_says_null_for_every_step_it_did_not_reach() -> None:
    from sm120patch.patcher.runtime import RuntimeCheck

    stopped = RuntimeCheck("/env/bin/python", None, None, None, (), 3)
    assert stopped.to_json() == {
        "python": "/env/bin/python",
        "torch": None,
        "sglang": None,
        "probe": None,
        "modules": [],
        "exit_code": 3,
    }
