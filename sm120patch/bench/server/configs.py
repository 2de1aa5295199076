"""The configurations ``bench server`` can run, as data: one row each.

A configuration is a name, the environment it adds, how it sets fusion (``off``: this
release's escape hatch, or nothing; ``on``: this release's option; ``limit``: on, with the
``--fuse-up-to`` token limit), what it needs of the release and the host, and one sentence.
The release decides which apply, from its code: the fusion options its argument code
accepts (``flags.choose``) and whether it has sglang's PCIe-IPC allreduce
(``distributed/device_communicators/pcie_ipc_ar.py``, 0.5.21+).  PCIe-IPC itself takes TP 2,
4 and 8 and bf16 only (``pcie_ipc_ar.py``: its world sizes, its dtype check), and only the
"tp" group: anything else would run, and silently not use it.

A new configuration is one row in ``CONFIGS``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from sm120patch.bench.server.flags import Flags
from sm120patch.sglang.options import PCIE_IPC_FLAG

DEFAULT = "default"
PCIE_IPC_TPS = (2, 4, 8)
PCIE_IPC_DTYPES = ("bf16",)
FUSION_MODES = ("off", "on", "limit")


@dataclass(frozen=True)
class Config:
    name: str
    fusion: str  # one of FUSION_MODES
    sentence: str
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    pcie_ipc: bool = False  # needs a release with sglang's PCIe-IPC allreduce
    tps: tuple[int, ...] | None = None  # None: any TP
    dtypes: tuple[str, ...] | None = None  # None: any dtype


_PCIE = MappingProxyType({PCIE_IPC_FLAG: "1"})

CONFIGS: tuple[Config, ...] = (
    Config(DEFAULT, "off", "sglang as it ships: fusion off, its own allreduce (custom allreduce or NCCL)"),
    Config("fusion", "on", "FlashInfer's allreduce + RMSNorm fusion on, up to sglang's own token limit"),
    Config("fusion-limit", "limit", "fusion on up to the --fuse-up-to token limit, unfused above it"),
    Config(
        "pcie-ipc",
        "off",
        "sglang's own SM120 PCIe allreduce (FlashInfer's PCIe-IPC kernels), fusion off",
        _PCIE,
        pcie_ipc=True,
        tps=PCIE_IPC_TPS,
        dtypes=PCIE_IPC_DTYPES,
    ),
    Config(
        "pcie-ipc+fusion",
        "on",
        "PCIe-IPC asked for and fusion on: FlashInfer's kAllReduce takes the plain allreduces it fits",
        _PCIE,
        pcie_ipc=True,
        tps=PCIE_IPC_TPS,
        dtypes=PCIE_IPC_DTYPES,
    ),
    Config(
        "pcie-ipc+fusion-limit",
        "limit",
        "PCIe-IPC with fusion on up to the --fuse-up-to limit: PCIe-IPC above it",
        _PCIE,
        pcie_ipc=True,
        tps=PCIE_IPC_TPS,
        dtypes=PCIE_IPC_DTYPES,
    ),
)
NAMES = tuple(c.name for c in CONFIGS)
BY_NAME = {c.name: c for c in CONFIGS}


@dataclass(frozen=True)
class Release:
    """What the configurations ask of a release and a host: read from the release's code
    (``pcie_ipc``) and from the options (``tp``, ``dtype``, ``fuse_up_to``)."""

    version: str | None
    pcie_ipc: bool
    tp: int
    dtype: str
    fuse_up_to: int | None


def why_not(config: Config, release: Release) -> str | None:
    """Why ``config`` does not apply to this release and host, in one clause; None when it does."""
    version = release.version or "(unknown version)"
    if config.pcie_ipc and not release.pcie_ipc:
        return f"sglang {version} has no PCIe-IPC allreduce ({PCIE_IPC_FLAG} came in 0.5.21)"
    if config.tps is not None and release.tp not in config.tps:
        return f"PCIe-IPC runs at TP {', '.join(map(str, config.tps))} only, not TP {release.tp}"
    if config.dtypes is not None and release.dtype not in config.dtypes:
        return f"PCIe-IPC runs in {' and '.join(config.dtypes)} only, not {release.dtype}"
    if config.fusion == "limit" and release.fuse_up_to is None:
        return "it needs a token limit: --fuse-up-to N|measured"
    return None


def select(names: Sequence[str] | None, release: Release) -> tuple[tuple[Config, ...], list[str]]:
    """The configurations to run, ``default`` first (every other is checked against it), and
    notes; ValueError with one sentence for a named one that does not apply.  ``names``
    None: every one that applies."""
    notes: list[str] = []
    if names is None:
        chosen = [c for c in CONFIGS if why_not(c, release) is None]
        return tuple(chosen), notes
    for name in names:
        why = why_not(BY_NAME[name], release)
        if why is not None:
            raise ValueError(f"--configs {name} does not apply: {why}")
    if DEFAULT not in names:
        notes.append("sglang's default runs too: every configuration's answers are checked against it")
    wanted = {DEFAULT, *names}
    return tuple(c for c in CONFIGS if c.name in wanted), notes


def parse_names(value: str) -> tuple[str, ...]:
    """``--configs a,b``: the names, in CONFIGS' order; ValueError naming the unknown ones."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        raise ValueError(f"unknown configuration {', '.join(unknown) or repr(value)}: choose from {', '.join(NAMES)}")
    return tuple(c.name for c in CONFIGS if c.name in names)


def fusion_args(config: Config, flags: Flags) -> tuple[str, ...]:
    """The server arguments that set this configuration's fusion in this release."""
    return flags.off if config.fusion == "off" else flags.on
