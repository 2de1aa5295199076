"""Shell completion offers patch ids after ``--only`` / ``--skip`` (click's bash protocol)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sm120patch.cli import main
from sm120patch.patcher.plan.registry import all_patches

IDS = [p.id for p in all_patches()]
ROOT = Path(__file__).resolve().parents[2]


def complete(*words: str) -> list[str]:
    """What bash completion gets for ``sm120patch WORDS <TAB>`` (the last word is being typed)."""
    env = {"_SM120PATCH_COMPLETE": "bash_complete", "COMP_WORDS": " ".join(["sm120patch", *words])}
    env["COMP_CWORD"] = str(len(words))
    result = CliRunner().invoke(main, [], env=env, prog_name="sm120patch")
    assert result.exit_code == 0, result.output
    return [line.split(",", 1)[1] for line in result.stdout.splitlines() if line.startswith("plain,")]


@pytest.mark.parametrize("option", ["--only", "--skip"])
def test_every_patch_id_is_offered(option: str) -> None:
    assert complete("apply", option, "") == IDS


def test_the_last_id_of_a_list_is_completed_and_chosen_ones_are_not_offered_again() -> None:
    offered = complete("apply", "--only", "communicator-import,communicator-f")
    assert offered == ["communicator-import,communicator-flag", "communicator-import,communicator-fusion-gate"]
    assert complete("apply", "--only", "communicator-import,communicator-i") == []


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command under ``group``, each with the words that name it."""
    found: list[tuple[tuple[str, ...], click.Command]] = []
    for name, command in group.commands.items():
        found.append(((*path, name), command))
        if isinstance(command, click.Group):
            found.extend(_commands(command, (*path, name)))
    return found


def _names(command: click.Command) -> set[str]:
    ctx = click.Context(command, help_option_names=main.context_settings["help_option_names"])
    return {name for p in command.get_params(ctx) if not p.hidden for name in (*p.opts, *p.secondary_opts)}  # type: ignore[attr-defined]


@pytest.mark.offline  # starts bash and, from its completion function, sm120patch
def test_bash_completes_every_subcommand_and_option(tmp_path: Path) -> None:
    """bash's own machinery: the script ``_SM120PATCH_COMPLETE=bash_source`` prints, sourced,
    and its function run for ``sm120patch WORDS <Tab>`` as bash runs it; what it leaves in
    COMPREPLY.  ``bench <Tab>`` once completed nothing, the note of the old ``bench`` alias
    printed into the prompt."""
    (tmp_path / "sm120patch").write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom sm120patch.cli import main\nmain()\n"
    )
    (tmp_path / "sm120patch").chmod(0o755)
    cases: list[tuple[tuple[str, ...], set[str]]] = [(("",), set(main.commands))]
    cases += [((*words, ""), set(c.commands)) for words, c in _commands(main) if isinstance(c, click.Group)]
    cases += [((*words, "-"), _names(c)) for words, c in [((), main), *_commands(main)]]
    cases += [(("bench", "--tp", "2", "--to"), {"--tokens"}), (("bench", "--server", "--no"), {"--no-kernel"})]
    script = ['eval "$(_SM120PATCH_COMPLETE=bash_source sm120patch)"', "complete -p sm120patch"]
    for words, _ in cases:
        line = " ".join(shlex.quote(w) for w in ("sm120patch", *words))
        script.append(f"COMP_WORDS=({line}); COMP_CWORD=${{#COMP_WORDS[@]}}; COMP_CWORD=$((COMP_CWORD-1))")
        script.append('COMPREPLY=(); _sm120patch_completion sm120patch; echo "${COMPREPLY[*]}"')
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True, text=True, env=env, timeout=120)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    registered, *replies = proc.stdout.splitlines()
    assert registered.endswith(" -F _sm120patch_completion sm120patch"), registered
    assert [set(r.split()) for r in replies] == [expected for _, expected in cases]
