"""The options both benches share (``_shared_options``: where sglang is, --tp, --hidden,
--layers, --dtype, --timeout, --plot), built here on a command of the test's own: the cli
applies them while it is imported, so a test that imports it once cannot see a change to how
they are built.  ``bench kernel`` and ``bench server`` themselves are checked through their
``--help`` in test_cli_in_process.py.

No fakes: the command records what it is given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from sm120patch.cli.bench import _shared_options

HELP = {"tp": "TP, as this bench means it.", "hidden": "HIDDEN, as this bench means it.", "layers": "LAYERS, as it."}


def shared_command() -> tuple[click.Command, list[dict[str, Any]]]:
    given: list[dict[str, Any]] = []

    @click.command()
    @_shared_options(**HELP)
    def probe(**kwargs: Any) -> None:
        given.append(kwargs)

    return probe, given


def parse(*args: str) -> dict[str, Any]:
    command, given = shared_command()
    result = CliRunner().invoke(command, list(args), env={"SM120PATCH_PYTHON": None, "SM120PATCH_SGLANG_PATH": None})
    assert result.exit_code == 0, result.output
    return given[0]


def test_the_defaults() -> None:
    assert parse() == {
        "python": None,
        "sglang_path": None,
        "as_json": False,
        "tp": None,
        "hidden": None,
        "layers": None,
        "dtype": "bf16",
        "timeout": 300,
        "plot": None,
    }


def test_each_option_reaches_the_bench(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")  # --plot checks it can draw before anything is measured
    given = parse(
        "--tp", "3", "--hidden", "4096", "--layers", "2", "--dtype", "fp16", "--timeout", "2.5",
        "--plot", str(tmp_path / "p.svg"), "--json",
    )  # fmt: skip
    assert given == {
        "python": None,
        "sglang_path": None,
        "as_json": True,
        "tp": 3,
        "hidden": 4096,
        "layers": 2,
        "dtype": "fp16",
        "timeout": 2.5,
        "plot": tmp_path / "p.svg",
    }


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--tp", "0"], "Invalid value for '--tp': 0 is not in the range x>=1."),
        (["--layers", "0"], "Invalid value for '--layers': 0 is not in the range x>=1."),
        (["--hidden", "100"], "100: the hidden size must be a positive multiple of 8"),
        (["--dtype", "fp8"], "Invalid value for '--dtype': 'fp8' is not one of 'bf16', 'fp16'."),
        (["--timeout", "0.5"], "Invalid value for '--timeout': 0.5 is not in the range x>=1."),
        (["--plot", "plot.pdf"], "Invalid value for '--plot': plot.pdf: the file must end in .png or .svg"),
        (["--sglang-path", __file__], "is a file"),
    ],
    ids=["tp", "layers", "hidden", "dtype", "timeout", "plot", "sglang-path"],
)
def test_what_the_options_refuse(args: list[str], said: str) -> None:
    command, given = shared_command()
    refused = CliRunner().invoke(command, args)
    assert refused.exit_code == 2 and said in " ".join(refused.output.split()), refused.output
    assert given == []


def test_the_help_lists_them_in_order_each_with_what_it_means_to_this_bench() -> None:
    command, _ = shared_command()
    lines = CliRunner().invoke(command, ["--help"], terminal_width=400).output.splitlines()
    # each "  --name META<padding>help": the padding (two spaces or more) made one space
    options = [" ".join(part.strip() for part in line.split("  ", 2)[1:]) for line in lines if line.startswith("  -")]
    assert options == [
        "--python PATH Interpreter (or venv / conda env root) of the environment that serves sglang.  "
        "[env var: SM120PATCH_PYTHON]",
        "--sglang-path DIRECTORY The sglang package directory itself (site-packages/sglang, or a checkout's "
        "python/sglang).  [env var: SM120PATCH_SGLANG_PATH]",
        "--json Print one JSON object on stdout.",
        f"--tp INTEGER RANGE {HELP['tp']}  [x>=1]",
        f"--hidden INTEGER {HELP['hidden']}",
        f"--layers INTEGER RANGE {HELP['layers']}  [x>=1]",
        "--dtype [bf16|fp16] [default: bf16]",
        "--timeout FLOAT RANGE Seconds a rank may spend in one phase before every rank is stopped (6x for the "
        "first workspace, which may build FlashInfer's module).  [default: 300; x>=1]",
        "--plot TEXT Also draw latency against tokens to FILE.png or FILE.svg (needs matplotlib: sm120patch[plot]).",
        "--help Show this message and exit.",
    ]
