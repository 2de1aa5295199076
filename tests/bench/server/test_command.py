"""``sm120patch bench server``'s command, in this process: the options it refuses, the
settings it hands the driver, and what it prints, with the driver's answer built by hand
(hand.py; ``driver.run`` and ``kernel_beside`` are replaced by stand-ins named in each test,
so no sglang process starts).  FakeSglang's site (fakes.py) is only located, never run."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from sm120patch.bench.kernel import measure
from sm120patch.bench.server import command as bench_server
from sm120patch.bench.server import driver, render
from sm120patch.cli.run import show_result
from sm120patch.errors import EnvironmentProblem
from sm120patch.runner.ranks import FailureKind, RankFailure
from sm120patch.sglang.fusion_call import read_call
from sm120patch.sglang.options import BACKEND, ENABLE, HATCH, pcie_ipc_option
from sm120patch.sglang.tree import from_directory
from tests.bench.fakes import StatusRecorder, Terminal
from tests.bench.kernel.test_render import result as kernel_result
from tests.bench.server.fakes import fake_server_site
from tests.bench.server.hand import result
from tests.support.cli import run

KERNEL_ONLY = ("--tokens", "--replays", "--model-config", "--baseline", "--disable-custom-all-reduce")
SERVER_ONLY = (
    "--model-path", "--batch-sizes", "--input-len", "--output-len", "--repeat", "--server-arg", "--no-kernel",
    "--fuse-up-to",
)  # fmt: skip


@pytest.mark.parametrize(
    ("command", "flag"), [*(("server", flag) for flag in KERNEL_ONLY), *(("kernel", flag) for flag in SERVER_ONLY)]
)
def test_an_option_of_the_other_bench_is_refused(command: str, flag: str) -> None:
    code, out, err = run("bench", command, flag)
    other = "kernel" if command == "server" else "server"
    assert (code, out) == (2, "") and f"Error: {flag} belongs to `bench {other}`" in err


def test_batch_sizes_are_read_sorted_and_once() -> None:
    assert bench_server.parse_sizes("64, 8,1,8,") == (1, 8, 64)
    assert bench_server.parse_sizes("1") == (1,)
    for value, why in [
        ("1,a", "{!r} is not a comma-separated list of batch sizes"),
        ("1.5", "{!r} is not a comma-separated list of batch sizes"),
        ("0,1", "{!r}: batch sizes are whole numbers from 1"),
        ("-2", "{!r}: batch sizes are whole numbers from 1"),
        (" , ", "{!r}: batch sizes are whole numbers from 1"),
    ]:
        with pytest.raises(EnvironmentProblem) as raised:
            bench_server.parse_sizes(value)
        assert str(raised.value) == "--batch-sizes " + why.format(value)


def call(server_args: tuple[str, ...] = (), **changes: Any) -> int:
    args: dict[str, Any] = {
        "python": None,
        "sglang_path": Path("/nowhere"),
        "as_json": True,
        "tp": 2,
        "batch_sizes": "1",
        "input_len": 8,
        "output_len": 8,
        "repeat": 1,
        "timeout": 5.0,
        "model_path": None,
        "hidden": 1024,
        "layers": 4,
        "dtype": "bf16",
        "server_args": server_args,
        "plot": None,
        "kernel": True,
    }
    args.update(changes)
    return show_result(bench_server.bench_server(**args), args["as_json"])


@pytest.mark.parametrize(
    "arg",
    [
        f"{ENABLE}",
        f"{HATCH}",
        f"{BACKEND}=trtllm",
        "--json-model-override-args={'flashinfer_allreduce_fusion': 1}",
    ],
)
def test_fusion_set_by_hand_is_refused_before_sglang_is_looked_for(arg: str) -> None:
    with pytest.raises(EnvironmentProblem) as raised:
        call(("--mem-fraction-static=0.5", arg))
    assert str(raised.value) == "--server-arg must not set fusion: bench server runs it off and on itself"


def test_batch_sizes_are_checked_before_sglang_is_looked_for() -> None:
    with pytest.raises(EnvironmentProblem, match="batch sizes are whole numbers from 1"):
        call(batch_sizes="0")


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """FakeSglang's site, located; ``driver.run`` replaced by a stand-in answering ``answer["result"]``
    (a hand-built ServerResult) and recording its settings; ``kernel_beside`` by one answering
    ``answer["kernel"]``; the status line by ``StatusRecorder``."""
    answer: dict[str, Any] = {"package": fake_server_site(tmp_path / "site"), "result": result(), "kernel": None}

    def fake_run(settings: driver.Settings, on_status: Any) -> driver.ServerResult:
        answer["settings"] = settings
        on_status("run 1/4, fusion off: warm-up")
        return answer["result"]

    def fake_kernel(done: Any, tree: Any, on_status: Any) -> Any:
        answer["kernel_called"] = (done, tree.package_dir)
        on_status("kernel-level bench")
        return answer["kernel"]

    monkeypatch.setattr(driver, "run", fake_run)
    monkeypatch.setattr(bench_server, "kernel_beside", fake_kernel)
    answer["status"] = StatusRecorder()
    monkeypatch.setattr(bench_server, "StatusLine", answer["status"])
    return answer


def server(answer: dict[str, Any], *args: str) -> tuple[int, str, str]:
    return run("bench", "--server", "--sglang-path", str(answer["package"]), *args)


def test_the_settings_handed_to_the_driver(served: dict[str, Any], tmp_path: Path) -> None:
    code, stdout, _ = server(
        served,
        "--json",
        "--tp",
        "4",
        "--batch-sizes",
        "32,2",
        "--input-len",
        "100",
        "--output-len",
        "20",
        "--repeat",
        "3",
        "--timeout",
        "77",
        "--model-path",
        str(tmp_path),
        "--hidden",
        "2048",
        "--layers",
        "6",
        "--dtype",
        "fp16",
        "--server-arg",
        "--mem-fraction-static=0.5",
        "--server-arg=--chunked-prefill-size=512",
    )
    assert code == 0, stdout
    assert served["settings"] == driver.Settings(
        python=sys.executable,
        package_dir=served["package"],
        version="0.5.14",
        options=served["settings"].options,
        tp=4,
        batch_sizes=(2, 32),
        input_len=100,
        output_len=20,
        repeat=3,
        timeout=77.0,
        model_path=tmp_path,
        hidden=2048,
        layers=6,
        dtype="fp16",
        server_args=("--mem-fraction-static=0.5", "--chunked-prefill-size=512"),
    )
    assert {BACKEND, HATCH} <= served["settings"].options
    assert served["status"].made == [(False, "asking the serving interpreter for its GPUs")]
    assert served["status"].said == ["run 1/4, fusion off: warm-up", "kernel-level bench"]
    assert served["kernel_called"] == (served["result"], served["package"])


def test_the_bundled_model_by_default(served: dict[str, Any]) -> None:
    code, _, _ = server(served, "--json")
    assert code == 0
    settings = served["settings"]
    assert (settings.tp, settings.batch_sizes, settings.hidden, settings.layers) == (None, (1, 8, 32, 64), 7168, 4)
    assert (settings.input_len, settings.output_len, settings.repeat, settings.dtype) == (256, 64, 2, "bf16")
    assert (settings.model_path, settings.server_args, settings.timeout) == (None, (), 300.0)


def test_the_json_holds_the_kernel_figures_or_why_there_are_none(served: dict[str, Any]) -> None:
    served["kernel"] = "no kernel-level figures at TP 1: an allreduce needs 2 ranks"
    code, stdout, _ = server(served, "--json")
    data = json.loads(stdout)
    assert code == 0
    assert data == dict(
        json.loads(json.dumps(render.to_json(served["result"]))),
        kernel={"error": "no kernel-level figures at TP 1: an allreduce needs 2 ranks"},
    )
    served["kernel"] = kernel_result()
    data = json.loads(server(served, "--json")[1])
    assert data["kernel"]["command"] == "bench" and [r["tokens"] for r in data["kernel"]["rows"]] == [1, 128, 2048]


def test_no_kernel_asks_for_none(served: dict[str, Any]) -> None:
    code, stdout, err = server(served, "--no-kernel")
    assert code == 0 and stdout == ""
    assert "kernel_called" not in served
    assert "kernel level" not in err
    assert json.loads(server(served, "--json", "--no-kernel")[1])["kernel"] is None


def test_the_text_has_the_servers_answer_then_the_kernels(served: dict[str, Any]) -> None:
    served["kernel"] = "no kernel-level figures: sglang fuses only batches of 1 to 2048 tokens"
    code, stdout, err = server(served)
    assert code == 0 and stdout == ""
    lines = err.splitlines()
    assert served["status"].made == [(False, "asking the serving interpreter for its GPUs")]
    assert lines[-2:] == [
        "kernel level, same TP, hidden size and dtype (sm120patch bench kernel):",
        "no kernel-level figures: sglang fuses only batches of 1 to 2048 tokens",
    ]
    assert "batch 1, 8: launch with" in lines[-3]  # the server's verdict comes first, one line piped
    served["kernel"] = kernel_result()
    err = server(served)[2]
    after = err.split("kernel level, same TP, hidden size and dtype (sm120patch bench kernel):\n", 1)[1]
    assert "indicative only (no sglang): fusion pays here at TP 2" in " ".join(after.split())


def test_the_exit_code_is_the_results(served: dict[str, Any]) -> None:
    served["result"] = result(problems=["the fusion-on run failed: x"])
    code, stdout, _ = server(served, "--json")
    assert code == 1 and json.loads(stdout)["exit_code"] == 1


def test_a_plot_is_drawn_where_there_are_rows(
    served: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """render.plot is replaced by a stand-in that writes the result's row count."""
    monkeypatch.setattr(render, "plot", lambda done, path: path.write_text(str(len(done.rows))))
    target = tmp_path / "server.png"
    code, _, _ = server(served, "--json", "--plot", str(target))
    assert code == 0 and target.read_text() == "2"
    served["result"] = result(rows=[], problems=["no batch size has a decode latency in every run"])
    target.unlink()
    code, stdout, _ = server(served, "--json", "--plot", str(target))
    assert code == 1 and not target.exists()  # nothing to plot: no plot, no error
    assert "error" not in json.loads(stdout)


def test_a_plot_that_cannot_be_written_is_exit_2_beside_the_answer(
    served: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """render.plot is replaced by a stand-in that fails as a full disk does."""

    def full(done: Any, path: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(render, "plot", full)
    target = tmp_path / "server.png"
    code, stdout, _ = server(served, "--json", "--plot", str(target))
    data = json.loads(stdout)
    said = f"--plot {target}: cannot write it (No space left on device); the measurements are reported without it"
    assert (code, data["exit_code"], data["ok"], data["error"]) == (2, 2, False, said)
    assert data["rows"] and data["verdict"]["kind"] == "pays"
    code, stdout, err = server(served, "--plot", str(target))
    assert code == 2 and stdout == ""
    assert " ".join(err.split()).endswith(f"error: {said}")


# --- the kernel-level bench beside ---------------------------------------------------------


def test_the_kernel_bench_beside_measures_the_decode_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """measure.run is replaced by a stand-in that records what it was asked."""
    asked: list[tuple[Any, ...]] = []

    def fake_measure(settings: measure.Settings, call: Any, hatch: str, **kwargs: Any) -> str:
        asked.append((settings, call, hatch, kwargs))
        return "measured"

    monkeypatch.setattr(measure, "run", fake_measure)
    tree = from_directory(fake_server_site(tmp_path))
    done = result(batch_sizes=(1, 2048, 2049), timeout=33.0, dtype="fp16")
    said: list[str] = []
    assert bench_server.kernel_beside(done, tree, said.append) == "measured"
    assert said == ["kernel-level bench at TP 2, hidden 1024"]
    ((settings, call, hatch, kwargs),) = asked
    assert (settings.python, settings.tp, settings.tokens, settings.hidden, settings.dtype, settings.timeout) == (
        "/opt/venv/bin/python",
        2,
        (1, 2048),
        1024,
        "fp16",
        33.0,
    )
    assert settings.pcie_ipc is pcie_ipc_option(tree)
    assert kwargs == {"sglang_version": "0.5.14"}
    assert hatch == f"`{HATCH}` / `sm120patch revert`, then `sm120patch apply --skip server-args-auto-enable`"
    assert call == read_call(tree.package_dir, "0.5.14")


def test_a_kernel_bench_that_fails_leaves_the_servers_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """measure.run is replaced by stand-ins that refuse, or whose rank fails."""
    tree = from_directory(fake_server_site(tmp_path))

    def refusing(*args: Any, **kwargs: Any) -> None:
        raise EnvironmentProblem("no P2P access from GPU 0 to GPU 1")

    monkeypatch.setattr(measure, "run", refusing)
    assert bench_server.kernel_beside(result(), tree, lambda text: None) == (
        "no kernel-level figures: no P2P access from GPU 0 to GPU 1"
    )

    def failing(*args: Any, **kwargs: Any) -> None:
        raise RankFailure(1, "workspace", FailureKind.FAILURE, "CUDA error")

    monkeypatch.setattr(measure, "run", failing)
    assert bench_server.kernel_beside(result(), tree, lambda text: None) == (
        "no kernel-level figures: rank 1, phase workspace: CUDA error"
    )


def test_no_kernel_bench_below_tp_2() -> None:
    def server_at(tp: int | None) -> SimpleNamespace:
        return SimpleNamespace(settings=SimpleNamespace(tp=tp, batch_sizes=(1,)), model=SimpleNamespace(hidden=8))

    assert bench_server.kernel_beside(server_at(None), None, None) == (
        "no kernel-level figures at TP None: an allreduce needs 2 ranks"
    )
    assert bench_server.kernel_beside(server_at(0), None, None) == (
        "no kernel-level figures at TP 0: an allreduce needs 2 ranks"
    )


@pytest.mark.parametrize(("as_json", "shown"), [(False, True), (True, False)])
def test_the_status_line_shows_on_a_terminal_unless_json(
    served: dict[str, Any], monkeypatch: pytest.MonkeyPatch, as_json: bool, shown: bool
) -> None:
    monkeypatch.setattr(sys, "stderr", Terminal())
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert call(sglang_path=served["package"], as_json=as_json, kernel=False) == 0
    assert served["status"].made == [(shown, "asking the serving interpreter for its GPUs")]


def kernel_text(beside: Any, width: int = 200, colour: bool = True) -> str:
    buffer = io.StringIO()
    if colour:
        console = Console(file=buffer, width=width, force_terminal=True, color_system="standard")
    else:
        console = Console(file=buffer, width=width, color_system=None, force_terminal=True)
    bench_server._render_kernel(beside, console)
    return buffer.getvalue()


def test_the_kernel_part_of_the_text() -> None:
    assert kernel_text(None) == ""
    why = "no kernel-level figures: " + "reason " * 20
    shown = kernel_text(why)
    assert shown.startswith(
        "\x1b[1mkernel level, same TP, hidden size and dtype (sm120patch bench kernel):\x1b[0m\n\x1b[2mno kernel-level"
    )
    plain = kernel_text(why, colour=False).splitlines()
    assert [len(line.rstrip()) for line in plain] == [71, 80, 76, 6]  # at most 80 columns on a wide terminal
    assert max(len(line.rstrip()) for line in kernel_text(why, width=50, colour=False).splitlines()) == 48
    shown = kernel_text(kernel_result())
    assert shown.startswith("\x1b[1mkernel level, same TP, hidden size and dtype (sm120patch bench kernel):\x1b[0m\n")
    assert "63 % to 84 % faster" in " ".join(shown.split())


@pytest.mark.offline
def test_python_picks_the_interpreter_that_finds_sglang_and_runs_the_benchmark(
    served: dict[str, Any], tmp_path: Path
) -> None:
    """``--python``: sglang is looked for in that interpreter (here a wrapper that alone puts
    FakeSglang's site on its path) and the benchmark runs in it."""
    wrapper = tmp_path / "env" / "bin" / "python"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={served["package"].parent} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    code, stdout, _ = run("bench", "--server", "--python", str(wrapper), "--json", "--tp", "2")
    assert code == 0, stdout
    assert served["settings"].python == str(wrapper)
    assert served["settings"].package_dir == served["package"]
