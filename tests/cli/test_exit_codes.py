"""The exit-code table (docs/reference.md) is true: every cell is a scenario run through the CLI.

The table is read from docs/reference.md (between the exit-codes markers); a cell that names an
outcome must have a scenario here, and the scenario must exit with the cell's code.  The
hosts are the miniature release, FakeFlashInfer (``fake_flashinfer``), a fake
``nvidia-smi`` and this interpreter, which has no torch.  bench's 0 and 1 need ranks that
run: the slow tier's real-torch tests (named below) are their scenarios.

Every scenario runs with ``--json`` (demo takes no ``--json``: its report is the narrative
on stderr) and keeps the JSON contract: stdout holds exactly one JSON object, whose
``exit_code`` is the process's and whose ``ok`` says whether that is 0.  Beside the table,
Ctrl-C is 130 in every command (README: the paragraph under the table).
"""

from __future__ import annotations

import os
import re
import sys
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from sm120patch.sglang.layout import COMMUNICATOR
from tests.support.cli import one_json_object, run, run_process
from tests.support.fakes import RTX_PRO_6000, fake_flashinfer, fake_nvidia_smi, interrupting_executable
from tests.support.faultsuite import REPO
from tests.support.mini_sglang import FILES, write_mini_sglang

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
BENCH_RUNS = Path(__file__).resolve().parents[1] / "bench" / "kernel" / "test_bench_cpu.py"


def table() -> dict[tuple[str, int], str]:
    text = REFERENCE.read_text()
    block = text[text.index("<!-- exit-codes:begin") : text.index("<!-- exit-codes:end -->")]
    cells: dict[tuple[str, int], str] = {}
    for line in block.splitlines():
        match = re.match(r"\| `(\w+(?: \w+)?)` \|(.*)\|\s*$", line)
        if match:
            for code, cell in enumerate(part.strip() for part in match.group(2).split("|")):
                if cell != "—":
                    cells[(match.group(1), code)] = cell
    return cells


def mini_wheel(tmp: Path, refused: bool = False) -> Path:
    """The miniature release packed as pip would unpack it (demo only unzips)."""
    files = dict(FILES)
    if refused:  # no SM120 probe: a release sm120patch refuses
        files["srt/utils/common.py"] = files["srt/utils/common.py"].replace("def is_sm120_supported", "def _gone")
    site = tmp / ("refused" if refused else "site")
    write_mini_sglang(site, files=files)
    wheel = tmp / f"sglang-0.5.11{'.post9' if refused else ''}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path in sorted(site.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(site).as_posix())
    return wheel


def cli(*args: str | Path, env: Mapping[str, str | None] | None = None) -> int:
    """``sm120patch ARGS --json`` in this process (``env`` set while it runs), its JSON
    checked; the exit code."""
    code, out, _ = run(*map(str, args), "--json", env=env)
    one_json_object(code, out)
    return code


def process(*args: str | Path, env: dict[str, str] | None = None) -> int:
    """``sm120patch ARGS --json`` in a new process, its JSON checked; the exit code."""
    proc = run_process(*args, "--json", env=env, cwd=REPO)
    one_json_object(proc.returncode, proc.stdout)
    return proc.returncode


def demo(*args: str | Path) -> int:
    """demo has no ``--json``: its whole report is on stderr, stdout stays empty."""
    code, out, _ = run("demo", *map(str, args))
    assert out == ""
    return code


def scenarios(tmp: Path) -> dict[tuple[str, int], Callable[[], int]]:
    mini = write_mini_sglang(tmp / "site")
    empty = tmp / "empty"
    empty.mkdir()

    def patched() -> Path:
        package = write_mini_sglang(tmp / f"patched-{len(list(tmp.iterdir()))}")
        assert cli("apply", "--sglang-path", package) == 0
        return package

    def without_kernel() -> int:
        package = write_mini_sglang(tmp / "old-flashinfer")
        fake_flashinfer(package.parent, "0.6.16", [9, 10])
        return cli("apply", "--sglang-path", package)

    def changed_since_apply() -> int:
        package = patched()
        (package / COMMUNICATOR).write_text("# edited by hand\n")
        return cli("revert", "--sglang-path", package)

    def doctor(package: Path, gpus: list[tuple[str, str]] | None) -> int:
        bin_dir = tmp / f"bin-{len(list(tmp.iterdir()))}"
        bin_dir.mkdir()
        if gpus is not None:
            fake_nvidia_smi(bin_dir, gpus)
        env = {
            "PYTORCH_CUDA_ALLOC_CONF": None,
            "CUDA_VISIBLE_DEVICES": None,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        }
        return cli("doctor", "--sglang-path", package, "--tp", "2", env=env)

    return {
        ("apply", 0): lambda: cli("apply", "--sglang-path", mini),
        ("apply", 1): without_kernel,
        ("apply", 2): lambda: cli("apply", "--sglang-path", empty),
        ("verify", 0): lambda: cli("verify", "--sglang-path", patched()),
        ("verify", 1): lambda: cli("verify", "--sglang-path", write_mini_sglang(tmp / "fresh")),
        ("verify", 2): lambda: cli("verify", "--runtime", "--sglang-path", patched()),  # no torch here
        ("revert", 0): lambda: cli("revert", "--sglang-path", write_mini_sglang(tmp / "never")),
        ("revert", 1): changed_since_apply,
        ("revert", 2): lambda: cli("revert", "--python", tmp / "no-such-python"),
        ("list", 0): lambda: cli("list", "--sglang-path", mini),
        ("list", 2): lambda: cli("list", "--nope"),
        ("doctor", 0): lambda: doctor(patched(), None),  # no GPU: nothing blocks here
        ("doctor", 1): lambda: doctor(write_mini_sglang(tmp / "sm12x"), [(RTX_PRO_6000, "12.0")] * 2),
        ("doctor", 2): lambda: process("doctor", "--python", sys.executable),  # no sglang
        ("bench kernel", 2): lambda: cli("bench", "kernel", "--tp", "2"),  # no torch in this interpreter
        ("demo", 0): lambda: demo("--wheel", mini_wheel(tmp)),
        ("demo", 1): lambda: demo("--wheel", mini_wheel(tmp, refused=True)),
        ("demo", 2): lambda: demo("--wheel", tmp / "missing.whl"),
    }


#: bench's cells that need running ranks: the slow tier's tests with the real (CPU) torch.
BENCH_BY_RANKS = {
    ("bench kernel", 0): "test_two_real_ranks_measure_check_and_judge",
    ("bench kernel", 1): "test_a_kernel_that_returns_garbage_is_caught",
}


def test_every_cell_of_the_table_has_a_scenario(tmp_path: Path) -> None:
    cells = table()
    assert {command for command, _ in cells} == {"apply", "verify", "revert", "list", "doctor", "bench kernel", "demo"}
    assert set(cells) == set(scenarios(tmp_path)) | set(BENCH_BY_RANKS)
    source = BENCH_RUNS.read_text()
    assert all(f"def {name}(" in source for name in BENCH_BY_RANKS.values())


@pytest.mark.parametrize("cell", sorted(set(table()) - set(BENCH_BY_RANKS)), ids=lambda c: f"{c[0]}-{c[1]}")
@pytest.mark.offline
def test_the_scenario_exits_as_the_table_says(tmp_path: Path, cell: tuple[str, int]) -> None:
    assert scenarios(tmp_path)[cell]() == cell[1], table()[cell]


@pytest.mark.parametrize("command", ["apply", "verify", "revert", "list", "doctor", "bench"])
@pytest.mark.waits
@pytest.mark.offline
def test_ctrl_c_is_130_in_every_command(tmp_path: Path, command: str) -> None:
    python = interrupting_executable(tmp_path / "env" / "bin" / "python")
    assert process(command, "--python", python, "--timeout", "20") == 130
