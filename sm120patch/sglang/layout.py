"""Where sglang keeps what the patches change (paths relative to the ``sglang`` package): one
table, ``KEPT``, with the releases each place held it in.

Everything else derives from it: each patch's anchor rows name a file of this table (the
contract test holds every row to the place ``KEPT`` gives for its releases), the token limit's
reader and bench's server hook take the gate's modules from ``files_keeping(GATE)``, and the
tests their layout files from ``FILES``.  A release that moves one of them is a row here plus
the patches' rows (and, before that is written, role finding finds it: patcher/plan/role_find.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

COMMUNICATOR = "srt/layers/communicator.py"
ADD_NORM = "srt/layers/layer_boundary/residual/add_norm.py"
SERVER_ARGS = "srt/server_args.py"
OVERRIDES = "srt/arg_groups/overrides.py"
COMM_FUSION = "srt/layers/flashinfer_comm_fusion.py"

#: What the patches look for (the ``what`` of a ``Place``).
GATE = "the fusion gate, its SM flags and its token limit"
AUTO_ENABLE = "the model auto-enable"
RESOLVER = "the fusion backend resolver"
PREFLIGHT = "the workspace preflight"


@dataclass(frozen=True)
class Place:
    """``what`` was kept in ``file`` from release ``first`` to ``last`` (None: up to now)."""

    what: str
    file: str
    first: str
    last: str | None = None

    def holds(self, version: str) -> bool:
        v = Version(version)
        return Version(self.first) <= v and (self.last is None or v <= Version(self.last))


KEPT: tuple[Place, ...] = (
    Place(GATE, ADD_NORM, "0.5.21"),
    Place(GATE, COMMUNICATOR, "0.4.9", "0.5.20"),
    Place(AUTO_ENABLE, OVERRIDES, "0.5.15"),
    Place(AUTO_ENABLE, SERVER_ARGS, "0.4.6", "0.5.14"),
    Place(RESOLVER, COMM_FUSION, "0.5.14"),
    Place(PREFLIGHT, COMM_FUSION, "0.5.11"),
)
#: Every file the table names.
FILES = frozenset(place.file for place in KEPT)


def files_keeping(what: str) -> tuple[str, ...]:
    """The files that held ``what``, newest layout first."""
    return tuple(dict.fromkeys(file for file, _ in kept_files(what)))


def kept_files(what: str | None) -> list[tuple[str, str]]:
    """(file, first release) of every place ``what`` was kept in, newest first."""
    places = sorted((p for p in KEPT if p.what == what), key=lambda p: Version(p.first), reverse=True)
    return [(p.file, p.first) for p in places]


def kept_in(what: str, version: str) -> str | None:
    """The file that held ``what`` in release ``version``."""
    return next((place.file for place in KEPT if place.what == what and place.holds(version)), None)


def module_name(rel: str) -> str:
    """``srt/layers/x.py`` as sglang imports it: ``sglang.srt.layers.x``."""
    parts = rel.removesuffix(".py").split("/")
    return ".".join(["sglang", *(parts[:-1] if parts[-1] == "__init__" else parts)])


#: Where sglang's SM helpers are imported from (``utils`` re-exports ``utils.common``).
HELPER_MODULES = ("sglang.srt.utils", "sglang.srt.utils.common")
SM120_HELPER = "is_sm120_supported"  # the helper sglang.srt.utils defines from 0.5.4
SM120_FLAG = "_is_sm120_supported"  # the module-level flag the patches cache it in
