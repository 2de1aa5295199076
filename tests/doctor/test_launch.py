"""``doctor.launch_advice``: the serving interpreter, the release's fusion options, and the
launch and TP findings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sm120patch.doctor import launch_advice
from sm120patch.doctor.findings import HostFinding, Severity
from sm120patch.runner.locate import default_python
from sm120patch.sglang import options
from sm120patch.sglang.options import release_options
from sm120patch.sglang.tree import InstallKind, SglangTree

BACKEND = {options.BACKEND, options.ENABLE, options.HATCH}
OLD = {options.ENABLE}


def tree_with(
    root: Path, server_args: str, arg_groups: dict[str, str] | None = None, python: str | None = None
) -> SglangTree:
    package = root / "sglang"
    (package / "srt").mkdir(parents=True)
    (package / "srt/server_args.py").write_text(server_args)
    for name, text in (arg_groups or {}).items():
        path = package / "srt/arg_groups" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return SglangTree(package, "0.5.20", InstallKind.PATH, None, "test", python=python)


def test_release_options_from_add_argument_literals(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, 'parser.add_argument("--enable-flashinfer-allreduce-fusion", action="store_true")\n')
    assert release_options(tree) == OLD


def test_release_options_from_fields_unless_no_cli(tmp_path: Path) -> None:
    fields = (
        "class ServerArgs:\n"
        "    flashinfer_allreduce_fusion_backend: str = 'auto'\n"
        "    enforce_disable_flashinfer_allreduce_fusion: Annotated[bool, Opt(no_cli = True)] = False\n"
    )
    tree = tree_with(tmp_path, "x = 1\n", {"fusion.py": fields, "broken.py": "def (:\n"})
    assert release_options(tree) == {options.BACKEND}


def test_release_options_without_argument_code(tmp_path: Path) -> None:
    tree = SglangTree(tmp_path / "sglang", None, InstallKind.PATH, None, "test")
    assert release_options(tree) == set()


def test_launch_names_the_flag_and_the_hatch(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "")
    [new] = launch_advice.launch(tree, BACKEND)
    assert new.severity is Severity.INFO
    assert new.summary == "turn fusion on with --flashinfer-allreduce-fusion-backend trtllm"
    assert new.detail.startswith("auto resolves to trtllm") and options.HATCH in new.detail
    assert new.source == f"{tree.path('srt/server_args.py')} (and arg_groups/)"
    [old] = launch_advice.launch(tree, OLD)
    assert old.summary == "turn fusion on with --enable-flashinfer-allreduce-fusion"
    assert old.detail.startswith("no option turns off the auto-enable here")
    [none] = launch_advice.launch(tree, set())
    assert none.severity is Severity.WARNING and none.summary == "no fusion option found in this release's arguments"


@pytest.mark.parametrize(
    ("size", "severity", "summary"),
    [
        (1, Severity.INFO, "TP 1: no allreduce to fuse"),
        (
            2,
            Severity.INFO,
            "TP 2: upstream measured +5.2 % median decode on SM12x with FlashInfer's Lamport allreduce "
            "(not the fused norm) against NCCL",
        ),
        (4, Severity.WARNING, "TP 4: a regression was reported at TP4 on PCIe"),
        (8, Severity.WARNING, "TP 8: a regression was reported at TP4 on PCIe"),
    ],
)
def test_tp(size: int, severity: Severity, summary: str) -> None:
    [finding] = launch_advice.tp(size, BACKEND)
    assert (finding.severity, finding.summary) == (severity, summary)
    if size > 1:
        assert f"`sm120patch bench kernel --tp {size}`" in finding.detail


def test_tp_says_nothing_without_tp_or_a_fusion_option() -> None:
    assert launch_advice.tp(None, BACKEND) == [] and launch_advice.tp(4, set()) == []


def test_tp_above_two_names_the_escape_of_this_release() -> None:
    assert launch_advice.tp(4, BACKEND)[0].detail.endswith(launch_advice.escape(BACKEND))
    assert launch_advice.tp(4, OLD)[0].detail.endswith(launch_advice.escape(OLD))


def test_default_python(tmp_path: Path) -> None:
    env = tmp_path / "venv"
    (env / "bin").mkdir(parents=True)
    (env / "bin/python").touch()
    assert default_python(None, str(env)) == str(env / "bin/python")
    assert default_python(None, "/opt/bin/python3") == "/opt/bin/python3"
    assert default_python(None, str(tmp_path)) == str(tmp_path)  # a directory without a python
    tree = tree_with(tmp_path / "t", "", python="/serving/bin/python")
    assert default_python(tree, None) == "/serving/bin/python"
    assert default_python(tree, "/other/python") == "/other/python"
    assert default_python(None, None) == sys.executable


# --- exact findings and boundaries ------------------------------------------------------------

ON_NOTE = "auto resolves to trtllm on one node once fusion-backend-resolver is applied"
HATCH_NOTE = "--enforce-disable-flashinfer-allreduce-fusion turns it off again, also for the models sglang auto-enables"
NO_HATCH = (
    "no option turns off the auto-enable here; `sm120patch revert`, then "
    "`sm120patch apply --skip server-args-auto-enable` keeps fusion opt-in"
)


def test_the_fusion_options_are_spelled_as_sglang_spells_them() -> None:
    assert options.FUSION_OPTIONS == (
        "--flashinfer-allreduce-fusion-backend",
        "--enable-flashinfer-allreduce-fusion",
        "--enforce-disable-flashinfer-allreduce-fusion",
    )


def test_release_options_read_every_argument_file_below_arg_groups(tmp_path: Path) -> None:
    tree = tree_with(
        tmp_path,
        "HELP = '--enforce-disable-flashinfer-allreduce-fusion'\n",
        {
            "deep/comm.py": "class A:\n    enable_flashinfer_allreduce_fusion: bool = False\n",
            "other.py": "class B:\n    flashinfer_allreduce_fusion_backend: Annotated[str, Opt(no_cli=False)]\n",
            "nul.py": "x = 1\0\n",
        },
    )
    (tree.path("srt/arg_groups") / "dir.py").mkdir()  # a directory with a .py name: passed over
    assert release_options(tree) == BACKEND


def test_only_an_annotated_field_of_that_name_is_an_option(tmp_path: Path) -> None:
    tree = tree_with(
        tmp_path,
        "enable_flashinfer_allreduce_fusion = False\n"
        "self.flashinfer_allreduce_fusion_backend: str = 'auto'\n"
        "flashinfer_allreduce_fusion: bool = False\n"
        "add_argument('--enable-flashinfer-allreduce-fusion-x')\n",
    )
    assert release_options(tree) == set()


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        (BACKEND, ("--flashinfer-allreduce-fusion-backend trtllm", ON_NOTE)),
        ({options.BACKEND}, ("--flashinfer-allreduce-fusion-backend trtllm", ON_NOTE)),
        ({options.ENABLE, options.HATCH}, ("--enable-flashinfer-allreduce-fusion", "")),
        ({options.HATCH}, None),
        (set(), None),
    ],
)
def test_fusion_flag(options: set[str], flag: tuple[str, str] | None) -> None:
    assert launch_advice.fusion_flag(options) == flag


def test_escape() -> None:
    assert launch_advice.escape({options.HATCH}) == HATCH_NOTE
    assert launch_advice.escape(OLD) == NO_HATCH


def test_launch_findings_in_full(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "")
    source = f"{tree.path('srt/server_args.py')} (and arg_groups/)"
    assert launch_advice.launch(tree, BACKEND) == [
        HostFinding(
            "launch",
            Severity.INFO,
            "turn fusion on with --flashinfer-allreduce-fusion-backend trtllm",
            f"{ON_NOTE}; {HATCH_NOTE}",
            source,
        )
    ]
    assert launch_advice.launch(tree, {options.ENABLE, options.HATCH}) == [
        HostFinding(
            "launch", Severity.INFO, "turn fusion on with --enable-flashinfer-allreduce-fusion", HATCH_NOTE, source
        )
    ]
    assert launch_advice.launch(tree, {options.BACKEND}) == [
        HostFinding(
            "launch",
            Severity.INFO,
            "turn fusion on with --flashinfer-allreduce-fusion-backend trtllm",
            f"{ON_NOTE}; {NO_HATCH}",
            source,
        )
    ]
    assert launch_advice.launch(tree, {options.HATCH}) == [
        HostFinding("launch", Severity.WARNING, "no fusion option found in this release's arguments", "", source)
    ]


def test_tp_findings_in_full() -> None:
    one = HostFinding("tp", Severity.INFO, "TP 1: no allreduce to fuse", "", "--tp")
    assert launch_advice.tp(1, BACKEND) == [one] and launch_advice.tp(0, OLD) == [one]
    assert launch_advice.tp(2, OLD) == [
        HostFinding(
            "tp",
            Severity.INFO,
            "TP 2: upstream measured +5.2 % median decode on SM12x with FlashInfer's Lamport allreduce "
            "(not the fused norm) against NCCL",
            "2x RTX PRO 6000, PCIe; measure it on this host: `sm120patch bench kernel --tp 2`",
            "sglang#30700 (comment), sglang#32330",
        )
    ]
    assert launch_advice.tp(3, BACKEND) == [
        HostFinding(
            "tp",
            Severity.WARNING,
            "TP 3: a regression was reported at TP4 on PCIe",
            "measure fused against unfused on this host before keeping it: `sm120patch bench kernel --tp 3`; "
            "the patched model auto-enable leaves fusion off at TP 3 unless `sm120patch apply --auto-enable-tp any` "
            "was asked; " + HATCH_NOTE,
            "sglang#32330 (closing comment)",
        )
    ]
    assert launch_advice.tp(2, {options.HATCH}) == []  # no flag to turn fusion on: no advice


def test_default_python_takes_an_empty_python_as_none(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "", python="/serving/bin/python")
    assert default_python(tree, "") == "/serving/bin/python"
    bare = tree_with(tmp_path / "bare", "")
    assert default_python(bare, None) == sys.executable
    assert default_python(tree_with(tmp_path / "empty", "", python=""), None) == sys.executable
