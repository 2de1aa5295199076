"""The server options that turn fusion on and off in one sglang release.

The options a release accepts are read from its argument code by the caller
(``sglang.options.release_options``); this module only chooses among them:

* up to 0.5.13: ``--enable-flashinfer-allreduce-fusion`` turns it on;
* from 0.5.14: ``--flashinfer-allreduce-fusion-backend trtllm`` (never ``auto`` or ``mnnvl``,
  which create multicast objects where the GPUs report multicast);
* off: ``--enforce-disable-flashinfer-allreduce-fusion`` where the release has it (0.5.10+),
  which also stops the auto-enable for the models sglang turns fusion on for by itself;
  before it, leaving the option out is all there is, and the call count shows whether an
  auto-enable turned it on anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

from sm120patch.patcher.exports import AUTO_ENABLE_OFF
from sm120patch.sglang.options import BACKEND, BACKEND_VALUE, ENABLE, HATCH


@dataclass(frozen=True)
class Flags:
    """The arguments of the two runs and how to say them to a person."""

    on: tuple[str, ...]
    off: tuple[str, ...]

    @property
    def on_text(self) -> str:
        return " ".join(self.on)

    @property
    def off_text(self) -> str:
        return " ".join(self.off) if self.off else f"no fusion option (this release has no {HATCH})"

    @property
    def keep_on(self) -> str:
        return f"launch with `{self.on_text}`"

    @property
    def keep_off(self) -> str:
        if self.off:
            return f"launch with `{self.off_text}`"
        return f"launch without `{ENABLE}` (and {AUTO_ENABLE_OFF})"


def choose(options: set[str]) -> Flags | None:
    """The flags for a release accepting ``options``; None when it has no fusion option
    (a release older than the fusion itself)."""
    if BACKEND in options:
        on: tuple[str, ...] = (BACKEND, BACKEND_VALUE)
    elif ENABLE in options:
        on = (ENABLE,)
    else:
        return None
    off = (HATCH,) if HATCH in options else ()
    return Flags(on, off)
