"""The scripts that run inside the serving interpreter, and ``run_script`` that runs them.

The scripts (``find_sglang``, ``host_facts``, ``import_check``, ``bench_rank``) read or
measure the serving environment from inside it.  They obey other rules than the rest of
sm120patch: the standard library plus torch (and FlashInfer / sgl_kernel where asked for),
any Python >= 3.8, and no import from sm120patch.  Run as ``python script.py``, the script's own directory would lead
``sys.path`` and sm120patch's modules would shadow what is probed; run through ``-c`` the
path starts with the (scratch) working directory instead.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: How long one step in the serving interpreter may take by default: a hanging interpreter
#: costs a command well under a minute in all (``--timeout`` raises it).
DEFAULT_TIMEOUT_S = 20.0

#: ``python -c RUNNER script args``: run ``script`` as __main__ with a clean ``sys.path[0]``.
RUNNER = (
    "import runpy, sys; sys.argv[0] = sys.argv[1]; del sys.argv[1]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


class ProbeError(Exception):
    """The serving interpreter gave no usable answer: it did not start, ran past its limit,
    or printed no JSON object.  The message names the interpreter and the step."""


@dataclass(frozen=True)
class Answer:
    """What a script said, decoded with replacement: bytes that are not UTF-8 (a localized
    error, a broken interpreter) never stop a command."""

    returncode: int
    stdout: str
    stderr: str

    @classmethod
    def from_bytes(cls, returncode: int, stdout: bytes, stderr: bytes) -> Answer:
        return cls(returncode, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"))

    def last_line(self) -> str:
        """The last line it printed (stderr first), or its exit status."""
        for text in (self.stderr, self.stdout):
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            if lines:
                return lines[-1]
        return f"exit {self.returncode}" if self.returncode >= 0 else f"killed by signal {-self.returncode}"

    def json_object(self, python: str, step: str) -> dict[str, Any]:
        """stdout as one JSON object; ProbeError with the last line it printed otherwise."""
        try:
            data = json.loads(self.stdout)
        except ValueError:
            raise ProbeError(f"{python} could not {step}: {self.last_line()}") from None
        except RecursionError:  # nested past the parser's depth
            raise ProbeError(f"{python} could not {step}: it printed JSON nested too deep to read") from None
        if not isinstance(data, dict):
            raise ProbeError(f"{python} could not {step}: it printed a JSON {type(data).__name__}, not an object")
        return data


def run_script(
    python: str,
    script: str,
    args: Sequence[str] = (),
    *,
    step: str,
    timeout: float = DEFAULT_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> Answer:
    """``python script args...`` with a clean ``sys.path[0]``, to ``step`` (words for
    messages: "find sglang"); ProbeError when it cannot start or runs past ``timeout``."""
    with tempfile.TemporaryDirectory(prefix="sm120patch-") as scratch:
        try:
            proc = subprocess.run(
                [python, "-c", RUNNER, script, *args],
                capture_output=True,
                timeout=timeout,
                cwd=cwd or scratch,
                env=None if env is None else dict(env),
            )
        except subprocess.TimeoutExpired:
            raise ProbeError(f"{python} did not {step} within {timeout:g} s (--timeout raises the limit)") from None
        except OSError as exc:
            raise ProbeError(f"could not run {python} to {step}: {exc.strerror or exc}") from None
    return Answer.from_bytes(proc.returncode, proc.stdout, proc.stderr)
