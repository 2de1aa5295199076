"""Run sglang's own offline benchmark with fusion off and on, ``--repeat`` times each, and
check that each run did what it says.

Refused up front (exit 2, one sentence): a release without ``bench_one_batch`` or without a
fusion option, no torch or no CUDA GPU in the serving interpreter, fewer GPUs than ``--tp``,
a GPU whose memory is already in use, a model config that cannot be read.  Then, per repeat,
an "off" run and an "on" run (interleaved, so a drift of the host hits both), each a fresh
``python -m <bench module>`` under ``launch``'s watchdog with ``remote/server_hook.py`` as
``sitecustomize`` in every process.  A run proves itself: the "off" run must not launch the
fused kernel, the "on" run must; otherwise there is no verdict, and sglang's own line that
says why is shown.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from sm120patch.bench.remote import bench_rank, server_hook, server_probe
from sm120patch.bench.server import answer, answers, config, configs, counter, launch, parse
from sm120patch.bench.server.answer import Answer
from sm120patch.bench.server.configs import Config
from sm120patch.bench.server.flags import Flags, choose
from sm120patch.bench.server.verdict import Row, Verdict, judge, no_verdict
from sm120patch.errors import EnvironmentProblem, ExitCode
from sm120patch.runner import ProbeError, run_script

MODULES = (("benchmark/one_batch.py", "sglang.benchmark.one_batch"), ("bench_one_batch.py", "sglang.bench_one_batch"))
DTYPE_ARG = {"bf16": "bfloat16", "fp16": "float16"}
#: sglang takes a fraction of each GPU's memory (``--mem-fraction-static``, about 0.8 by
#: default): a GPU with less free than this is refused before a run fails on it.
MIN_FREE_FRACTION = 0.75
PROBE_TIMEOUT_S = 60.0
MODES = ("off", "on")
LIMIT_MODE = "limit"  # fusion on, with the token limit of ``--fuse-up-to`` (the third setting)
#: The configurations whose decode rows are the off / on / limit table (and its verdict).
TABLE = {"off": configs.DEFAULT, "on": "fusion", LIMIT_MODE: "fusion-limit"}
#: numpy's seed in every process of a run (the hook sets it as numpy is imported):
#: bench_one_batch draws its prompts from numpy's global generator and its ranks never seed it
#: (``--random-seed`` reaches only the scheduler's ``set_random_seed``), so without it each run
#: would answer another request and no two could be compared.
SEED = 1234


def order(repeat: int, modes: tuple[str, ...] = MODES) -> list[tuple[int, str]]:
    """off, on, then on, off, ...: the first run of a process pays cold caches (Triton's
    autotuning, the first CUDA-graph capture), which on one H200 made the first run's decode
    0.91 ms against 0.54 ms for the same model at TP 1; alternating spreads that over both."""
    return [(index, mode) for index in range(repeat) for mode in (modes if index % 2 == 0 else modes[::-1])]


class RunStopped(EnvironmentProblem):
    """A run hung, or the fusion-off run failed: sglang cannot run here as asked (exit 2).
    Its logs are kept."""


@dataclass(frozen=True)
class Settings:
    python: str
    package_dir: Path
    version: str | None
    options: frozenset[str]
    tp: int | None  # None: every GPU torch sees
    batch_sizes: tuple[int, ...]
    input_len: int
    output_len: int
    repeat: int
    timeout: float
    model_path: Path | None
    hidden: int
    layers: int
    dtype: str
    server_args: tuple[str, ...] = ()
    fuse_up_to: int | None = None  # --fuse-up-to: a third setting, fusion on with this token limit
    sglang_limit: int | None = None  # the release's own limit, which the "on" setting then runs with
    config_names: tuple[str, ...] | None = None  # --configs: the names asked for (None: every one that applies)
    pcie_ipc: bool = False  # the release has sglang's PCIe-IPC allreduce

    @property
    def modes(self) -> tuple[str, ...]:
        return (*MODES, LIMIT_MODE) if self.fuse_up_to is not None else MODES

    def release(self) -> configs.Release:
        return configs.Release(self.version, self.pcie_ipc, _tp(self), self.dtype, self.fuse_up_to)

    def token_limit(self, mode: str) -> int | None:
        """The limit the hook sets for a run of ``mode`` (None: the tree's own, untouched)."""
        if self.fuse_up_to is None or mode == "off":
            return None
        return self.fuse_up_to if mode == LIMIT_MODE else self.sglang_limit


@dataclass
class Run:
    mode: str
    repeat: int
    command: list[str]
    measurements: list[parse.Measurement] = field(default_factory=list)
    skipped: list[tuple[int, int, int]] = field(default_factory=list)
    counts: counter.Counts = field(default_factory=counter.Counts)
    fallbacks: list[tuple[str, str]] = field(default_factory=list)
    fatals: list[tuple[str, str]] = field(default_factory=list)
    workspace: list[str] = field(default_factory=list)
    seconds: float | None = None
    phases: list[tuple[str, float]] = field(default_factory=list)
    error: str | None = None
    tail: list[str] = field(default_factory=list)
    config: str = ""  # the configuration's name; empty: the one of ``mode`` in the off/on/limit table
    unused: str | None = None  # why the run has no figure: it did not use the allreduce its configuration names

    def __post_init__(self) -> None:
        self.config = self.config or TABLE[self.mode]

    def decode_ms(self, batch_size: int) -> float | None:
        for m in self.measurements:
            if m.batch_size == batch_size and m.decode_ms is not None:
                return m.decode_ms
        return None


@dataclass(frozen=True)
class Agreement:
    """The cosine threshold the answers were held to, the calibrated constant it started
    from, and the default's agreement with itself that may have lowered it."""

    threshold: float
    base: float
    default_vs_default: float | None


@dataclass
class ServerResult:
    settings: Settings
    module: str
    flags: Flags
    model: config.Model
    probe: dict[str, Any]
    runs: list[Run]
    rows: list[Row]
    verdict: Verdict
    problems: list[str]
    notes: list[str]
    kept: Path | None = None  # the logs, kept when a run went wrong
    chosen: tuple[Config, ...] = ()  # the configurations run, default first
    checks: dict[str, answers.Check] = field(default_factory=dict)  # each configuration's answers
    agreement: Agreement | None = None
    answer: Answer | None = None

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.NOT_AS_ASKED if self.problems else ExitCode.OK


def bench_module(package_dir: Path) -> str | None:
    """The module that holds this release's bench_one_batch (moved in 0.5.15)."""
    for rel, module in MODULES:
        if (package_dir / rel).is_file():
            return module
    return None


def refuse_release(settings: Settings) -> tuple[str, Flags]:
    version = settings.version or "(unknown version)"
    module = bench_module(settings.package_dir)
    if module is None:
        raise EnvironmentProblem(
            f"sglang {version} in {settings.package_dir} has no bench_one_batch (sglang/bench_one_batch.py or "
            "sglang/benchmark/one_batch.py): there is no offline benchmark to run",
            code="bench-host",
        )
    flags = choose(set(settings.options))
    if flags is None:
        raise EnvironmentProblem(
            f"sglang {version} has no FlashInfer allreduce fusion option in its server arguments: the release is "
            "older than the fusion (0.4.9), so there is nothing to compare",
            code="bench-host",
        )
    return module, flags


def _gib(value: int) -> str:
    return f"{value / (1 << 30):.1f}"


def required_free(server_args: tuple[str, ...]) -> float:
    """The free share of each GPU a run needs: ``--mem-fraction-static`` when given."""
    for i, arg in enumerate(server_args):
        value = None
        if arg.startswith("--mem-fraction-static="):
            value = arg.split("=", 1)[1]
        elif arg == "--mem-fraction-static" and i + 1 < len(server_args):
            value = server_args[i + 1]
        if value is not None:
            with contextlib.suppress(ValueError):
                return min(float(value) + 0.05, 1.0)
    return MIN_FREE_FRACTION


def refusal(probe: dict[str, Any], settings: Settings) -> str | None:
    """Why the host cannot run the benchmark, in one sentence; None when it can."""
    python, tp = settings.python, settings.tp or len(probe.get("gpus") or [])
    torch = probe.get("torch") or {}
    if not torch.get("ok"):
        return f"torch does not import in {python} ({torch.get('error')}): bench server runs sglang there (--python)"
    gpus = probe.get("gpus") or []
    if not gpus:
        visible = probe.get("cuda_visible_devices")
        hint = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        why = f": {torch['error']}" if torch.get("error") else ""
        return f"torch {torch.get('version')} in {python} sees no CUDA GPU{hint}{why}: sglang cannot run"
    if tp > len(gpus):
        names = "; ".join(f"GPU {g['index']}: {g['name']}" for g in gpus)
        return f"--tp {tp} needs {tp} GPUs; torch in {python} sees {len(gpus)} ({names})"
    need = required_free(settings.server_args)
    for gpu in gpus[:tp]:
        free, total = gpu.get("free_bytes"), gpu.get("total_bytes")
        if isinstance(free, int) and isinstance(total, int) and total and free < need * total:
            return (
                f"GPU {gpu['index']} ({gpu['name']}) has {_gib(free)} of {_gib(total)} GiB free: another process is "
                f"using it, and sglang needs about {need:.0%} of it (a smaller --server-arg=--mem-fraction-static=F "
                "lowers that)"
            )
    return None


def run_probe(settings: Settings) -> dict[str, Any]:
    step = "import torch and list the GPUs for bench server"
    try:
        answer = run_script(
            settings.python,
            server_probe.__file__,
            [str(settings.tp or 64)],
            step=step,
            timeout=min(settings.timeout, PROBE_TIMEOUT_S),
            env=probe_env(settings.package_dir),
        )
        return answer.json_object(settings.python, step)
    except ProbeError as exc:
        raise EnvironmentProblem(str(exc), code="bench-host") from exc


def probe_env(package_dir: Path, first: tuple[Path, ...] = ()) -> dict[str, str]:
    """The environment of the serving interpreter with sglang's directory on its path (for a
    --sglang-path tree), ``first`` ahead of it, and the multicast switches off."""
    env = dict(os.environ)
    env.update(bench_rank.MULTICAST_ENV)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([*map(str, first), str(package_dir.parent), *rest])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_env(hook_dir: Path, count_dir: Path, package_dir: Path, token_limit: int | None = None) -> dict[str, str]:
    from sm120patch.patcher.exports import gate_modules

    env = probe_env(package_dir, (hook_dir,))
    env[server_hook.COUNT_DIR_ENV] = str(count_dir)
    env[server_hook.GATE_MODULES_ENV] = ",".join(gate_modules(package_dir))
    env[server_hook.NUMPY_SEED_ENV] = str(SEED)
    if token_limit is not None:
        env[server_hook.FUSE_UP_TO_ENV] = str(token_limit)
    return env


def _tp(settings: Settings) -> int:
    assert settings.tp is not None, "resolved from the probe before any run"
    return settings.tp


def command(
    settings: Settings, module: str, model: config.Model | None, flags: Flags, chosen: Config, index: int
) -> list[str]:
    """bench_one_batch's command line for one run of ``chosen`` (``model`` None: the plan's
    placeholders, before the scratch directory exists)."""
    path = str(model.path) if model is not None else PLAN_MODEL
    args = [settings.python, "-m", module, "--model-path", path, "--load-format", "dummy"]
    tokenizer = model.tokenizer if model is not None else plan_tokenizer(settings)
    if tokenizer is not None:
        args += ["--tokenizer-path", str(tokenizer)]
    args += ["--tp-size", str(_tp(settings)), "--dtype", DTYPE_ARG[settings.dtype]]
    args += ["--batch-size", *map(str, settings.batch_sizes)]
    args += ["--input-len", str(settings.input_len), "--output-len", str(settings.output_len)]
    args += ["--run-name", f"sm120patch-{chosen.name}-{index + 1}"]
    args += list(configs.fusion_args(chosen, flags))
    return args + list(settings.server_args)


PLAN_MODEL = "<scratch>/model"  # the bundled config, written where the run's scratch directory will be
PLAN_TOKENIZER = "<scratch>/tokenizer"


def plan_tokenizer(settings: Settings) -> str | None:
    """The tokenizer a run will be given: the tiny one where the user's directory has none
    (the bundled config's directory is written with one)."""
    if settings.model_path is None or config.has_tokenizer(settings.model_path):
        return None
    return PLAN_TOKENIZER


def config_env(settings: Settings, chosen: Config) -> dict[str, str]:
    """What a run of ``chosen`` adds to the environment: its own variables, and the token limit
    the hook sets for it (``--fuse-up-to``)."""
    env = dict(chosen.env)
    limit = settings.token_limit(chosen.fusion)
    if limit is not None:
        env[server_hook.FUSE_UP_TO_ENV] = str(limit)
    return env


def choose_configs(settings: Settings) -> tuple[tuple[Config, ...], list[str]]:
    """The configurations this release and ``--tp`` run (``--configs``, else all that apply);
    one that was asked for and does not apply is refused with why (exit 2)."""
    try:
        return configs.select(settings.config_names, settings.release())
    except ValueError as exc:
        raise EnvironmentProblem(str(exc), code="bench-host") from None


def _model(settings: Settings, scratch: Path) -> config.Model:
    if settings.model_path is not None:
        return config.read_user(settings.model_path, _tp(settings), scratch / "tokenizer")
    return config.write_bundled(
        scratch / "model",
        settings.hidden,
        settings.layers,
        settings.dtype,
        _tp(settings),
        settings.input_len + settings.output_len,
    )


def _check(run: Run, flags: Flags, tp: int, limit: int | None = None) -> str | None:
    """What a finished run did other than what it says; None when it did what it says
    (``limit``: the token limit the run was to have, set by the hook)."""
    counts = run.counts
    if limit is not None and counts.processes and counts.token_limits != {limit}:
        found = ", ".join(map(str, sorted(counts.token_limits))) or "none"
        return (
            f"the fusion-{run.mode} run was to fuse up to {limit} tokens, but the limits set in sglang's "
            f"processes were: {found} (its gate module was not imported, or has no {server_hook.LIMIT_NAME})"
        )
    if run.mode == "off" and counts.ran:
        hatch = "" if flags.off else " and the release has no option to stop that"
        return (
            f"the fusion-off run ({flags.off_text}) launched the fused kernel {counts.calls}x: sglang turned fusion "
            f"on by itself for this model{hatch}"
        )
    if run.mode != "off" and not counts.ran:
        if run.fallbacks:
            line, why = run.fallbacks[0]
            said = f"{why}; sglang said: {line!r}"
        elif tp == 1:
            said = "at TP 1 there is no allreduce to fuse"
        elif counts.processes == 0:
            said = "the call counter did not reach sglang's processes"
        else:
            said = "sglang logged no reason (its gate for these GPUs or this model is closed: `sm120patch verify`)"
        return f"fusion was asked for ({flags.on_text}) but never ran: {said}"
    return None


def unused(run: Run, output: list[str]) -> str | None:
    """Why a run of a PCIe-IPC configuration has no figure: PCIe-IPC took no allreduce (with
    sglang's line that says why, where it logged one); None when it took some, or was not asked."""
    if not configs.BY_NAME[run.config].pcie_ipc or run.counts.allreduces(counter.BACKENDS["pcie_ipc"]):
        return None
    said = parse.said(output, parse.PCIE_IPC_OFF)
    flashinfer = run.counts.allreduces(counter.BACKENDS["flashinfer"])
    if said:
        why = f"{said[0][1]}; sglang said: {said[0][0]!r}"
    elif flashinfer:
        why = f"FlashInfer's kAllReduce took the plain allreduces ({flashinfer}x): fusion on leaves PCIe-IPC none"
    else:
        why = f"sglang logged no reason ({run.counts.describe_allreduce()})"
    return f"{run.config} has no figure: PCIe-IPC was asked for and took no allreduce: {why}"


def _after(run: Run, output: list[str], count_dir: Path, sweep: list[tuple[int, int, int]]) -> None:
    run.counts = counter.read(count_dir)
    run.unused = unused(run, output)
    run.fallbacks = parse.said(output, parse.FALLBACKS)
    run.fatals = parse.said(output, parse.FATALS)
    run.workspace = [line for line, _ in parse.said(output, [(t, "") for t in parse.WORKSPACE_OK])]
    try:
        parsed = parse.parse(output, sweep)
    except parse.ParseError as exc:
        run.error = f"its output could not be read: {exc}"
        return
    run.measurements, run.skipped = parsed.runs, parsed.skipped


def _failure_text(run: Run, failure: launch.RunFailure) -> str:
    said = run.fatals[0][0] if run.fatals else (failure.tail[-1] if failure.tail else "no output")
    return f"{failure}; sglang's last word: {said!r}"


def run(
    settings: Settings,
    on_status: Callable[[str], None] = lambda text: None,
) -> ServerResult:
    module, flags = refuse_release(settings)
    probe = run_probe(settings)
    problem = refusal(probe, settings)
    if problem:
        raise EnvironmentProblem(problem, code="bench-host")
    settings = dataclasses.replace(settings, tp=settings.tp or len(probe["gpus"]))
    chosen, chosen_notes = choose_configs(settings)
    scratch = Path(tempfile.mkdtemp(prefix="sm120patch-bench-server-"))
    keep = False
    try:
        model = _model(settings, scratch)
        result = _run_all(settings, module, flags, model, probe, scratch, on_status, chosen)
        result.notes[:0] = chosen_notes
        keep = bool(result.problems)
        result.kept = scratch / "logs" if keep else None
        return result
    except RunStopped:
        keep = True
        raise
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)


def _run_all(
    settings: Settings,
    module: str,
    flags: Flags,
    model: config.Model,
    probe: dict[str, Any],
    scratch: Path,
    on_status: Callable[[str], None],
    chosen: tuple[Config, ...],
) -> ServerResult:
    hook_dir = scratch / "hook"
    hook_dir.mkdir()
    shutil.copyfile(server_hook.__file__, hook_dir / "sitecustomize.py")
    (scratch / "logs").mkdir()
    (scratch / "cwd").mkdir()
    sweep = list(itertools.product(settings.batch_sizes, [settings.input_len], [settings.output_len]))
    runs: list[Run] = []
    problems: list[str] = []
    notes: list[str] = []
    total = settings.repeat * len(chosen)
    by_name = {c.name: c for c in chosen}
    for index, name in order(settings.repeat, tuple(by_name)):
        one_config = by_name[name]
        mode = one_config.fusion
        count_dir = scratch / "counts" / f"{name}-{index + 1}"
        count_dir.mkdir(parents=True)
        run = Run(mode, index + 1, command(settings, module, model, flags, one_config, index), config=name)
        runs.append(run)
        label = f"run {len(runs)}/{total}, {name}" + (
            f" (up to {settings.fuse_up_to} tokens)" if mode == LIMIT_MODE else ""
        )
        with open(scratch / "logs" / f"{name}-{index + 1}.log", "w", encoding="utf-8") as log:
            _one(settings, run, count_dir, hook_dir, scratch, sweep, log, label, on_status)
        if run.error is not None:
            problems.append(f"the {name} run failed: {run.error}")
            break
        problem = _check(run, flags, _tp(settings), settings.token_limit(mode))
        if problem:
            problems.append(problem)
            if settings.repeat > 1 and index + 1 < settings.repeat:
                notes.append("stopped after this pair of runs: the next ones would not do what they say either")
            break
    rows = _rows(settings, runs, notes)
    notes += list(dict.fromkeys(r.unused for r in runs if r.unused is not None))
    checks, self_cosine, limit = check_answers(chosen, runs)
    problems += [
        f"the {name} configuration computed wrong answers: {check.why}"
        for name, check in checks.items()
        if check.status.wrong and not problems
    ]
    if problems:
        verdict = no_verdict(problems[0])
    elif not rows and any(c.name == TABLE["on"] for c in chosen):
        problems.append("no batch size has a decode latency in every run")
        verdict = no_verdict(problems[0])
    elif rows:
        verdict = judge(rows, _tp(settings), flags)
        if any(c.name not in TABLE.values() for c in chosen):  # fusion against the default alone may mislead
            verdict = Verdict(verdict.kind, f"{verdict.advice} (against sglang's default; the answer weighs all)")
    else:
        verdict = no_verdict("fusion was not among the configurations run: the answer below says what is fastest")
    found = answer.answer(
        chosen,
        checks,
        figures(runs, "decode"),
        figures(runs, "prefill"),
        settings.batch_sizes,
        flags,
        settings.fuse_up_to,
        _tp(settings),
    )
    if settings.tp == 1:
        notes.append("TP 1 has no allreduce, so nothing can be fused: this run checks the harness, not fusion")
    if rows and not all(r.measured_noise for r in rows):
        notes.append(
            "one run per mode: the noise is not measured, and the off run went first with cold caches "
            "(--repeat 2 or more measures the noise and alternates the order)"
        )
    return ServerResult(
        settings,
        module,
        flags,
        model,
        probe,
        runs,
        rows,
        verdict,
        problems,
        notes,
        chosen=chosen,
        checks=checks,
        agreement=Agreement(limit, answers.COSINE_MIN, self_cosine),
        answer=found,
    )


def check_answers(chosen: tuple[Config, ...], runs: list[Run]) -> tuple[dict[str, answers.Check], float | None, float]:
    """Each configuration's answers against sglang's default's first run; the default's own
    agreement with itself (two runs or more) and the threshold it makes."""
    defaults = [r.counts.logits for r in runs if r.config == configs.DEFAULT and r.error is None]
    self_cosine = answers.self_agreement(defaults)
    limit = answers.threshold(self_cosine)
    reference = defaults[0] if defaults and defaults[0].first else None
    done = [r for r in runs if r.error is None]
    checks = {
        c.name: answers.check(c, [r.counts.logits for r in done if r.config == c.name], reference, limit)
        for c in chosen
    }
    return checks, self_cosine, limit


def figures(runs: list[Run], part: str) -> dict[str, dict[int, list[float]]]:
    """Each configuration's latencies (ms) of ``part`` by batch size, over its runs (the answer
    weighs them; the report shows their medians)."""
    found: dict[str, dict[int, list[float]]] = {}
    for run in runs:
        if run.error is not None or run.unused is not None:
            continue
        by_size = found.setdefault(run.config, {})
        for m in run.measurements:
            value = m.decode_ms if part == "decode" else m.prefill_latency_s
            if value is not None:
                by_size.setdefault(m.batch_size, []).append(value if part == "decode" else value * 1000.0)
    return found


def _one(
    settings: Settings,
    run: Run,
    count_dir: Path,
    hook_dir: Path,
    scratch: Path,
    sweep: list[tuple[int, int, int]],
    log: TextIO,
    label: str,
    on_status: Callable[[str], None],
) -> None:
    env = run_env(hook_dir, count_dir, settings.package_dir, settings.token_limit(run.mode))
    env.update(configs.BY_NAME[run.config].env)
    try:
        output = launch.run(
            run.command, env, scratch / "cwd", settings.timeout, log, lambda phase: on_status(f"{label}: {phase}")
        )
    except launch.RunFailure as failure:
        run.tail = failure.tail
        _after(run, failure.tail, count_dir, [])
        run.fatals = parse.said(_read(log), parse.FATALS)
        run.fallbacks = parse.said(_read(log), parse.FALLBACKS)
        text = _failure_text(run, failure)
        if failure.kind == "timeout" or run.config == configs.DEFAULT:
            raise RunStopped(f"bench server stopped in {label}: {text}; the log is in {scratch / 'logs'}") from failure
        run.error = text
        return
    run.seconds, run.phases, run.tail = output.seconds, output.phases, output.lines[-launch.TAIL :]
    _after(run, output.lines, count_dir, sweep)


def _table_runs(runs: list[Run]) -> list[Run]:
    """The runs of the off / on / limit table: sglang's default, fusion, fusion up to the limit."""
    return [r for r in runs if TABLE.get(r.mode) == r.config]


def _prefill(runs: list[Run], size: int) -> dict[str, list[float]]:
    """Each setting's prefill latencies (s) at batch ``size``: where a lower token limit shows."""
    found: dict[str, list[float]] = {}
    for run in _table_runs(runs):
        for m in run.measurements:
            if m.batch_size == size and m.prefill_latency_s is not None:
                found.setdefault(run.mode, []).append(m.prefill_latency_s)
    return found


def _read(log: TextIO) -> list[str]:
    log.flush()
    with open(log.name, encoding="utf-8", errors="replace") as handle:
        return handle.read().splitlines()


def _rows(settings: Settings, runs: list[Run], notes: list[str]) -> list[Row]:
    rows = []
    runs = _table_runs(runs)
    for size in settings.batch_sizes:
        off = [ms for r in runs if r.mode == "off" and (ms := r.decode_ms(size)) is not None]
        on = [ms for r in runs if r.mode == "on" and (ms := r.decode_ms(size)) is not None]
        limited = [ms for r in runs if r.mode == LIMIT_MODE and (ms := r.decode_ms(size)) is not None]
        pairs = min(sum(r.mode == m for r in runs) for m in settings.modes)
        if (
            off
            and on
            and len(off) >= pairs
            and len(on) >= pairs
            and len(limited) >= pairs * (LIMIT_MODE in settings.modes)
        ):
            rows.append(Row(size, off, on, limited, _prefill(runs, size)))
        elif any(s[0] == size for r in runs for s in r.skipped):
            notes.append(f"batch {size} was skipped by sglang: it does not fit in the KV cache (max batch size limit)")
    return rows
