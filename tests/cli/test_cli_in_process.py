"""The command line itself (sm120patch/cli/), in this process: each command's options as
``--help`` shows them, what each option hands the command, option checks before anything
runs, and the one contract for errors (exit code, one line on stderr, one JSON object).

Fakes, each named where it is used: recording stand-ins for the command bodies (``apply``,
``revert``, ``demo``, both benches) that keep what the command line passed them; a Ctrl-C,
an OSError or a bug raised where the real code would run; and ``os.access`` saying a folder
cannot be written (the tests run as root, for whom it always can).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from sm120patch import __version__, cli
from sm120patch.bench.shown import ShownBench
from sm120patch.cli import options as cli_options
from sm120patch.errors import NotAsAsked
from sm120patch.patcher.plan.registry import all_patches
from tests.support.cli import jrun, one_json_object, run
from tests.support.mini_sglang import COMM

IDS = [p.id for p in all_patches()]
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)

LOCATION = {
    "--python PATH": "Interpreter (or venv / conda env root) of the environment that serves sglang.  "
    "[env var: SM120PATCH_PYTHON]",
    "--sglang-path DIRECTORY": "The sglang package directory itself (site-packages/sglang, or a checkout's "
    "python/sglang).  [env var: SM120PATCH_SGLANG_PATH]",
    "--json": "Print one JSON object on stdout.",
}
TIMEOUT = {
    "--timeout FLOAT RANGE": "Seconds each step in the serving interpreter may take: looking for sglang with "
    "--python, nvidia-smi, doctor's host facts (the default below) and verify --runtime's imports (120 s where "
    "--timeout is not given).  [default: 20.0; x>=1]",
}
HELP = {"-h, --help": "Show this message and exit."}
KNOWN_LAYOUTS = {
    "--known-layouts-only": "Patch only targets found where a known sglang release keeps them: a target found by "
    "role (what it does, in a release that moved it) is then drift, and nothing is written.  "
    "[env var: SM120PATCH_KNOWN_LAYOUTS_ONLY]"
}

BENCH_SHARED = {
    "--dtype [bf16|fp16]": "[default: bf16]",
    "--timeout FLOAT RANGE": "Seconds a rank may spend in one phase before every rank is stopped (6x for the "
    "first workspace, which may build FlashInfer's module).  [default: 300; x>=1]",
    "--plot TEXT": "Also draw latency against tokens to FILE.png or FILE.svg (needs matplotlib: sm120patch[plot]).",
}
OPTIONS: dict[str, dict[str, str]] = {
    "apply": {
        **LOCATION,
        **TIMEOUT,
        **KNOWN_LAYOUTS,
        "--only IDS": "Comma-separated patch ids; their dependencies are pulled in.",
        "--skip IDS": "Comma-separated patch ids to leave out.",
        "--dry-run": "Write nothing; print the unified diff.",
        "--strict": "Exit 1 and write nothing when the fused path would still not run (FlashInfer without the "
        "SM12x kernel, an SM check no patch owns, a patch left out that keeps it shut); for image builds.",
        "--allow-missing-kernel": "Write even though the FlashInfer beside sglang has no SM12x allreduce kernel "
        "(fusion would then stop sglang <= 0.5.9 from starting, and change nothing in later releases).",
        "--fuse-up-to N|measured|sglang": "Also lower sglang's fusion token limit to N tokens, or to the crossover "
        "the last `sm120patch bench kernel` saved for this tree (`measured`); never above sglang's own, which "
        "`sglang` puts back.",
        "--tp INTEGER RANGE": "With --fuse-up-to measured: the TP sglang serves at (refuses another).  [x>=2]",
        "--auto-enable-tp [2|any]": "The TP at which sglang turns fusion on by itself on SM12x for the models it "
        "lists: 2 (the default: TP 4 regressed on PCIe, sglang#32330) or any (as on SM90/SM100). Recorded: a later "
        "apply keeps it.",
        **HELP,
    },
    "verify": {
        **LOCATION,
        **TIMEOUT,
        **KNOWN_LAYOUTS,
        "--runtime": "Also import the patched modules in the serving interpreter (needs torch there) and report "
        "the SM120 probe and each module's SM flags.",
        "--strict": "Exit 1 on any warning about the fused path (an SM check no patch owns, FlashInfer without "
        "the SM12x kernel, a patch left out that keeps it shut).",
        **HELP,
    },
    "revert": {
        **LOCATION,
        **TIMEOUT,
        **KNOWN_LAYOUTS,
        "--force": "Restore even files changed since apply (their current content is kept aside).",
        "--dry-run": "Write nothing; print the diff that revert would apply.",
        **HELP,
    },
    "list": {
        **LOCATION,
        **TIMEOUT,
        **KNOWN_LAYOUTS,
        "--docs": "Also print each patch's description and where it looks.",
        **HELP,
    },
    "doctor": {
        **LOCATION,
        **TIMEOUT,
        "--tp INTEGER RANGE": "The tensor-parallel size you serve with.  [x>=1]",
        **HELP,
    },
    "bench": {**HELP},
    "bench kernel": {
        **LOCATION,
        "--tp INTEGER RANGE": "Ranks (GPUs) to measure with (2 or more).  [default: every visible GPU]  [x>=2]",
        "--hidden INTEGER": "The model's hidden size.  [default: --model-config's, else 7168]",
        "--layers INTEGER RANGE": "Estimate a step of a model with this many layers (with --hidden).  [x>=1]",
        **BENCH_SHARED,
        "--tokens TEXT": "Comma-separated token counts (batch sizes) to measure.  "
        "[default: 1,2,4,8,16,32,64,128,256,512,1024,2048]",
        "--model-config PATH": "A Hugging Face config.json (or its folder): measure at its hidden size and "
        "estimate a step of it.",
        "--baseline [auto|sglang|stand-in]": "What fusion is compared with: sglang's own allreduce and RMSNorm "
        "(sglang: or fail), named stand-ins (stand-in), or sglang's where it imports (auto).  [default: auto]",
        "--disable-custom-all-reduce": "Measure sglang as launched with --disable-custom-all-reduce (NCCL for "
        "every allreduce).",
        "--replays INTEGER RANGE": "Timed CUDA-graph replays per size.  [default: 40; x>=30]",
        **HELP,
    },
    "bench server": {
        **LOCATION,
        "--tp INTEGER RANGE": "Ranks (GPUs) to serve with (1 or more).  [default: every visible GPU]  [x>=1]",
        "--hidden INTEGER": "The bundled model's hidden size.  [default: 7168]",
        "--layers INTEGER RANGE": "The bundled model's layers.  [default: 4]  [x>=1]",
        **BENCH_SHARED,
        "--model-path PATH": "A local model dir (config.json only).",
        "--batch-sizes TEXT": "Decode batch sizes.  [default: 1,8,32,64]",
        "--input-len INTEGER RANGE": "Prompt tokens.  [default: 256; x>=1]",
        "--output-len INTEGER RANGE": "Decode tokens.  [default: 64; x>=2]",
        "--repeat INTEGER RANGE": "Runs per mode.  [default: 2; x>=1]",
        "--server-arg TEXT": "One more argument for sglang.",
        "--fuse-up-to N|measured": "A third setting, fusion on up to N tokens (or the crossover bench saved: "
        "`measured`).",
        "--no-kernel": "Skip the kernel-level bench that runs beside it (same TP, hidden size and dtype).",
        "--configs A,B": "The configurations to run (default: every one this release and --tp take; sglang's "
        "default always runs): default, fusion, fusion-limit, pcie-ipc, pcie-ipc+fusion, pcie-ipc+fusion-limit.",
        "--plan": "Print the configurations it would run, each with its environment and bench_one_batch command "
        "line, and stop (no GPU needed; needs --tp).",
        **HELP,
    },
    "demo": {
        "--sglang-version TEXT": "Release to download (default: the pinned demo release).",
        "--wheel FILE": "Use this sglang wheel instead of downloading.",
        "--keep": "Keep the scratch directory and print where it is.",
        **HELP,
    },
}


def options(*command: str) -> dict[str, str]:
    """``sm120patch COMMAND --help``'s options, each with its help, on a terminal wide enough
    that nothing wraps."""
    result = CliRunner().invoke(cli.main, [*command, "--help"], terminal_width=1000, max_content_width=1000)
    assert result.exit_code == 0, result.output
    rows: dict[str, str] = {}
    pending = None  # an option too long for the first column: its help is on the next line
    for line in result.stdout.partition("\nOptions:\n")[2].splitlines():
        if not line.strip():
            break
        if pending is not None:
            rows[pending], pending = line.strip(), None
            continue
        name, gap, text = line.strip().partition("  ")
        if gap:
            rows[name] = text.strip()
        else:
            pending = name
    return rows


def last_line(err: str) -> str:
    return err.strip().splitlines()[-1]


# --- --help ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_each_command_shows_its_options_as_documented(command: str) -> None:
    assert options(*command.split()) == OPTIONS[command]


def test_the_group_shows_version_and_help_and_says_which_releases() -> None:
    assert options() == {"-V, --version": "Show the version and exit.", **HELP}
    for flag in ("-V", "--version"):
        code, out, _ = run(flag)
        assert (code, out) == (
            0,
            f"sm120patch {__version__} — patches sglang 0.5.4 to 0.5.23 (newer releases are checked by structure), "
            "refuses older ones\n",
        )
    code, out, _ = run("-h")
    assert code == 0 and "Exit codes: 0 ok, 1 not as asked" in out


def test_the_command_line_is_read_from_sys_argv(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import atexit
    import signal
    import sys

    monkeypatch.setattr(sys, "argv", ["sm120patch", "--version"])
    try:
        with pytest.raises(SystemExit) as exited:
            cli.main.main()
    finally:  # its own process's exit holds Ctrl-C back until it ends: not this test process's
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        atexit.unregister(cli._answer_held_interrupt)
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"sm120patch {__version__} — ")


# --- shell completion -----------------------------------------------------------------------------


def test_completion_offers_each_id_with_its_summary() -> None:
    offered = cli_options.complete_ids(click.Context(cli.main), cli.main, "")
    assert [(c.value, c.help) for c in offered] == [(p.id, p.summary) for p in all_patches()]


def test_completion_completes_the_last_id_of_a_list() -> None:
    offered = cli_options.complete_ids(click.Context(cli.main), cli.main, "communicator-import,communicator-f")
    assert [c.value for c in offered] == [
        "communicator-import,communicator-flag",
        "communicator-import,communicator-fusion-gate",
    ]
    taken = cli_options.complete_ids(click.Context(cli.main), cli.main, "server-args-auto-enable,communicator-import,")
    assert [c.value for c in taken] == [
        f"server-args-auto-enable,communicator-import,{i}" for i in IDS[1:] if i != "server-args-auto-enable"
    ]


# --- what each option hands the command ----------------------------------------------------------


class Recorder:
    """Fake command body: keeps the arguments of each call and answers ``answer`` (a value, or
    a function of the arguments)."""

    def __init__(self, answer: Any = 0) -> None:
        self.answer = answer
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        return self.answer(*args, **kwargs) if callable(self.answer) else self.answer


def through(monkeypatch: pytest.MonkeyPatch, module: str, name: str) -> Recorder:
    """The real ``module.name``, with each call recorded."""
    import importlib

    owner = importlib.import_module(module)
    recorder = Recorder(getattr(owner, name))
    monkeypatch.setattr(owner, name, recorder)
    return recorder


def test_apply_hands_over_its_options(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    apply = through(monkeypatch, "sm120patch.patcher.commands.apply", "apply")
    code, data = jrun("apply", "--sglang-path", str(mini), "--dry-run")
    assert code == 0 and data["command"] == "apply"
    (args, kwargs) = apply.calls[-1]
    assert args[1] is None  # every patch
    assert kwargs == {
        "dry_run": True,
        "notes": [],
        "strict": False,
        "allow_missing_kernel": False,
        "timeout": 20.0,
        "token_limit": None,
        "auto_enable_tp": None,
    }
    jrun(
        "apply", "--sglang-path", str(mini), "--only", "communicator-fusion-gate", "--strict",
        "--allow-missing-kernel", "--timeout", "7",
    )  # fmt: skip
    (args, kwargs) = apply.calls[-1]
    assert [p.id for p in args[1]] == ["communicator-import", "communicator-flag", "communicator-fusion-gate"]
    assert kwargs == {
        "dry_run": False,
        "notes": [
            "also selecting communicator-flag (required by communicator-fusion-gate)",
            "also selecting communicator-import (required by communicator-flag)",
        ],
        "strict": True,
        "allow_missing_kernel": True,
        "timeout": 7.0,
        "token_limit": None,
        "auto_enable_tp": None,
    }


@pytest.mark.parametrize(
    "selection",
    [
        ["--skip", "workspace-preflight"],
        ["--only", " communicator-import , server-args-auto-enable,fusion-backend-resolver,workspace-preflight, "],
        ["--only", "communicator-import,server-args-auto-enable,fusion-backend-resolver,workspace-preflight,"
         "communicator-flag", "--skip", "communicator-flag"],
        ["--skip", "communicator-flag,communicator-fusion-gate", "--only", "communicator-import,"
         "server-args-auto-enable,fusion-backend-resolver,workspace-preflight,communicator-flag"],
    ],
)  # fmt: skip
def test_only_and_skip_select_together_in_either_order(
    mini: Path, monkeypatch: pytest.MonkeyPatch, selection: list[str]
) -> None:
    apply = through(monkeypatch, "sm120patch.patcher.commands.apply", "apply")
    code, data = jrun("apply", "--sglang-path", str(mini), "--dry-run", *selection)
    assert code == 0, data
    chosen = {p.id for p in apply.calls[-1][0][1]}
    if "--skip" in selection and "workspace-preflight" in selection:
        assert chosen == set(IDS) - {"workspace-preflight"}
    else:
        expected = {"communicator-import", "server-args-auto-enable", "fusion-backend-resolver", "workspace-preflight"}
        assert chosen == expected


@pytest.mark.parametrize(
    "selection",
    [
        ["--only", "communicator-fusion-gate", "--skip", "communicator-flag"],
        ["--skip", "communicator-flag", "--only", "communicator-fusion-gate"],
    ],
)
def test_a_skip_the_only_needs_is_a_usage_error_in_either_order(tmp_path: Path, selection: list[str]) -> None:
    code, data = jrun("apply", "--python", str(tmp_path / "no-python"), *selection)  # checked before sglang
    assert code == 2
    assert data["error"] == "cannot skip communicator-flag: communicator-fusion-gate needs it (skip that too)"


def test_revert_hands_over_force_and_dry_run(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    revert = through(monkeypatch, "sm120patch.patcher.commands.revert", "revert")
    assert jrun("revert", "--sglang-path", str(mini))[0] == 0
    assert jrun("revert", "--sglang-path", str(mini), "--force", "--dry-run")[0] == 0
    assert [kwargs for _, kwargs in revert.calls] == [
        {"force": False, "dry_run": False},
        {"force": True, "dry_run": True},
    ]


def test_the_text_report_of_a_dry_run_says_would_apply_and_the_diff_goes_to_stdout(mini: Path) -> None:
    code, out, err = run("apply", "--sglang-path", str(mini), "--dry-run")
    assert code == 0
    assert "communicator-import        pending, would apply" in err and "-> applied" not in err
    assert out.startswith(f"--- a/sglang/{COMM}\n")
    code, out, _ = run("apply", "--sglang-path", str(mini))
    assert (code, out) == (0, "")  # a real apply prints no diff
    code, out, err = run("revert", "--sglang-path", str(mini), "--dry-run")
    assert code == 0 and out.startswith(f"--- a/sglang/{COMM}\n") and "dry run: would restore 3 files" in err
    code, out, _ = run("revert", "--sglang-path", str(mini))
    assert code == 0 and out == ""  # the diff only for a dry run


def test_list_docs_prints_the_descriptions_on_stdout(mini: Path) -> None:
    code, out, err = run("list", "--sglang-path", str(mini), "--docs")
    assert code == 0 and "communicator-fusion-gate" in out
    assert "widen the runtime fusion gate's SM clause with _is_sm120_supported" in err  # the summary column
    code, out, _ = run("list", "--sglang-path", str(mini))
    assert code == 0 and out == ""


def test_demo_hands_over_its_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sm120patch.patcher.commands import demo

    run_demo = Recorder(1)  # fake demo: records, and says its cycle failed
    monkeypatch.setattr(demo, "run_demo", run_demo)
    wheel = tmp_path / "sglang-0.5.14-py3-none-any.whl"
    wheel.write_bytes(b"")
    assert run("demo")[0] == 1
    assert run("demo", "--sglang-version", "0.5.14", "--wheel", str(wheel), "--keep")[0] == 1
    assert [args for args, _ in run_demo.calls] == [(None, None, False), ("0.5.14", wheel, True)]


@pytest.mark.offline
def test_doctor_hands_over_tp_and_timeout(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    read_host = through(monkeypatch, "sm120patch.doctor.host", "read_host")
    diagnose = through(monkeypatch, "sm120patch.doctor.diagnose", "diagnose")
    code, data = jrun("doctor", "--sglang-path", str(mini), "--tp", "4", "--timeout", "9")
    assert code == data["exit_code"] and "error" not in data
    assert read_host.calls[0][1] == {"timeout": 9.0}
    (args, _) = diagnose.calls[0]
    assert args[0].package_dir == mini.resolve() and args[1] is None and args[4] == 4
    assert set(args[2]) == set(IDS)  # each patch's state in the located tree


@pytest.mark.offline
def test_doctor_without_sglang_still_runs_the_host_checks_then_exits_2(tmp_path: Path) -> None:
    code, data = jrun("doctor", "--sglang-path", str(tmp_path))
    said = f"--sglang-path {tmp_path}: not an sglang package"
    assert code == 2 and data["error"].startswith(said) and data["sglang"] is None
    assert {f["id"] for f in data["findings"]} >= {"gpus", "sglang"}
    code, out, err = run("doctor", "--sglang-path", str(tmp_path))
    assert code == 2 and out == "" and "no sglang found" in err


#: What the fake benches answer: a result with nothing in it, exit 0.
MEASURED_NOTHING = ShownBench({}, lambda out: None, 0)


def keywords(**asked: Any) -> tuple[tuple[()], dict[str, Any]]:
    """A call as the recorder keeps it, made with keywords only (as the commands call bench)."""
    return (), asked


def kernel_bench(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    from sm120patch.bench.kernel import command as bench

    recorder = Recorder(MEASURED_NOTHING)  # fake kernel bench: records, measures nothing
    monkeypatch.setattr(bench, "bench", recorder)
    return recorder


def server_bench(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    from sm120patch.bench.server import command as bench_server

    recorder = Recorder(MEASURED_NOTHING)  # fake bench server: records, runs no sglang
    monkeypatch.setattr(bench_server, "bench_server", recorder)
    return recorder


def test_bench_hands_over_its_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = kernel_bench(monkeypatch)
    assert run("bench", "kernel")[0] == 0
    assert bench.calls == [
        keywords(
            python=None,
            sglang_path=None,
            as_json=False,
            tp=None,
            tokens=TOKENS,
            hidden=None,
            dtype="bf16",
            replays=40,
            timeout=300.0,
            plot=None,
            model_config=None,
            layers=None,
            baseline="auto",
            custom_allreduce=True,
        )
    ]


def test_bench_hands_over_each_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = kernel_bench(monkeypatch)
    config = tmp_path / "config.json"
    config.write_text("{}")
    code, _, err = run(
        "bench", "kernel", "--sglang-path", str(tmp_path), "--json", "--tp", "4", "--tokens", "64, 8,8",
        "--hidden", "4096", "--dtype", "fp16", "--replays", "30", "--timeout", "1", "--plot", str(tmp_path / "p.svg"),
        "--model-config", str(config), "--layers", "3", "--baseline", "stand-in", "--disable-custom-all-reduce",
    )  # fmt: skip
    assert code == 0, err
    assert bench.calls == [
        keywords(
            python=None,
            sglang_path=tmp_path,
            as_json=True,
            tp=4,
            tokens=(8, 64),
            hidden=4096,
            dtype="fp16",
            replays=30,
            timeout=1.0,
            plot=tmp_path / "p.svg",
            model_config=config,
            layers=3,
            baseline="stand-in",
            custom_allreduce=False,
        )
    ]


def test_bench_server_hands_over_its_defaults_and_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = server_bench(monkeypatch)
    assert run("bench", "server")[0] == 0
    assert bench.calls[-1] == keywords(
        python=None,
        sglang_path=None,
        as_json=False,
        tp=None,
        batch_sizes="1,8,32,64",
        input_len=256,
        output_len=64,
        repeat=2,
        timeout=300.0,
        model_path=None,
        hidden=7168,
        layers=4,
        dtype="bf16",
        server_args=(),
        plot=None,
        kernel=True,
        fuse_up_to=None,
        config_names=None,
        plan_only=False,
    )
    code, _, err = run(
        "bench", "server", "--python", str(tmp_path / "py"), "--tp", "1", "--batch-sizes", "1,2",
        "--input-len", "1", "--output-len", "2", "--repeat", "1", "--timeout", "5", "--model-path", str(tmp_path),
        "--hidden", "1024", "--layers", "2", "--dtype", "fp16", "--server-arg=--a", "--server-arg", "b",
        "--plot", str(tmp_path / "p.png"), "--no-kernel", "--configs", "pcie-ipc,default", "--plan",
    )  # fmt: skip
    assert code == 0, err
    assert bench.calls[-1] == keywords(
        python=str(tmp_path / "py"),
        sglang_path=None,
        as_json=False,
        tp=1,
        batch_sizes="1,2",
        input_len=1,
        output_len=2,
        repeat=1,
        timeout=5.0,
        model_path=tmp_path,
        hidden=1024,
        layers=2,
        dtype="fp16",
        server_args=("--a", "b"),
        plot=tmp_path / "p.png",
        kernel=False,
        fuse_up_to=None,
        config_names=("default", "pcie-ipc"),  # in the table's order
        plan_only=True,
    )


@pytest.mark.parametrize(
    ("typed", "now", "args"),
    [
        (["bench"], "bench kernel", ["--tp", "4", "--tokens", "8", "--json"]),
        (["bench", "--server"], "bench server", ["--tp", "1", "--repeat", "3", "--json"]),
        (["bench", "--tp", "1", "--server"], "bench server", ["--no-kernel"]),
    ],
)
def test_bench_and_bench_server_are_aliases_that_say_so(
    monkeypatch: pytest.MonkeyPatch, typed: list[str], now: str, args: list[str]
) -> None:
    """What a user typed before the subcommands runs as before, with one note on stderr."""
    kernel, server = kernel_bench(monkeypatch), server_bench(monkeypatch)
    said = run(*typed, *args)
    old = "bench --server" if "--server" in typed else "bench"
    assert said[0] == 0 and said[2] == f"note: `sm120patch {old}` is now `sm120patch {now}`\n"
    alias_calls = (list(kernel.calls), list(server.calls))
    kernel.calls.clear()
    server.calls.clear()
    new = run(*now.split(), *(arg for arg in typed[1:] + args if arg != "--server"))
    assert new[:2] == said[:2] and "note: " not in new[2]
    assert (kernel.calls, server.calls) == alias_calls


def test_bench_help_is_not_an_alias() -> None:
    code, out, err = run("bench", "--help")
    assert code == 0 and "kernel" in out and "server" in out and "note: " not in err


# --- option checks, before anything runs ----------------------------------------------------------


def test_python_and_sglang_path_both_typed_is_a_usage_error(mini: Path, tmp_path: Path) -> None:
    for command in ("verify", "doctor", "bench"):
        code, data = jrun(command, "--python", str(tmp_path / "py"), "--sglang-path", str(mini))
        assert (code, data["error"]) == (2, "give either --python or --sglang-path, not both"), command


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["verify", "--timeout", "0.5"], "Invalid value for '--timeout': 0.5 is not in the range x>=1."),
        (["doctor", "--tp", "0"], "Invalid value for '--tp': 0 is not in the range x>=1."),
        (
            ["bench", "kernel", "--tp", "1"],
            "Invalid value for '--tp': 1 is not in the range x>=2 (an allreduce needs 2 ranks; "
            "--tp 1 only with `bench server`)",
        ),
        (
            ["bench", "kernel", "--tp", "0"],
            "Invalid value for '--tp': 0 is not in the range x>=2 (an allreduce needs 2 ranks; "
            "--tp 1 only with `bench server`)",
        ),
        (["bench", "kernel", "--replays", "29"], "Invalid value for '--replays': 29 is not in the range x>=30."),
        (["bench", "kernel", "--timeout", "0"], "Invalid value for '--timeout': 0.0 is not in the range x>=1."),
        (["bench", "kernel", "--layers", "0"], "Invalid value for '--layers': 0 is not in the range x>=1."),
        (
            ["bench", "kernel", "--baseline", "nccl"],
            "Invalid value for '--baseline': 'nccl' is not one of 'auto', 'sglang', 'stand-in'.",
        ),
        (["bench", "kernel", "--dtype", "fp8"], "Invalid value for '--dtype': 'fp8' is not one of 'bf16', 'fp16'."),
        (["bench", "server", "--input-len", "0"], "Invalid value for '--input-len': 0 is not in the range x>=1."),
        (["bench", "server", "--output-len", "1"], "Invalid value for '--output-len': 1 is not in the range x>=2."),
        (["bench", "server", "--repeat", "0"], "Invalid value for '--repeat': 0 is not in the range x>=1."),
        (
            ["bench", "kernel", "--tokens", "a,b"],
            "Invalid value for '--tokens': 'a,b' is not a comma-separated list of token counts",
        ),
        (
            ["bench", "kernel", "--tokens", "1,,2"],
            "Invalid value for '--tokens': '1,,2' has an empty item: give comma-separated whole numbers",
        ),
        (
            ["bench", "kernel", "--tokens", ""],
            "Invalid value for '--tokens': '' has an empty item: give comma-separated whole numbers",
        ),
        (
            ["bench", "kernel", "--tokens", "0,8"],
            "Invalid value for '--tokens': token counts go from 1 to 2048 (sglang fuses only batches of 1..2048)",
        ),
        (
            ["bench", "kernel", "--tokens", "8,2049"],
            "Invalid value for '--tokens': token counts go from 1 to 2048 (sglang fuses only batches of 1..2048)",
        ),
        (
            ["bench", "kernel", "--hidden", "100"],
            "Invalid value for '--hidden': 100: the hidden size must be a positive multiple of 8 (16-byte rows)",
        ),
        (
            ["bench", "kernel", "--hidden", "0"],
            "Invalid value for '--hidden': 0: the hidden size must be a positive multiple of 8 (16-byte rows)",
        ),
        (
            ["bench", "kernel", "--model-config", "/no/such/config.json"],
            "Invalid value for '--model-config': Path '/no/such/config.json' does not exist.",
        ),
        (
            ["bench", "kernel", "--plot", "plot.pdf"],
            "Invalid value for '--plot': plot.pdf: the file must end in .png or .svg",
        ),
        (
            ["bench", "server", "--tokens", "8"],
            "--tokens belongs to `bench kernel`",
        ),
        (
            ["bench", "--tp", "1"],
            "Invalid value for '--tp': 1 is not in the range x>=2 (an allreduce needs 2 ranks; "
            "--tp 1 only with `bench server`)",
        ),
        (["bench", "--server", "--repeat", "0"], "Invalid value for '--repeat': 0 is not in the range x>=1."),
    ],
)
def test_an_option_out_of_range_is_a_usage_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, args: list[str], said: str
) -> None:
    kernel_bench(monkeypatch), server_bench(monkeypatch)  # nothing would run even if accepted
    code, data = jrun(*args)
    assert code == 2
    assert data["error"] == said


def test_boundary_values_are_accepted(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = kernel_bench(monkeypatch)
    assert jrun("verify", "--sglang-path", str(mini), "--timeout", "1")[0] == 1  # not patched: judged
    assert run("bench", "--tp", "2", "--tokens", "1,2048", "--hidden", "8", "--replays", "30", "--layers", "1")[0] == 0
    asked = bench.calls[-1][1]
    assert (asked["tp"], asked["tokens"], asked["hidden"], asked["dtype"], asked["replays"]) == (
        2,
        (1, 2048),
        8,
        "bf16",
        30,
    )


def test_paths_of_the_wrong_kind_are_usage_errors(mini: Path, tmp_path: Path) -> None:
    a_file = mini / COMM
    code, data = jrun("verify", "--sglang-path", str(a_file))  # typed: its variable is not blamed
    assert (code, data["error"]) == (2, f"Invalid value for '--sglang-path': Directory '{a_file}' is a file.")
    code, data = jrun("verify", env={"SM120PATCH_SGLANG_PATH": str(a_file)})
    assert (code, data["error"]) == (
        2,
        "Invalid value for SM120PATCH_SGLANG_PATH (the environment variable for '--sglang-path'): "
        f"Directory '{a_file}' is a file.",
    )
    code, _, err = run("demo", "--wheel", str(tmp_path))
    assert code == 2 and f"Invalid value for '--wheel': File '{tmp_path}' is a directory." in err
    code, _, err = run("demo", "--wheel", str(tmp_path / "missing.whl"))
    assert code == 2 and f"Invalid value for '--wheel': File '{tmp_path / 'missing.whl'}' does not exist." in err


def test_token_counts_are_sorted_and_deduplicated() -> None:
    assert cli_options.parse_tokens(None, None, " 64, 8,8 ,2048,1") == (1, 8, 64, 2048)  # type: ignore[arg-type]
    assert cli_options._tokens_items(" 3 , 1") == ["3", "1"]


@pytest.mark.parametrize(("value", "kept"), [(None, None), (8, 8), (7168, 7168)])
def test_hidden_sizes_that_are_multiples_of_8_pass(value: int | None, kept: int | None) -> None:
    assert cli_options.check_hidden(None, None, value) == kept  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-8, 0, 4, 12, 4100])
def test_other_hidden_sizes_are_refused(value: int) -> None:
    with pytest.raises(click.BadParameter, match=rf"^{value}: the hidden size must be a positive multiple of 8"):
        cli_options.check_hidden(None, None, value)  # type: ignore[arg-type]


def plot(value: str | None) -> Path | None:
    return cli_options.plot_target(None, None, value)  # type: ignore[arg-type]


def test_a_plot_target_that_can_be_written_is_taken(tmp_path: Path) -> None:
    assert plot(None) is None
    for name in ("latency.png", "latency.svg", "LATENCY.PNG"):
        assert plot(str(tmp_path / name)) == tmp_path / name
    (tmp_path / "old.png").write_bytes(b"")
    assert plot(str(tmp_path / "old.png")) == tmp_path / "old.png"


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("", "'' names no file: give FILE.png or FILE.svg"),
        ("/", "'/' names no file: give FILE.png or FILE.svg"),
        (".png", "'.png' names no file: give FILE.png or FILE.svg"),
        ("{tmp}/.svg", "'{tmp}/.svg' names no file: give FILE.png or FILE.svg"),
        ("{tmp}/plot", "{tmp}/plot: the file must end in .png or .svg"),
        ("{tmp}/plot.jpg", "{tmp}/plot.jpg: the file must end in .png or .svg"),
        ("{tmp}/no/plot.png", "{tmp}/no/plot.png: the folder {tmp}/no does not exist"),
    ],
)
def test_a_plot_target_that_cannot_be_drawn_is_refused(tmp_path: Path, name: str, said: str) -> None:
    with pytest.raises(click.BadParameter) as raised:
        plot(name.format(tmp=tmp_path))
    assert raised.value.message == said.format(tmp=tmp_path)


@pytest.mark.parametrize("denied", ["folder", "file"])
def test_a_plot_target_that_cannot_be_written_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, denied: str
) -> None:
    target = tmp_path / "plot.png"
    target.write_bytes(b"")
    refused = tmp_path if denied == "folder" else target
    real_access = os.access

    def access(path: Any, mode: int) -> bool:
        """Fake: this user may not write ``refused``."""
        return False if Path(path) == refused and mode == os.W_OK else real_access(path, mode)

    monkeypatch.setattr(os, "access", access)
    with pytest.raises(click.BadParameter) as raised:
        plot(str(target))
    assert raised.value.message == f"{target}: cannot write there"
    if denied == "folder":
        with pytest.raises(click.BadParameter):
            plot(str(tmp_path / "new.png"))


def test_a_plot_without_matplotlib_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # fake: matplotlib is not installed
    with pytest.raises(click.BadParameter) as raised:
        plot(str(tmp_path / "plot.png"))
    assert raised.value.message == "--plot needs matplotlib: pip install 'sm120patch[plot]'"


# --- errors: exit code, one line, one JSON object -------------------------------------------------


def raising(exc: BaseException) -> Callable[..., Any]:
    def fake(*args: Any, **kwargs: Any) -> Any:
        """Fake command body: raises ``exc`` where the real one would run."""
        raise exc

    return fake


@pytest.mark.parametrize(
    ("exc", "code", "stable", "said"),
    [
        (NotAsAsked("the tree is not as asked"), 1, "not-as-asked", "the tree is not as asked"),
        (
            OSError(13, "Permission denied", "/srv/site/sglang/srt"),
            2,
            "unreadable",
            "/srv/site/sglang/srt: Permission denied",
        ),
        (OSError("no details"), 2, "unreadable", ": no details"),
        (
            RuntimeError("boom"),
            70,
            "internal-error",
            f"internal error (RuntimeError: boom); this is a bug in sm120patch {__version__}",
        ),
        (
            KeyboardInterrupt(),
            130,
            "interrupted",
            "interrupted; no sglang file was left half-changed (`sm120patch verify` says where the patches stand)",
        ),
    ],
    ids=["tool-error", "oserror", "bare-oserror", "bug", "ctrl-c"],
)
def test_an_error_in_a_command_is_its_exit_code_one_line_and_one_json_object(
    mini: Path, monkeypatch: pytest.MonkeyPatch, exc: BaseException, code: int, stable: str, said: str
) -> None:
    from sm120patch.patcher.commands import verify

    monkeypatch.setattr(verify, "verify", raising(exc))
    got, out, err = run("verify", "--sglang-path", str(mini), "--json")
    assert got == code
    data = one_json_object(code, out)
    assert (data["error"], data["code"]) == (said, stable)
    assert last_line(err) == f"error: [{stable}] {said}"
    assert ("Traceback" in err) == (code == 70)  # a bug shows where it is
    got, out, err = run("verify", "--sglang-path", str(mini))
    assert (got, out, last_line(err)) == (code, "", f"error: [{stable}] {said}")


def test_ctrl_c_before_sglang_is_found(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sm120patch.runner import locate

    monkeypatch.setattr(locate, "locate", raising(KeyboardInterrupt()))
    code, data = jrun("apply", "--sglang-path", str(mini))
    assert (code, data["error"]) == (130, "interrupted before sglang was found; nothing was written")


def test_ctrl_c_in_doctor_says_nothing_was_written(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from sm120patch.doctor import host

    monkeypatch.setattr(host, "read_host", raising(KeyboardInterrupt()))
    code, data = jrun("doctor", "--sglang-path", str(tmp_path))
    assert (code, data["error"]) == (130, "interrupted; nothing was written")


def test_ctrl_c_outside_a_command_body_is_130(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sm120patch.cli.run.locators", raising(KeyboardInterrupt()))
    code, out, err = run("verify", "--sglang-path", str(mini), "--json")
    assert code == 130
    assert one_json_object(130, out)["error"] == "interrupted; nothing was written"
    assert last_line(err) == "error: [interrupted] interrupted; nothing was written" and "Aborted" not in err
    code, out, err = run("verify", "--sglang-path", str(mini))
    assert (code, out, last_line(err)) == (130, "", "error: [interrupted] interrupted; nothing was written")


def test_a_usage_error_without_json_prints_no_json(tmp_path: Path) -> None:
    code, out, err = run("apply", "--only=", "--python", str(tmp_path / "py"))
    assert (code, out) == (2, "")
    assert (
        "Invalid value for '--only': '' names no patch; give comma-separated ids (`sm120patch list` shows them)" in err
    )
    code, out, _ = run("apply", "--only=", "--python", str(tmp_path / "py"), "--json")
    assert json.loads(out)["error"] == (
        "Invalid value for '--only': '' names no patch; give comma-separated ids (`sm120patch list` shows them)"
    )


def test_a_ctrl_c_a_library_wrapped_is_an_interrupt_not_a_bug(mini: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C while libcst was imported came out as "Error calling __set_name__" (a
    RuntimeError from dataclasses), and was reported as a bug (exit 70)."""
    from sm120patch.runner import locate

    def interrupted_import(**_: object) -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance 'lbrace'") from exc

    monkeypatch.setattr(locate, "locate", interrupted_import)
    code, _, err = run("list", "--sglang-path", str(mini))
    assert (code, err) == (130, "error: [interrupted] interrupted before sglang was found; nothing was written\n")
    assert "internal error" not in err
