"""The options every tree command shares (``--json``, ``--python``, ``--sglang-path``,
``--timeout``), built here on a command of the test's own: the cli applies them while it is
imported, so a test that imports it once cannot see a change to how they are built.

No fakes: the command records what it is given; the mini release is a real tree on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner

from sm120patch.cli import options, run
from sm120patch.patcher.outcome import Command, Outcome
from sm120patch.runner import DEFAULT_TIMEOUT_S


def options_command() -> tuple[click.Command, list[dict[str, Any]]]:
    given: list[dict[str, Any]] = []

    @click.command()
    @options.location_options
    @options.timeout_option
    def probe(**kwargs: Any) -> None:
        given.append(kwargs)

    return probe, given


def parse(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    command, given = options_command()
    result = CliRunner().invoke(command, list(args), env=env)
    assert result.exit_code == 0, result.output
    return given[0]


def test_the_defaults(monkeypatch: Any) -> None:
    monkeypatch.delenv("SM120PATCH_PYTHON", raising=False)
    monkeypatch.delenv("SM120PATCH_SGLANG_PATH", raising=False)
    assert parse() == {"as_json": False, "python": None, "sglang_path": None, "timeout": DEFAULT_TIMEOUT_S}


def test_each_option_and_its_variable(tmp_path: Path) -> None:
    given = parse("--json", "--python", "env/bin/python", "--sglang-path", str(tmp_path), "--timeout", "2.5")
    assert given["as_json"] is True
    assert given["python"] == str(Path.cwd() / "env/bin/python")  # absolute, as the user meant it
    assert given["sglang_path"] == tmp_path and isinstance(given["sglang_path"], Path)
    assert given["timeout"] == 2.5
    by_env = parse(env={"SM120PATCH_PYTHON": "/srv/bin/python", "SM120PATCH_SGLANG_PATH": str(tmp_path)})
    assert (by_env["python"], by_env["sglang_path"]) == ("/srv/bin/python", tmp_path)


def test_relative_paths_are_made_absolute_as_the_user_meant_them(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "pkg").mkdir()
    monkeypatch.chdir(tmp_path)
    given = parse("--sglang-path", "pkg", "--python", "env/bin/python")
    assert (given["sglang_path"], given["python"]) == (tmp_path / "pkg", str(tmp_path / "env/bin/python"))


def test_what_the_options_refuse(tmp_path: Path) -> None:
    command, _ = options_command()
    a_file = tmp_path / "f"
    a_file.write_text("")
    refused = CliRunner().invoke(command, ["--sglang-path", str(a_file)])
    assert refused.exit_code == 2 and "is a file" in refused.output
    refused = CliRunner().invoke(command, ["--timeout", "0.5"])
    assert refused.exit_code == 2 and "0.5 is not in the range x>=1" in refused.output


def test_a_refused_value_from_the_variable_names_the_variable(tmp_path: Path) -> None:
    """Only where the value came from ``SM120PATCH_SGLANG_PATH``; typed, the option is named alone."""
    command, _ = options_command()
    a_file = tmp_path / "f"
    a_file.write_text("")
    refused = CliRunner().invoke(command, [], env={"SM120PATCH_SGLANG_PATH": str(a_file)})
    assert refused.exit_code == 2
    assert "Invalid value for SM120PATCH_SGLANG_PATH (the environment variable for '--sglang-path'):" in (
        refused.output
    )
    typed = CliRunner().invoke(command, ["--sglang-path", str(a_file)], env={"SM120PATCH_SGLANG_PATH": None})
    assert typed.exit_code == 2 and "Invalid value for '--sglang-path':" in typed.output


def test_the_help_names_each_option_its_variable_and_default() -> None:
    command, _ = options_command()
    text = " ".join(CliRunner().invoke(command, ["--help"], terminal_width=400).output.split())
    for expected in (
        f"--python PATH {options.PYTHON_HELP} [env var: SM120PATCH_PYTHON]",
        f"--sglang-path DIRECTORY {options.PATH_HELP} [env var: SM120PATCH_SGLANG_PATH]",
        "--json Print one JSON object on stdout.",
        f"--timeout FLOAT RANGE {options.TIMEOUT_HELP} [default: {DEFAULT_TIMEOUT_S}; x>=1]",
    ):
        assert expected in text, (expected, text)


def test_a_tree_command_passes_the_timeout_only_to_what_takes_it(mini: Path) -> None:
    seen: list[dict[str, Any]] = []

    def with_timeout(tree: Any, timeout: float) -> Outcome:
        seen.append({"timeout": timeout})
        return Outcome(Command.LIST, tree, 0, "done")

    def without(tree: Any) -> Outcome:
        seen.append({})
        return Outcome(Command.LIST, tree, 0, "done")

    for func in (with_timeout, without):
        command = click.command()(run.tree_command(func))
        result = CliRunner().invoke(command, ["--sglang-path", str(mini), "--timeout", "7"])
        assert result.exit_code == 0, result.output
    assert seen == [{"timeout": 7.0}, {}]
