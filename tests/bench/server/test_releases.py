"""bench server against the real releases' own code (slow: wheels from the package index).

* the parser reads the lines rendered from each release's own ``bench_one_batch`` f-strings
  (found with ``ast``, filled with sample values, never copied by hand);
* the flags chosen for each release exist in its argument code, ``trtllm`` among the backend's
  choices, and so does every other argument bench server passes;
* every line sglang is searched for (fallback, fatal, workspace made) is text of the releases;
* ``load_model`` loads a tokenizer unconditionally (why a tokenizer is written).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sm120patch.bench.server import driver, parse
from sm120patch.bench.server.configs import BY_NAME
from sm120patch.bench.server.flags import choose
from sm120patch.sglang.options import BACKEND, ENABLE, HATCH, release_options
from sm120patch.sglang.tree import from_directory

pytestmark = pytest.mark.slow
RELEASES = ["0.5.9", "0.5.13", "0.5.14", "0.5.15", "0.5.23"]
EXPECTED_FLAGS = {
    "0.5.9": ((ENABLE,), ()),
    "0.5.13": ((ENABLE,), (HATCH,)),
    "0.5.14": ((BACKEND, "trtllm"), (HATCH,)),
    "0.5.15": ((BACKEND, "trtllm"), (HATCH,)),
    "0.5.23": ((BACKEND, "trtllm"), (HATCH,)),
}
LINE_REGEXES = (parse.PREFILL, parse.DECODE_STEP, parse.DECODE_MEDIAN, parse.TOTAL, parse.SKIPPING)


def bench_file(package: Path) -> Path:
    module = driver.bench_module(package)
    assert module is not None
    return package.parent / (module.replace(".", "/") + ".py")


class Values(dict[str, Any]):
    """Sample values for the f-strings' names; a name not here fails the test (a new format)."""

    def __missing__(self, key: str) -> Any:
        raise AssertionError(f"an f-string of the release uses {key!r}: a format sm120patch has not read")


def formats(path: Path) -> list[ast.JoinedStr]:
    """The release's f-strings that print a latency or a skipped size."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
            if "latency:" in text or text.startswith("skipping ("):
                found.append(node)
    return found


def render(node: ast.JoinedStr, values: dict[str, Any]) -> str:
    code = compile(ast.Expression(node), "<f-string>", "eval")
    return str(eval(code, {"__builtins__": {}}, Values(values)))


SKIPPED = {"batch_size": 512, "input_len": 256, "output_len": 64}
MEASURED = {
    "prefill_latency": 0.04213,
    "throughput": 24305.01,
    "i": 0,
    "batch_size": 16,
    "latency": 0.01234,
    "med_decode_latency": 0.01187,
    "med_decode_throughput": 1347.93,
    "tot_latency": 0.8123,
    "input_len": 256,
    "output_len": 64,
}


@pytest.mark.parametrize("version", RELEASES)
def test_parser_reads_the_releases_own_lines(version: str, release: Callable[..., Path]) -> None:
    path = bench_file(release(version))
    source = path.read_text()
    assert f'"{parse.WARMUP}"' in source and f'"{parse.BENCHMARK}"' in source
    rendered: dict[int, str] = {}
    for node in formats(path):
        line = render(node, SKIPPED if "skipping" in ast.unparse(node) else MEASURED)
        matches = [i for i, regex in enumerate(LINE_REGEXES) if regex.search(line)]
        assert len(matches) == 1, f"{version}: {line!r} is read by {len(matches)} of the parser's patterns"
        rendered[matches[0]] = line
    assert sorted(rendered) == [0, 1, 2, 3, 4], f"{version}: a print format is missing: {rendered}"
    prefill, step, median, total, skipping = (rendered[i] for i in range(5))
    output = ["Warmup ...", prefill, step, median, total, "Benchmark ...", skipping, prefill, step, median, total]
    parsed = parse.parse(output, [(512, 256, 64), (16, 256, 64)])
    assert parsed.skipped == [(512, 256, 64)]
    (measured,) = parsed.runs
    assert (measured.batch_size, measured.input_len, measured.output_len) == (16, 256, 64)
    assert measured.prefill_latency_s == pytest.approx(0.04213, abs=1e-5)
    assert measured.prefill_throughput == pytest.approx(24305.01)
    assert measured.decode_median_s == pytest.approx(0.01187, abs=1e-5)
    assert measured.decode_median_throughput == pytest.approx(1347.93)
    assert measured.total_latency_s == pytest.approx(0.812, abs=1e-3)
    assert measured.decode_steps == [(0, 16, pytest.approx(0.01234), pytest.approx(24305.01))]


def _arguments(package: Path) -> set[str]:
    """Every ``--option`` the release's server and benchmark accept: literals, and the
    fields 0.5.14+ derive options from (aliases included as literals)."""
    files = [package / "srt/server_args.py", *sorted((package / "srt/arg_groups").rglob("*.py")), bench_file(package)]
    options: set[str] = set()
    for path in files:
        if not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("--"):
                options.add(node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                options.add("--" + node.target.id.replace("_", "-"))
    return options


@pytest.mark.parametrize("version", RELEASES)
def test_flags_and_arguments_exist_in_the_release(version: str, release: Callable[..., Path]) -> None:
    package = release(version)
    flags = choose(release_options(from_directory(package)))
    assert flags is not None
    assert (flags.on, flags.off) == EXPECTED_FLAGS[version]
    if BACKEND in flags.on:
        sources = [package / "srt/server_args.py", *sorted((package / "srt/arg_groups").rglob("*.py"))]
        annotations = [
            ast.unparse(node.annotation)
            for path in sources
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "flashinfer_allreduce_fusion_backend"
        ]
        assert annotations and all("'trtllm'" in a for a in annotations), annotations
    settings = driver.Settings(
        "python", package, version, frozenset(), 2, (1, 8), 256, 64, 2, 60.0, None, 1024, 4, "bf16"
    )
    model = driver.config.Model(Path("/m"), Path("/t"), True, "LlamaForCausalLM", 1024, 4)
    module = driver.bench_module(package)
    assert module is not None
    accepted = _arguments(package)
    for name in ("default", "fusion"):
        command = driver.command(settings, module, model, flags, BY_NAME[name], 0)
        passed = {arg for arg in command if arg.startswith("--")}
        assert passed <= accepted, f"{version} does not accept {sorted(passed - accepted)}"
    load_config = (package / "srt/configs/load_config.py").read_text()
    assert 'DUMMY = "dummy"' in load_config


def _texts(paths: list[Path]) -> list[str]:
    """Each string literal of ``paths`` (adjacent literals joined, as Python joins them), and
    each constant run of text between an f-string's fields."""
    texts = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts.append(node.value)
    return texts


def test_every_line_searched_for_is_sglangs_text(release: Callable[..., Path]) -> None:
    texts: list[str] = []
    for version in RELEASES:
        package = release(version)
        srt = package / "srt"
        paths = [
            srt / "layers/flashinfer_comm_fusion.py",
            srt / "server_args.py",
            *sorted((srt / "arg_groups").rglob("*.py")),
            *sorted((srt / "model_executor").glob("*.py")),
        ]
        texts += _texts([p for p in paths if p.is_file()])
    searched = [text for text, _ in itertools.chain(parse.FALLBACKS, parse.FATALS)] + list(parse.WORKSPACE_OK)
    # FlashInfer's own message (its JIT, get_nvcc_flags_list), quoted in sglang#15650: not sglang's text
    flashinfer_text = "No supported CUDA architectures found"
    for text in searched:
        if text == flashinfer_text:
            continue
        assert any(text in t for t in texts), f"{text!r} is in no release read"


@pytest.mark.parametrize("version", RELEASES)
def test_load_model_loads_a_tokenizer_unconditionally(version: str, release: Callable[..., Path]) -> None:
    tree = ast.parse(bench_file(release(version)).read_text())
    (load_model,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "load_model"]
    calls = [
        stmt
        for stmt in load_model.body
        if isinstance(stmt, ast.Assign)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Name)
        and stmt.value.func.id == "get_tokenizer"
    ]
    assert len(calls) == 1, "load_model's get_tokenizer call moved under a condition"
