"""The advice the tool prints to keep fusion opt-in, followed on real releases, passes
``--strict``: the auto-enable left out is named as that patch, never as an SM check this tool
does not know (0.5.23 has it in arg_groups/overrides.py, on the fused path).  ``--only`` on
0.5.14 leaves the resolver and the preflight out: ``--strict`` refuses, naming them, and the
apply its warning prints passes.  The miniature release: test_left_out_patches_and_strict.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.test_left_out_patches_and_strict import ADVICE, SHUT, printed_commands
from tests.support.cli import jrun
from tests.support.fakes import fake_flashinfer

pytestmark = pytest.mark.slow  # real sglang releases from the package index

AUTO_ENABLE = {
    "0.5.23": ("sglang/srt/arg_groups/overrides.py", "_flashinfer_allreduce_fusion_auto_enable"),
    "0.5.14": ("sglang/srt/server_args.py", "ServerArgs._handle_model_specific_adjustments"),
}


def with_kernel(release: Callable[[str], Path], version: str) -> Path:
    package = release(version)
    fake_flashinfer(package.parent, "0.6.18", [9, 10, 12])  # the only other warning --strict refuses on
    return package


@pytest.mark.parametrize("version", sorted(AUTO_ENABLE))
def test_the_printed_advice_then_verify_strict_passes(release: Callable[[str], Path], version: str) -> None:
    package = with_kernel(release, version)
    (advice,) = ADVICE
    assert jrun("apply", "--sglang-path", str(package))[0] == 0  # the advice is for a patched tree too
    for command in advice:
        code, data = jrun(*command.split(), "--sglang-path", str(package))
        assert code == 0, data["headline"]
    assert data["warnings"] == [] and data["sm_checks"] == []
    code, data = jrun("verify", "--strict", "--sglang-path", str(package))
    assert code == 0, data["headline"]
    assert data["warnings"] == [] and data["sm_checks"] == []
    (left,) = data["left_out"]
    assert (left["patch"], left["file"], left["function"], left["keeps_fused_path_shut"]) == (
        "server-args-auto-enable",
        *AUTO_ENABLE[version],
        False,
    )
    assert jrun(*advice[-1].split(), "--strict", "--sglang-path", str(package))[0] == 0


def test_only_on_0_5_14_refuses_strict_for_the_resolver_and_preflight(release: Callable[[str], Path]) -> None:
    package = with_kernel(release, "0.5.14")
    only = ("apply", "--only", "communicator-fusion-gate", "--sglang-path", str(package))
    code, data = jrun(*only, "--strict")
    assert code == 1 and data["written"] == [] and data["sm_checks"] == []
    (warning,) = data["warnings"]
    assert warning.startswith(f"{SHUT} left out as asked (--only / --skip), fusion-backend-resolver (sglang/srt/")
    assert [(g["patch"], g["keeps_fused_path_shut"]) for g in data["left_out"]] == [
        ("fusion-backend-resolver", True),
        ("workspace-preflight", True),
        ("server-args-auto-enable", False),
    ]
    assert jrun(*only)[0] == 0
    code, data = jrun("verify", "--strict", "--sglang-path", str(package))
    assert code == 1 and data["warnings"] == [warning] and data["sm_checks"] == []
    (forward,) = printed_commands(warning)
    assert forward == "apply --only fusion-backend-resolver,workspace-preflight"
    assert jrun(*forward.split(), "--sglang-path", str(package))[0] == 0
    code, data = jrun("verify", "--strict", "--sglang-path", str(package))
    assert code == 0 and data["warnings"] == [], data["headline"]
