"""Each option's help agrees with what click enforces: no default in words beside the one
click shows, and a range said in words is the range click checks (``bench kernel --tp`` said
"(2 or more)" and "[x>=1]" and then refused 1 with "x>=2"; ``--timeout`` said "120 s unless
given" and "[default: 20.0]")."""

from __future__ import annotations

import re

import click
import pytest

from sm120patch.cli import main

IN_WORDS = re.compile(r"\b(\d+) or more\b|\bat least (\d+)\b")
DEFAULT_IN_WORDS = re.compile(r"\[default:|unless given|by default", re.IGNORECASE)


def _options() -> list[tuple[str, click.Context, click.Option]]:
    found: list[tuple[str, click.Context, click.Option]] = []

    def walk(command: click.Command, ctx: click.Context) -> None:
        found.extend((ctx.command_path, ctx, p) for p in command.params if isinstance(p, click.Option) and p.help)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, click.Context(sub, info_name=name, parent=ctx))

    walk(main, click.Context(main, info_name="sm120patch", **main.context_settings))
    return found


OPTIONS = _options()
IDS = [f"{path} {option.opts[-1]}" for path, _, option in OPTIONS]


def _shown_default(ctx: click.Context, option: click.Option) -> bool:
    record = option.get_help_record(ctx)
    return record is not None and "[default:" in record[1].replace(option.help or "", "")


@pytest.mark.parametrize(("path", "ctx", "option"), OPTIONS, ids=IDS)
def test_a_default_is_said_once(path: str, ctx: click.Context, option: click.Option) -> None:
    assert not (_shown_default(ctx, option) and DEFAULT_IN_WORDS.search(option.help or "")), option.help


@pytest.mark.parametrize(("path", "ctx", "option"), OPTIONS, ids=IDS)
def test_a_range_in_words_is_the_range_click_checks(path: str, ctx: click.Context, option: click.Option) -> None:
    said = {int(a or b) for a, b in IN_WORDS.findall(option.help or "")}
    if said:
        assert isinstance(option.type, click.IntRange | click.FloatRange), option.help
        assert said == {option.type.min}, (option.help, option.type)


@pytest.mark.parametrize(("path", "ctx", "option"), OPTIONS, ids=IDS)
def test_the_default_is_in_the_range(path: str, ctx: click.Context, option: click.Option) -> None:
    default = option.get_default(ctx, call=False)
    if isinstance(option.type, click.IntRange | click.FloatRange) and isinstance(default, int | float):
        assert option.type_cast_value(ctx, default) == default
