"""sm120patch's command line with one fault injected into its write path (tests only).

    python -m tests.support.faulty_cli STEP[@N][:ACTION] ARGS...

At the N-th time the write path reaches STEP (``fsutil.step``: write, fsync, rename,
journal, replace, finalize) the process is SIGKILLed (ACTION ``kill``, the default), gets
SIGINT as from Ctrl-C (ACTION ``int``), or the step raises OSError(ACTION), e.g. ENOSPC.
Production code only ever sees ``STEP_HOOK`` left at None.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from collections import Counter

from sm120patch.cli import main
from sm120patch.patcher.transaction import fsutil


def install(spec: str) -> None:
    where, _, action = spec.partition(":")
    name, _, nth = where.partition("@")
    hits: Counter[str] = Counter()

    def hook(step: str) -> None:
        if step != name:
            return
        hits[step] += 1
        if hits[step] != int(nth or 1):
            return
        if action in ("", "kill"):
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "int":
            os.kill(os.getpid(), signal.SIGINT)
            return
        code = getattr(errno, action)
        raise OSError(code, os.strerror(code), step)

    fsutil.STEP_HOOK = hook


if __name__ == "__main__":
    install(sys.argv[1])
    main(sys.argv[2:], prog_name="sm120patch")
