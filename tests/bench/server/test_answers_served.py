"""``bench server`` end to end on FakeSglang with PCIe-IPC (a 0.5.23-like release): every
configuration runs, the hook reads the logits of FakeSglang's ``ModelRunner.forward`` in
every rank, and the answer is the fastest that agrees with sglang's default."""

from __future__ import annotations

import json
import re
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
    assert data["verdict"]["advice"].endswith("(against sglang's default; the answer weighs all)")
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
    assert "fusion loses to PCIe-IPC in decode (fusion slower than pcie-ipc)" in answer["sentence"]
    assert "`sm120patch revert` is the right move" in answer["sentence"]
    # which backend took the plain allreduces, per configuration: 2 ranks x 2 batch sizes
    taken = {r["config"]: r["counts"]["allreduce"] for r in data["runs"]}
    assert {name: sorted(backends) for name, backends in taken.items()} == {
        "default": ["custom allreduce"],
        "fusion": ["FlashInfer kAllReduce"],
        "pcie-ipc": ["PCIe-IPC"],
        "pcie-ipc+fusion": ["FlashInfer kAllReduce"],
    }
    assert taken["pcie-ipc"]["PCIe-IPC"] == {"eager": 4, "capture": 0, "fell_back": 0}
    # asked for PCIe-IPC and used none: no figure, and why
    assert found["pcie-ipc+fusion"]["decode_ms"] == {} and found["pcie-ipc"]["decode_ms"]
    assert data["notes"] == [
        "pcie-ipc+fusion has no figure: PCIe-IPC was asked for and took no allreduce: FlashInfer's kAllReduce "
        "took the plain allreduces (4x): fusion on leaves PCIe-IPC none"
    ]


@pytest.mark.offline
def test_pcie_ipc_that_took_no_allreduce_has_no_figure_and_sglangs_line_says_why(tmp_path: Path) -> None:
    code, data = bench(tmp_path, "--configs", "pcie-ipc", "--repeat", "1", fake="pcie-off")
    assert code == 0, data["problems"]
    run = next(r for r in data["runs"] if r["config"] == "pcie-ipc")
    assert run["counts"]["allreduce"] == {"custom allreduce": {"eager": 4, "capture": 0, "fell_back": 0}}
    assert run["unused"] == (
        "pcie-ipc has no figure: PCIe-IPC was asked for and took no allreduce: PCIe-IPC's workspace could not be "
        "built; sglang said: 'FlashInfer PCIe-IPC workspace (max_numel=786432) failed: peer access unsupported; "
        "reductions stay on NCCL'"
    )
    assert configs(data)["pcie-ipc"]["decode_ms"] == {}
    assert data["answer"]["parts"][0]["config"] == "default"


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


@pytest.mark.offline
def test_the_text_shows_each_configuration_and_its_answers_in_80_columns(tmp_path: Path) -> None:
    package = fake_server_site(tmp_path, version="0.5.23", pcie_ipc=True)
    code, _, err = run(
        "bench", "server", "--sglang-path", str(package), "--tp", "2", *FAST, env={"COLUMNS": "200"}
    )  # fmt: skip
    assert code == 0, err
    lines = err.splitlines()
    title = "configurations: decode ms/tok by batch size (median), answers against sglang's default"
    at = next(i for i, line in enumerate(lines) if line.startswith("configurations: decode"))
    table = lines[at : at + 10]  # the title (two lines), the table
    assert " ".join(" ".join(table[:2]).split()).startswith(title)  # the title, left, wrapped in 80 columns
    assert max(len(line) for line in table) <= 80  # the table keeps to 80 columns; piped, sentences are whole
    rows = {line.split()[1]: line for line in table if line.startswith("│ ") and line.split()[1] != "configuration"}
    assert set(rows) >= {"default", "fusion", "pcie-ipc", "pcie-ipc+fusion"}
    assert "reference" in rows["default"] and "agrees 1.0000" in rows["fusion"]
    assert any(line.startswith("answers agree at cosine >= ") and "default vs default 1.0000" in line for line in lines)
    assert any(
        line.startswith("answer: ") and line.endswith("`--enforce-disable-flashinfer-allreduce-fusion`)")
        for line in lines
    )


@pytest.mark.offline
@pytest.mark.parametrize("fake", ["normal", "nan-on"])
def test_in_colour_a_wrong_answer_is_red_and_the_answers_facts_are_dim(tmp_path: Path, fake: str) -> None:
    """A colour terminal as rich sees one (FORCE_COLOR): the wrong configuration's answers cell
    and the answer line red, the agreement dim; a configuration without figures reads ``-``."""
    package = fake_server_site(tmp_path, version="0.5.23", pcie_ipc=True)
    code, _, err = run(
        "bench", "server", "--sglang-path", str(package), "--tp", "2", *FAST, "--repeat", "1",
        env={"COLUMNS": "200", "FORCE_COLOR": "1", "NO_COLOR": None, "TERM": "xterm", "FAKE_SGLANG": fake},
    )  # fmt: skip
    assert code == (0 if fake == "normal" else 1), err
    plain = re.sub(r"\x1b\[[0-9;]*m", "", err)
    rows = {line.split()[1]: line for line in err.splitlines() if line.startswith("│ ")}
    header = next(line for line in plain.splitlines() if line.startswith("┃ ") and "configuration" in line)
    assert header.split("┃")[2:4] == ["          1 ", "          8 "]  # batch sizes, right-aligned
    assert header.split("┃")[-2].strip() == "answers"
    assert "\x1b[2manswers agree at cosine >= 0.9000 (calibrated 0.9; default vs default not" in err
    assert "default vs default not measured (--repeat 1))" in " ".join(plain.split())
    assert rows["pcie-ipc"].split("│")[2:4] == ["       8.13 ", "       9.00 "]
    if fake == "normal":
        assert "\x1b[1manswer: decode at TP 2: " in err and "\x1b[31m" not in "".join(rows.values())
        assert rows["fusion"].split("│")[-2] == " agrees 1.0000         "
        assert rows["pcie-ipc+fusion"].split("│")[2:4] == ["          - ", "          - "]  # no figure
    else:
        assert "\x1b[1;31manswer: " in err
        assert "\x1b[31mnan" in rows["fusion"] and "\x1b[31m" not in rows["default"]
