"""``bench server`` end to end on FakeSglang with PCIe-IPC (a 0.5.23-like release): every
configuration runs, the hook reads the logits of FakeSglang's ``ModelRunner.forward`` in
every rank, and the answer is the fastest that agrees with sglang's default."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sm120patch.sglang.options import HATCH, PCIE_IPC_FLAG
from tests.bench.server.fakes import fake_server_site
from tests.support.cli import run

FAST = ["--output-len", "4", "--batch-sizes", "1,8", "--hidden", "1024", "--timeout", "20", "--no-kernel"]


def bench(tmp_path: Path, *args: str, fake: str = "normal") -> tuple[int, dict[str, Any]]:
    package = fake_server_site(tmp_path, version="0.5.23", pcie_ipc=True)
    code, stdout, _ = run(
        "bench", "server", "--sglang-path", str(package), "--json", "--tp", "2", *FAST, *args,
        env={"FAKE_SGLANG": fake},
    )  # fmt: skip
    return code, json.loads(stdout)


def configs(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in data["configs"]}


@pytest.mark.offline
def test_every_configuration_agrees_and_pcie_ipc_wins_over_fusion(tmp_path: Path) -> None:
    code, data = bench(tmp_path)
    assert code == 0, data["problems"]
    found = configs(data)
    assert list(found) == ["default", "fusion", "pcie-ipc", "pcie-ipc+fusion"]
    assert found["pcie-ipc"]["env"] == {PCIE_IPC_FLAG: "1"}
    assert [(c["answers"]["status"], c["answers"]["cosine"]) for c in found.values()] == [
        ("reference", None),
        ("agrees", pytest.approx(1.0)),
        ("agrees", pytest.approx(1.0)),
        ("agrees", pytest.approx(1.0)),
    ]
    assert {c["answers"]["step"] for c in list(found.values())[1:]} == {"decode"}
    assert data["agreement"]["default_vs_default"] == pytest.approx(1.0)  # two default runs
    first = next(r for r in data["runs"] if r["config"] == "fusion")["counts"]["logits"]
    assert first["nonfinite_forwards"] == 0 and first["forwards"] == 2 * 2 * 4  # 2 ranks x 2 sizes x (1 + 3)
    assert len(first["first"]["decode"]["head"]) == 32 and first["rank"] is None  # FakeTorch has no distributed
    answer = data["answer"]
    decode = answer["parts"][0]
    assert (decode["part"], decode["config"], decode["vs_default_pct"]) == (
        "decode",
        "pcie-ipc",
        pytest.approx(-20.0, abs=0.05),
    )
    assert answer["launch"]["pcie-ipc"] == {
        "env": {PCIE_IPC_FLAG: "1"},
        "server_args": [HATCH],
        "apply": None,
        "text": f"`{PCIE_IPC_FLAG}=1 python -m sglang.launch_server ... {HATCH}`",
    }
    assert "fusion loses to PCIe-IPC in decode (fusion, pcie-ipc+fusion slower than pcie-ipc)" in answer["sentence"]
    assert "`sm120patch revert` is the right move" in answer["sentence"]


@pytest.mark.offline
@pytest.mark.parametrize(("fake", "status"), [("nan-on", "nan"), ("wrong-on", "disagrees")])
def test_a_fused_configuration_with_wrong_answers_is_never_the_answer(tmp_path: Path, fake: str, status: str) -> None:
    code, data = bench(tmp_path, "--configs", "fusion", "--repeat", "1", fake=fake)
    assert code == 1
    found = configs(data)
    assert (found["default"]["answers"]["status"], found["fusion"]["answers"]["status"]) == ("reference", status)
    assert (
        "likely FlashInfer's fused kernel signalling completion before it writes its output"
        in (found["fusion"]["answers"]["why"])
    )
    assert data["problems"][0].startswith("the fusion configuration computed wrong answers: ")
    assert data["verdict"]["kind"] == "none"
    assert data["answer"]["wrong"] == ["fusion"]
    assert data["answer"]["parts"][0]["config"] == "default"  # fusion was 10 % faster, and wrong
    assert data["agreement"]["default_vs_default"] is None  # --repeat 1
