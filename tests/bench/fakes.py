"""Fakes for the bench tests, each standing for what lies outside Python.

* ``FakeTorch`` (``fake_serving_site``): the GPUs torch reports -- count, names, compute
  capabilities, peer access.  Enough for ``bench_rank.py probe``; it cannot run a rank.
* ``FakeFlashInfer`` (``fake_serving_site``): an installed FlashInfer's version, whether
  ``flashinfer.comm`` has the unified fusion API, and the ``jit/comm.py`` that says which
  GPU majors its trtllm kernel is built for.
* Fake ranks (``rank_script``): processes that speak bench_rank's JSON-line protocol and
  then hang, fail or exit, for the watchdog.
* ``StatusRecorder``: the status line, recorded; ``Terminal``: stderr on a terminal.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

RTX_PRO_6000 = ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", (12, 0))
H200 = ("NVIDIA H200", (9, 0))


def fake_serving_site(
    root: Path,
    gpus: list[tuple[str, tuple[int, int]]],
    p2p: bool = True,
    flashinfer: tuple[str, list[int]] | None = ("0.6.18", [9, 10, 12]),
    unified_api: bool = True,
) -> Path:
    """A directory for PYTHONPATH holding FakeTorch and, unless None, FakeFlashInfer."""
    torch = root / "torch"
    torch.mkdir(parents=True)
    (torch / "__init__.py").write_text(
        textwrap.dedent(
            f'''\
            """FakeTorch: the GPUs torch reports, for sm120patch's bench tests; not PyTorch."""
            import types
            __version__ = "2.11.0+fake"
            version = types.SimpleNamespace(cuda="13.0")
            _GPUS = {gpus!r}
            cuda = types.SimpleNamespace(
                is_available=lambda: bool(_GPUS),
                device_count=lambda: len(_GPUS),
                get_device_capability=lambda i=0: _GPUS[i][1],
                get_device_name=lambda i=0: _GPUS[i][0],
                can_device_access_peer=lambda i, j: {p2p!r},
            )
            '''
        )
    )
    if flashinfer is not None:
        version, majors = flashinfer
        package = root / "flashinfer"
        (package / "jit").mkdir(parents=True)
        (package / "comm").mkdir()
        (package / "__init__.py").write_text(
            f'"""FakeFlashInfer: an installed FlashInfer as bench sees it."""\n__version__ = {version!r}\n'
        )
        (package / "jit" / "__init__.py").write_text("")
        (package / "jit" / "comm.py").write_text(
            "def gen_trtllm_comm_module():\n"
            f"    return gen_jit_spec('trtllm_comm', [], supported_major_versions={majors!r})\n"
        )
        api = "def create_allreduce_fusion_workspace(**kw): ...\ndef allreduce_fusion(**kw): ...\n"
        (package / "comm" / "__init__.py").write_text(api if unified_api else "")
    return root


def rank_script(path: Path, body: str) -> Path:
    """A fake rank: ``emit(event, **fields)`` and ``RANK`` are defined before ``body``."""
    path.write_text(
        "import json, os, sys, time\n"
        "RANK = int(os.environ['RANK'])\n"
        "def emit(event, **fields):\n"
        "    fields['event'] = event\n"
        "    print(json.dumps(fields), flush=True)\n" + textwrap.dedent(body)
    )
    return path


class StatusRecorder:
    """Stands in for ``report.as_text.StatusLine`` (a rich status line on a terminal): records
    how each was made (enabled, first words) and every update."""

    def __init__(self) -> None:
        self.made: list[tuple[bool, str]] = []
        self.said: list[str] = []

    def __call__(self, enabled: bool, first: str) -> StatusRecorder:
        self.made.append((enabled, first))
        return self

    def __enter__(self) -> StatusRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, text: str) -> None:
        self.said.append(text)


class Terminal(io.StringIO):
    """Stands in for stderr on a terminal: text kept, ``isatty()`` true."""

    def isatty(self) -> bool:
        return True
