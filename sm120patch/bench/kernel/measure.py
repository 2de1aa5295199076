"""Ask the serving interpreter what it has, refuse what cannot run, then measure.

Everything that would make the ranks fail in a way a person cannot read is checked first,
in one probe, and refused with one sentence (exit 2): no torch, no CUDA GPU, fewer GPUs
than ``--tp``, no FlashInfer (or one without the unified fusion API), a FlashInfer whose
trtllm kernel is not built for these GPUs, no P2P between two of them.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

from sm120patch.bench.kernel.estimate import Model, tokens_text
from sm120patch.bench.kernel.verdict import Point, Verdict, judge
from sm120patch.bench.remote import bench_rank
from sm120patch.errors import EnvironmentProblem, ExitCode, NotAsAsked
from sm120patch.runner import ProbeError, ranks, run_script
from sm120patch.sglang import flashinfer as flashinfer_kernel
from sm120patch.sglang.fusion_call import SglangCall
from sm120patch.sglang.options import PCIE_IPC_FLAG

SGLANG_NORM = "sgl_kernel.fused_add_rmsnorm"  # what sglang runs after the allreduce when fusion is off
CALLS_PER_GRAPH = 10
PROBE_TIMEOUT_S = 30.0
#: The rank counts FlashInfer's trtllm fusion kernel takes (``allreduce_fusion_kernel``: "unsupported
#: ranks number! Supported ranks: 2, 4, 8, 16", seen on FlashInfer 0.6.18 at world size 1).
KERNEL_WORLDS = (2, 4, 8, 16)
REPLAYS = 40


class BaselineChoice(str, Enum):
    """What ``--baseline`` asks fusion to be compared with."""

    AUTO = "auto"  # sglang's own code where it imports, else stand-ins
    SGLANG = "sglang"  # sglang's own code, or nothing (exit 2)
    STAND_IN = "stand-in"  # never import sglang


class BaselineSource(str, Enum):
    """What the unfused side (the baseline) ran, as the ranks say it."""

    SGLANG = "sglang"  # sglang's own allreduce and add + RMSNorm
    STAND_IN = "stand-in"  # named stand-ins: sglang's code did not run here


@dataclass(frozen=True)
class Settings:
    python: str
    tp: int | None  # None: every GPU torch sees
    tokens: tuple[int, ...]
    hidden: int
    dtype: str
    timeout: float
    eps: float = 1e-6
    calls: int = CALLS_PER_GRAPH
    replays: int = REPLAYS
    device: str = "cuda"  # "cpu-standin" only in sm120patch's own tests (bench_rank.py)
    fault: str | None = None
    baseline: BaselineChoice = BaselineChoice.AUTO
    custom_allreduce: bool = True  # sglang's default; False as --disable-custom-all-reduce
    pcie_ipc: bool = False  # the release has SGLANG_ENABLE_PCIE_IPC_ALLREDUCE (0.5.23+)


FUSED, UNFUSED, ALLREDUCE, ALLREDUCE_ON, PCIE_IPC = "fused", "unfused", "allreduce", "allreduce-on", "pcie-ipc"


@dataclass(frozen=True)
class Variant:
    """One measured variant: a row of ``VARIANTS``.  A new one is a row here plus the code
    that measures it (the ranks' ``measure`` in bench_rank.py, or a pass of its own in ``run``);
    ``fastest``, the table, the JSON, the plot and the saved result follow the row."""

    name: str  # Row.timings' key, ``fastest``'s answer and the JSON's ``variants`` key
    measures: str  # what it measures, in one sentence
    launchable: bool  # a server can be launched with it: a candidate for ``fastest``
    since: str  # which release or condition adds it
    timed_as: str | None  # the ranks' name for it in the main pass; None: a pass of its own
    always: bool = False  # measured in every run (else: where ``since`` holds)
    header: str = ""  # its short name: the text table's column where ``column``, the fastest line
    column: bool = False  # a column of the text table and a line of the plot
    label: str = ""  # its name in the fastest line's list of launchable variants
    words: str = ""  # what the fastest line says when it is fastest
    plot: str = ""  # its line in the plot ({baseline}: what the unfused side ran)
    json_field: str | None = None  # its timing's field in sm120patch-bench/2 rows (older than this table)
    name_field: str | None = None  # the sm120patch-bench/2 field naming the allreduce it ran
    why_field: str | None = None  # the sm120patch-bench/2 field saying why that allreduce


VARIANTS: tuple[Variant, ...] = (
    Variant(
        FUSED,
        "sglang's fused allreduce + add + RMSNorm (FlashInfer trtllm allreduce_fusion), as fusion on runs it",
        launchable=True,
        since="every release with the fusion",
        timed_as="fused",
        always=True,
        header="fused",
        column=True,
        label="fused",
        words="fusion on",
        plot="fused (FlashInfer trtllm)",
        json_field="fused",
    ),
    Variant(
        UNFUSED,
        "sglang's allreduce, then its add + RMSNorm, as fusion off runs them",
        launchable=True,
        since="every release",
        timed_as="unfused",
        always=True,
        header="unfused",
        column=True,
        label="unfused",
        words="sglang's default (fusion off)",
        plot="unfused ({baseline})",
        json_field="unfused",
        name_field="allreduce_name",
        why_field="allreduce_why",
    ),
    Variant(
        ALLREDUCE,
        "the unfused path's allreduce alone: the floor the unfused path cannot beat",
        launchable=False,
        since="every release",
        timed_as="allreduce",
        always=True,
        header="AR alone",
        column=True,
        plot="allreduce alone",
        json_field="allreduce",
    ),
    Variant(
        ALLREDUCE_ON,
        "a plain allreduce as the release routes it with fusion on (FlashInfer's kAllReduce)",
        launchable=False,
        since="0.5.18+, which send plain allreduces to FlashInfer once fusion is on",
        timed_as="allreduce_on",
        header="AR fusion on",
        json_field="allreduce_fusion_on",
    ),
    Variant(
        PCIE_IPC,
        f"the unfused path again with {PCIE_IPC_FLAG}=1",
        launchable=True,
        since="0.5.23+, with sglang's own code, on GPUs without full NVLink",
        timed_as=None,
        header="PCIe-IPC",
        label=f"{PCIE_IPC_FLAG}=1",
        words=f"{PCIE_IPC_FLAG}=1 (fusion off)",
        json_field="pcie_ipc",
        name_field="pcie_ipc_allreduce",
    ),
)


def variants() -> tuple[Variant, ...]:
    """The table as it is now (a test may add a row)."""
    return VARIANTS


@dataclass(frozen=True)
class Timing:
    median_us: float
    p90_us: float


@dataclass(frozen=True)
class Row:
    tokens: int
    timings: dict[str, Timing]  # by Variant.name: those measured at this size (every ``always`` one)
    max_abs_error: dict[str, float]
    tolerance: dict[str, float]
    ok: bool
    allreduces: dict[str, str] = field(default_factory=dict)  # by variant: the allreduce sglang picked for it
    why: dict[str, str] = field(default_factory=dict)  # by variant: why not sglang's custom allreduce, where it says

    def measured(self) -> list[tuple[Variant, Timing]]:
        """The variants measured at this size, in the table's order."""
        return [(v, self.timings[v.name]) for v in variants() if v.name in self.timings]

    def with_timing(self, name: str, timing: Timing, allreduce: str = "") -> Row:
        """This row with variant ``name`` measured (and the allreduce it ran, where named)."""
        allreduces = dict(self.allreduces, **{name: allreduce}) if allreduce else self.allreduces
        return replace(self, timings={**self.timings, name: timing}, allreduces=allreduces)

    @property
    def fastest(self) -> str:
        """Which of the variants a server can be launched with is fastest at this size."""
        paths = {v.name: t.median_us for v, t in self.measured() if v.launchable}
        return min(paths, key=lambda name: paths[name])

    @property
    def point(self) -> Point:
        return Point(self.tokens, self.fused.median_us, self.unfused.median_us, self.ok)

    @property
    def vs_floor_pct(self) -> float:
        """Fused against the allreduce alone (the stand-in's: sglang's custom allreduce can be faster)."""
        return (self.fused.median_us - self.allreduce.median_us) / self.allreduce.median_us * 100.0

    # The variants by their sm120patch-bench/2 names.
    @property
    def fused(self) -> Timing:
        return self.timings[FUSED]

    @property
    def unfused(self) -> Timing:
        return self.timings[UNFUSED]

    @property
    def allreduce(self) -> Timing:
        return self.timings[ALLREDUCE]

    @property
    def allreduce_on(self) -> Timing | None:
        return self.timings.get(ALLREDUCE_ON)

    @property
    def pcie_ipc(self) -> Timing | None:
        return self.timings.get(PCIE_IPC)

    @property
    def allreduce_name(self) -> str:
        """What the unfused path's allreduce was at this size."""
        return self.allreduces.get(UNFUSED, "")

    @property
    def allreduce_why(self) -> str:
        return self.why.get(UNFUSED, "")

    @property
    def pcie_ipc_name(self) -> str:
        """The allreduce sglang picked with PCIe-IPC on (PCIe-IPC only up to its width)."""
        return self.allreduces.get(PCIE_IPC, "")


@dataclass(frozen=True)
class Baseline:
    """What the unfused and fused paths ran: sglang's own code, or named stand-ins."""

    source: BaselineSource
    allreduce: tuple[str, ...]  # the allreduces seen, smallest token count first
    norm: str
    fused: str
    why: tuple[str, ...] = ()  # why stand-ins, and what they cannot show

    @property
    def indicative(self) -> bool:
        return self.source is not BaselineSource.SGLANG

    def describe(self) -> str:
        return f"{' / '.join(self.allreduce) or 'allreduce'}, then {self.norm}"


@dataclass
class BenchResult:
    settings: Settings
    tp: int
    call: SglangCall
    probe: dict[str, Any]
    rows: list[Row]
    baseline: Baseline
    versions: dict[str, Any]
    verdict: Verdict
    notes: list[str] = field(default_factory=list)
    model: Model | None = None  # for the per-step estimate (--model-config, --layers)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if all(r.ok for r in self.rows) else ExitCode.NOT_AS_ASKED


def run_probe(python: str, world: int, timeout: float) -> dict[str, Any]:
    step = "import torch and FlashInfer for bench"
    try:
        answer = run_script(
            python, bench_rank.__file__, ["probe", str(world)], step=step, timeout=timeout, env=rank_env()
        )
        return answer.json_object(python, step)
    except ProbeError as exc:
        raise EnvironmentProblem(str(exc), code="bench-host") from exc


def rank_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(bench_rank.MULTICAST_ENV)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def refusal(probe: dict[str, Any], tp: int | None, python: str) -> str | None:
    """Why bench cannot run here, in one sentence; None when it can."""
    torch = probe.get("torch") or {}
    if not torch.get("ok"):
        return (
            f"torch does not import in {python} ({torch.get('error')}): bench runs in the interpreter that "
            "serves sglang (--python)"
        )
    gpus = probe.get("gpus") or []
    if not gpus:
        why = f": {torch['error']}" if torch.get("error") else ""
        visible = probe.get("cuda_visible_devices")
        hint = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        return f"torch {torch.get('version')} in {python} sees no CUDA GPU{hint}{why}: nothing to measure"
    world = tp or len(gpus)
    if world < 2:
        return f"one GPU is visible to torch: an allreduce needs --tp 2 or more GPUs{_names(gpus)}"
    if world > len(gpus):
        return f"--tp {world} needs {world} GPUs; torch in {python} sees {len(gpus)}{_names(gpus)}"
    if world not in KERNEL_WORLDS:
        how = "--tp" if tp else f"{world} GPUs are visible; --tp"
        return (
            f"FlashInfer's trtllm fused allreduce runs on {', '.join(map(str, KERNEL_WORLDS))} ranks only "
            f"('unsupported ranks number'), so sglang cannot fuse at TP {world}: {how} {world} has nothing to measure"
        )
    fi = probe.get("flashinfer") or {}
    if not fi.get("ok"):
        return f"FlashInfer does not import in {python} ({fi.get('error')}): there is no fused kernel to measure"
    if fi.get("comm_error"):
        return f"flashinfer.comm does not import in {python}: {fi['comm_error']}"
    if not fi.get("unified_api"):
        return (
            f"FlashInfer {fi.get('version')} has no create_allreduce_fusion_workspace/allreduce_fusion: "
            f"bench needs FlashInfer {flashinfer_kernel.FIRST_SM12X} or newer"
        )
    facts = flashinfer_kernel.inspect(fi.get("version"), Path(fi["package_dir"]) if fi.get("package_dir") else None)
    used = gpus[:world]
    majors = sorted({g["capability"][0] for g in used})
    if facts.majors is not None and any(m not in facts.majors for m in majors):
        return (
            f"FlashInfer {fi.get('version')} builds its trtllm allreduce for SM {list(facts.majors)} only, and these "
            f"GPUs are SM {majors} ({facts.source}); upgrade to flashinfer-python>={flashinfer_kernel.FIRST_SM12X}"
        )
    for i, j, ok in probe.get("p2p") or []:
        if not ok and i < world and j < world:
            return (
                f"no P2P access from GPU {i} to GPU {j} (torch.cuda.can_device_access_peer): FlashInfer's trtllm "
                "allreduce needs P2P between every pair, so fusion cannot run on this host"
            )
    return None


def _names(gpus: list[dict[str, Any]]) -> str:
    """`` (GPU 0: NAME; ...)`` for a refusal; ``refusal`` calls it only once torch sees a GPU."""
    return " (" + "; ".join(f"GPU {g['index']}: {g['name']}" for g in gpus) + ")"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _timing(event: dict[str, Any], name: str) -> Timing:
    return Timing(float(event[name]["median_us"]), float(event[name]["p90_us"]))


def slowest(events: list[dict[str, Any]], name: str) -> Timing:
    """The slowest rank's timing of ``name``: each figure the largest of the ranks'."""
    return Timing(max(_timing(e, name).median_us for e in events), max(_timing(e, name).p90_us for e in events))


def slowest_if_timed(events: list[dict[str, Any]], name: str) -> Timing | None:
    """As ``slowest``, for a path not every pass times; None where a rank did not time it."""
    return slowest(events, name) if all(name in e for e in events) else None


def combine(logs: list[ranks.RankLog]) -> list[Row]:
    """One row per token count: each timing the slowest rank's, each error the largest."""
    by_tokens: dict[int, list[dict[str, Any]]] = {}
    for log in logs:
        for event in log.events:
            if event["event"] == "row":
                by_tokens.setdefault(int(event["tokens"]), []).append(event)
    rows = []
    for tokens, events in sorted(by_tokens.items()):
        timings: dict[str, Timing] = {}
        for variant in variants():
            if variant.timed_as is None:
                continue  # measured by a pass of its own
            timing = slowest(events, variant.timed_as) if variant.always else slowest_if_timed(events, variant.timed_as)
            if timing is not None:
                timings[variant.name] = timing
        errors = {key: max(float(e["max_abs_error"][key]) for e in events) for key in events[0]["max_abs_error"]}
        name, why = str(events[0].get("allreduce_name", "")), str(events[0].get("allreduce_why", ""))
        rows.append(
            Row(
                tokens,
                timings,
                max_abs_error=errors,
                tolerance=events[0]["tolerance"],
                ok=all(e["ok"] for e in events),
                allreduces={UNFUSED: name} if name else {},
                why={UNFUSED: why} if why else {},
            )
        )
    return rows


def run(
    settings: Settings,
    call: SglangCall,
    keep_off: str,
    on_event: Callable[[int, dict[str, Any]], None] = lambda rank, event: None,
    sglang_version: str | None = None,
    model: Model | None = None,
) -> BenchResult:
    # The probe imports torch and FlashInfer: bounded by the phase limit, at most PROBE_TIMEOUT_S.
    probe = run_probe(settings.python, settings.tp or 0, min(settings.timeout, PROBE_TIMEOUT_S))
    if settings.device == "cuda":
        problem = refusal(probe, settings.tp, settings.python)
        if problem:
            raise EnvironmentProblem(problem, code="bench-host")
        world = settings.tp or len(probe["gpus"])
    else:
        world = settings.tp or 2
    call = call.for_world(world)
    config = {
        "device": settings.device,
        "fault": settings.fault,
        "dtype": settings.dtype,
        "hidden": settings.hidden,
        "eps": settings.eps,
        "tokens": list(settings.tokens),
        "calls": settings.calls,
        "replays": settings.replays,
        "call": dict(call.values, routes_allreduce=call.routes_allreduce),
        "baseline": BaselineChoice(settings.baseline).value,
        "custom_allreduce": settings.custom_allreduce,
        "sglang_version": sglang_version,
    }
    env = rank_env()
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    try:
        logs = ranks.launch(
            settings.python, bench_rank.__file__, ["run", json.dumps(config)], world, env, settings.timeout, on_event
        )
    except ranks.RankFailure as exc:
        if exc.kind is ranks.FailureKind.NO_KERNEL:
            raise EnvironmentProblem(
                f"FlashInfer has no trtllm allreduce kernel for these GPUs ({exc})", code="bench-host"
            ) from exc
        if exc.kind is ranks.FailureKind.ENVIRONMENT:
            raise EnvironmentProblem(str(exc), code="bench-host") from exc
        if exc.kind is ranks.FailureKind.DECLINED:
            raise NotAsAsked(
                f"{exc.message}: a server with fusion on would run unfused on these GPUs (rank {exc.rank})",
                code="bench-host",
            ) from exc
        raise
    done = next(e for e in logs[0].events if e["event"] == "done")
    rows = combine(logs)
    baseline = read_baseline(done, rows)
    notes = list(call.notes)
    if any(ALLREDUCE_ON in row.timings for row in rows):
        notes.append(routed_note(rows))
    why = pcie_ipc_pass(settings.pcie_ipc, done, env)
    if why:
        notes.append(why)
        on_event(0, {"event": "phase", "phase": f"unfused again with {PCIE_IPC_FLAG}=1"})
        second = dict(env, MASTER_PORT=str(free_port()), **{PCIE_IPC_FLAG: "1"})
        try:
            again = ranks.launch(
                settings.python,
                bench_rank.__file__,
                ["run", json.dumps(dict(config, only_unfused=True))],
                world,
                second,
                settings.timeout,
                on_event,
            )
        except ranks.RankFailure as exc:
            notes.append(f"{PCIE_IPC_FLAG}=1 could not be measured: {exc}")
        else:
            rows = with_pcie_ipc(rows, combine_unfused(again))
    if baseline.indicative and not baseline.norm.startswith(SGLANG_NORM) and rows:
        notes.append(floor_note(rows, baseline.norm))
    return BenchResult(
        settings=settings,
        tp=world,
        call=call,
        probe=probe,
        rows=rows,
        baseline=baseline,
        versions=done.get("versions") or {},
        verdict=judge([r.point for r in rows], world, keep_off, indicative=baseline.why if baseline.indicative else ()),
        notes=notes,
        model=model,
    )


def routed_note(rows: list[Row]) -> str:
    """0.5.18+ with fusion on send every plain allreduce on the attention-TP and MoE groups to
    FlashInfer's kAllReduce, ahead of sglang's own allreduce: what that costs or saves."""
    timed = [r for r in rows if ALLREDUCE_ON in r.timings]
    first, last = timed[0], timed[-1]

    def cell(row: Row) -> str:
        routed = row.timings[ALLREDUCE_ON].median_us
        return f"{routed:.1f} vs {row.allreduce.median_us:.1f} µs at {tokens_text(row.tokens)}"

    span = cell(first) if first is last else f"{cell(first)}, {cell(last)}"
    return (
        "with fusion on, this release also sends plain allreduces (attention-TP and MoE groups) to FlashInfer's "
        f"kAllReduce instead of its own allreduce: {span}"
    )


def pcie_ipc_pass(has_option: bool, done: dict[str, Any], env: dict[str, str]) -> str | None:
    """Why the unfused path is measured a second time with 0.5.23's PCIe-IPC allreduce (None:
    it is not): only sglang's own code can run it, and only PCIe hosts would choose it."""
    if not has_option or done.get("source") != BaselineSource.SGLANG.value or done.get("full_nvlink"):
        return None
    if env.get(PCIE_IPC_FLAG) == "1":
        return None  # already the baseline measured
    return (
        f"this release has {PCIE_IPC_FLAG}=1 and these GPUs have no full NVLink: sglang's unfused path "
        "was measured again with it (column PCIe-IPC)"
    )


def combine_unfused(logs: list[ranks.RankLog]) -> dict[int, tuple[Timing, str]]:
    """The unfused path of a second pass, per token count: the slowest rank's, and its allreduce."""
    found: dict[int, tuple[Timing, str]] = {}
    for log in logs:
        for event in log.events:
            if event["event"] != "row":
                continue
            timing = _timing(event, "unfused")
            tokens = int(event["tokens"])
            if tokens in found:
                old = found[tokens][0]
                timing = Timing(max(old.median_us, timing.median_us), max(old.p90_us, timing.p90_us))
            found[tokens] = (timing, str(event.get("allreduce_name", "")))
    return found


def with_pcie_ipc(rows: list[Row], second: dict[int, tuple[Timing, str]]) -> list[Row]:
    return [row.with_timing(PCIE_IPC, *second[row.tokens]) if row.tokens in second else row for row in rows]


def read_baseline(done: dict[str, Any], rows: list[Row]) -> Baseline:
    """The ranks' account of what ran, with each distinct allreduce once, in token order."""
    seen: list[str] = []
    for row in rows:
        if row.allreduce_name and row.allreduce_name not in seen:
            seen.append(row.allreduce_name)
    return Baseline(
        source=BaselineSource.SGLANG if done.get("source") == BaselineSource.SGLANG.value else BaselineSource.STAND_IN,
        allreduce=tuple(seen),
        norm=str(done["norm"]),
        fused=str(done.get("fused", "")),
        why=tuple(str(n) for n in done.get("notes") or ()),
    )


def floor_note(rows: list[Row], norm: str) -> str:
    """When the unfused path could not use sglang's own add + RMSNorm kernel, the gain is
    overstated: say so, and how fused compares with the allreduce alone."""
    first, last = rows[0], rows[-1]
    return (
        f"unfused ran {norm}, not sglang's {SGLANG_NORM} (not importable in this interpreter), so fused vs "
        f"unfused overstates the gain; against this allreduce alone (not sglang's custom allreduce, which can be "
        f"faster), fused is "
        f"{first.vs_floor_pct:+.0f} % at {first.tokens} and {last.vs_floor_pct:+.0f} % at {last.tokens} tokens"
    )
