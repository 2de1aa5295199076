"""Whatever the serving interpreter prints, and however it exits, reading its host facts
never raises; a hanging one costs the limit, once, and the message names the interpreter,
the step and the limit.  The interpreters are ``serving_python`` scripts and the GPUs
``FakeNvidiaSmi`` (tests/doctor/hostfakes.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import strategies as st

from sm120patch.doctor.diagnose import diagnose
from sm120patch.doctor.host import STEP, Host, HostFacts, from_answer, parse_host_facts, read_host, run_host_facts
from sm120patch.runner import Answer
from sm120patch.runner.gpus import GpuReport
from tests.doctor.hostfakes import fake_nvidia_smi, serving_python, two_rtx
from tests.support.properties import fast_and_slow

PYTHON = "/env/bin/python"
#: What the serving interpreter may print and exit with (the property test and its slow twin).
ANSWERS = (st.integers(min_value=-64, max_value=255), st.binary(max_size=300), st.binary(max_size=300))


def check_bytes_and_exit_code(returncode: int, stdout: bytes, stderr: bytes) -> None:
    facts = from_answer(PYTHON, Answer.from_bytes(returncode, stdout, stderr))
    assert isinstance(facts, HostFacts)
    if facts.error is not None:
        assert facts.error.startswith(f"{PYTHON} could not {STEP}: ")
    diagnose(None, None, {}, _host(facts))  # and judging them never raises either


test_any_bytes_and_exit_code_read_without_an_exception, test_many_more_bytes_and_exit_codes_read_without_one = (
    fast_and_slow(check_bytes_and_exit_code, *ANSWERS, fast=150, slow=400)
)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
KEYS = ("python", "environ", "torch", "gpus", "p2p", "driver", "devices")


def parses_and_is_judged(data: dict) -> None:
    facts = parse_host_facts(data)
    diagnose(None, None, {}, _host(facts), tp=2)


test_any_json_object_parses_without_an_exception, test_many_more_json_objects_parse_without_an_exception = (
    fast_and_slow(parses_and_is_judged, st.dictionaries(st.sampled_from(KEYS), json_values), fast=40, slow=2000)
)


def _host(facts: HostFacts) -> Host:
    return Host(GpuReport((), "nvidia-smi", "nvidia-smi is not on PATH"), facts, PYTHON, None, {})


def test_json_nested_too_deep_is_an_answer() -> None:
    facts = from_answer(PYTHON, Answer.from_bytes(0, b"[" * 100_000, b""))
    assert facts.error == f"{PYTHON} could not {STEP}: it printed JSON nested too deep to read"


def test_odd_values_are_shown_as_json_never_as_python_reprs() -> None:
    facts = parse_host_facts({"torch": {"ok": True}, "gpus": [{"index": 0, "name": None, "capability": (1, 2)}]})
    assert facts.torch.error == "odd host_facts answer: gpus[0].name: null"


# --- real processes ---------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.offline
def test_an_interpreter_printing_non_utf8_bytes(tmp_path: Path) -> None:
    python = serving_python(tmp_path / "env", body=r"printf '\377\376{\n' ; printf '\351rreur\n' >&2 ; exit 3")
    facts = run_host_facts(python)
    assert facts.error == f"{python} could not {STEP}: \ufffdrreur"


@pytest.mark.offline
def test_an_interpreter_printing_json_with_non_utf8_bytes_in_its_strings(tmp_path: Path) -> None:
    answer = json.dumps({"torch": {"ok": False, "error": "XX"}}).encode().replace(b"XX", b"\xe9chec")
    (tmp_path / "answer").write_bytes(answer)
    python = serving_python(tmp_path / "env", body=f"cat '{tmp_path / 'answer'}'; exit 0")
    assert run_host_facts(python).torch.error == "\ufffdchec"


@pytest.mark.waits
@pytest.mark.offline
def test_a_hanging_interpreter_and_nvidia_smi_cost_the_limit_once(tmp_path: Path) -> None:
    python = serving_python(tmp_path / "env", body="exec sleep 30")
    fake_nvidia_smi(tmp_path / "bin", two_rtx())
    (tmp_path / "bin" / "nvidia-smi").write_text("#!/bin/sh\nexec sleep 30\n")
    start = time.monotonic()
    host = read_host(python, timeout=1.0)
    elapsed = time.monotonic() - start
    assert elapsed < 1.9  # side by side, not one after the other
    assert host.facts.error == f"{python} did not {STEP} within 1 s (--timeout raises the limit)"
    assert host.gpus.error == "nvidia-smi did not answer within 1 s"


def test_an_odd_gpu_name_and_an_odd_device_entry_are_named_where_they_are() -> None:
    facts = parse_host_facts({"torch": {"ok": True}, "gpus": [{"index": 0, "name": 5, "capability": [12, 0]}]})
    assert facts.torch.error == "odd host_facts answer: gpus[0].name: 5"
    facts = parse_host_facts({"driver": {"ok": True}, "devices": [{"index": 0, "multicast": 1, "gdr_vmm": 0}, 7]})
    assert facts.driver.error == "odd host_facts answer: devices[1]: 7"
