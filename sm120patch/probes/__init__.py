"""The scripts that run inside the serving interpreter, and ``run_script`` that runs them.

The scripts (``find_sglang``, ``host_facts``, ``import_check``, ``bench_rank``) read or
measure the serving environment from inside it.  They obey other rules than the rest of
sm120patch: the standard library plus torch (and FlashInfer / sgl_kernel where asked for),
any Python >= 3.8, and no import from sm120patch.  Run as ``python script.py``, the script's own directory would lead
``sys.path`` and sm120patch's modules would shadow what is probed; run through ``-c`` the
path starts with the (scratch) working directory instead.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping, Sequence

#: ``python -c RUNNER script args``: run ``script`` as __main__ with a clean ``sys.path[0]``.
RUNNER = (
    "import runpy, sys; sys.argv[0] = sys.argv[1]; del sys.argv[1]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def run_script(
    python: str,
    script: str,
    args: Sequence[str] = (),
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python script args...`` with a clean ``sys.path[0]``; raises OSError /
    TimeoutExpired like ``subprocess.run``."""
    with tempfile.TemporaryDirectory(prefix="sm120patch-") as scratch:
        return subprocess.run(
            [python, "-c", RUNNER, script, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd or scratch,
            env=None if env is None else dict(env),
        )
