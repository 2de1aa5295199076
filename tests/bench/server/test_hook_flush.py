"""The hook's counts file under two writers at once: the flusher thread and the flush at exit
(the later snapshot must be the one left on disk)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from sm120patch.bench.remote import server_hook


def test_an_earlier_snapshot_never_lands_after_a_later_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(server_hook, "_counts", {})
    monkeypatch.setattr(server_hook, "_state", {"dirty": False, "written": 0.0})
    monkeypatch.setenv(server_hook.COUNT_DIR_ENV, str(tmp_path))
    server_hook._count("sglang.entry", "eager")  # the first call is written at once
    real_dump, writing, go_on = json.dump, threading.Event(), threading.Event()

    def slow_first_dump(data: Any, handle: Any) -> None:
        if not writing.is_set():
            writing.set()
            go_on.wait(5)
        real_dump(data, handle)

    monkeypatch.setattr(json, "dump", slow_first_dump)
    server_hook._state["dirty"] = True
    flusher = threading.Thread(target=server_hook.flush)
    flusher.start()  # the flusher thread's snapshot (eager only) is being written ...
    assert writing.wait(5)
    server_hook._count("sglang.entry", "capture")  # ... when the capture call counts ...
    at_exit = threading.Thread(target=server_hook.flush)
    at_exit.start()  # ... and the program ends with its own flush
    at_exit.join(0.3)
    go_on.set()
    flusher.join(5)
    at_exit.join(5)
    data = json.loads((tmp_path / f"{os.getpid()}.json").read_text())
    assert data["counts"]["sglang.entry"] == {"eager": 1, "capture": 1, "fell_back": 0}
