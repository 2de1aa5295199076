"""Each check of ``doctor.checks`` on its own, on facts built directly."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from sm120patch.doctor import checks
from sm120patch.doctor.findings import HostFinding, Severity
from sm120patch.doctor.host import DriverFacts, Host, TorchFacts
from sm120patch.patcher.kit.model import State
from sm120patch.runner.gpus import Gpu, GpuReport
from sm120patch.sglang.tree import InstallKind, SglangTree
from tests.doctor.facts import PYTHON, TORCH, TWO_SM120, host_with
from tests.doctor.hostfakes import H200, RTX_PRO_6000

BLOCKING = (Severity.ERROR, Severity.WARNING)


def only(found: list[HostFinding]) -> HostFinding:
    assert len(found) == 1, found
    return found[0]


def tree(flashinfer: str | None = None, version: str | None = "0.5.9") -> SglangTree:
    return SglangTree(Path("/site/sglang"), version, InstallKind.WHEEL, None, "test", flashinfer=flashinfer)


BOTH = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
LIB = "/env/lib/torch/lib/libc10.so"


def torch_reading(*names: str) -> TorchFacts:
    return replace(TORCH, alloc_reads=names, alloc_evidence=LIB)


# --- whole findings, check by check --------------------------------------------------------------

SMI = "nvidia-smi"
CVD_SOURCE = "CUDA_VISIBLE_DEVICES in doctor's environment (the server inherits it)"
SERVING_CVD_SOURCE = f"{CVD_SOURCE} and in os.environ of {PYTHON}"
TORCH_COUNT = f"torch.cuda.device_count() in {PYTHON}"
PEER = f"torch.cuda.can_device_access_peer in {PYTHON}"
MULTICAST = "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED) via cuda.bindings.driver"
GDR = "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED) via cuda.bindings.driver"
RTX = RTX_PRO_6000
H200_2 = Gpu(2, H200, (9, 0))
UNKNOWN = tuple(Gpu(i, RTX, None, raw_capability="[N/A]") for i in (0, 1))
SAYS_NA = f"{RTX} (cc unknown: nvidia-smi says [N/A])"
NOT_ANSWERED = TorchFacts(False)
#: In the tables below: the ``blocking`` severity the check was given (no check but ``sglang``
#: says ERROR of its own).
BLOCKS = Severity.ERROR


def judged(expected: HostFinding, blocking: Severity) -> HostFinding:
    """``expected`` with BLOCKS read as ``blocking``."""
    return replace(expected, severity=blocking) if expected.severity is BLOCKS else expected


@pytest.mark.parametrize(
    ("seen", "torch_sees", "unread", "expected"),
    [
        ((), (), (), HostFinding("gpus", Severity.INFO, "no NVIDIA GPU seen", "", SMI)),
        (
            (),
            (),
            ("??", "Unable to determine", "garbage", "fourth"),
            HostFinding(
                "gpus",
                Severity.WARNING,
                "nvidia-smi answered, but no line reads as a GPU",
                "it printed: ?? | Unable to determine | garbage",
                SMI,
            ),
        ),
        (
            (TWO_SM120[0], H200_2),
            (),
            ("??", "Unable to determine", "garbage", "fourth"),
            HostFinding(
                "gpus",
                Severity.OK,
                "1 SM12x GPU: the patches matter here",
                f"GPU 0: {RTX} (cc 12.0); GPU 2: NVIDIA H200 (cc 9.0); "
                "nvidia-smi also printed: ?? | Unable to determine | garbage",
                SMI,
            ),
        ),
        (
            (UNKNOWN[0], TWO_SM120[1]),
            (),
            (),
            HostFinding(
                "gpus",
                Severity.OK,
                "1 SM12x GPU: the patches matter here",
                f"GPU 0: {SAYS_NA}; GPU 1: {RTX} (cc 12.0)",
                SMI,
            ),
        ),
        (
            UNKNOWN,
            TWO_SM120,
            (),
            HostFinding(
                "gpus",
                Severity.OK,
                "torch sees 2 SM12x GPUs: the patches matter here",
                f"2× {SAYS_NA}: GPUs 0-1; torch: 2× {RTX} (cc 12.0): GPUs 0-1",
                SMI,
            ),
        ),
        (
            UNKNOWN[:1],
            (),
            (),
            HostFinding(
                "gpus",
                Severity.WARNING,
                "compute capability unknown for GPU 0: blockers below are warnings, errors if it is an SM12x GPU",
                f"GPU 0: {SAYS_NA}; torch lists no GPU to tell it by",
                SMI,
            ),
        ),
        (
            UNKNOWN,
            (Gpu(0, H200, (9, 0)), Gpu(1, H200, (9, 0))),
            (),
            HostFinding(
                "gpus",
                Severity.WARNING,
                "compute capability unknown for GPUs 0, 1: blockers below are warnings, errors if they are SM12x GPUs",
                f"2× {SAYS_NA}: GPUs 0-1; torch sees: 2× NVIDIA H200 (cc 9.0): GPUs 0-1",
                SMI,
            ),
        ),
        (
            (H200_2,),
            (),
            (),
            HostFinding(
                "gpus",
                Severity.INFO,
                "no SM12x GPU: the patches change nothing at run time on this host",
                "GPU 2: NVIDIA H200 (cc 9.0)",
                SMI,
            ),
        ),
    ],
)
def test_gpus_finding(
    seen: tuple[Gpu, ...], torch_sees: tuple[Gpu, ...], unread: tuple[str, ...], expected: HostFinding
) -> None:
    assert checks.gpus(seen, SMI, torch_sees, unread) == [expected]


MIXED = (TWO_SM120[0], Gpu(1, H200, (9, 0)))
BY_INDEX = " (by index in nvidia-smi's order; CUDA numbers the fastest GPU first unless CUDA_DEVICE_ORDER=PCI_BUS_ID)"


@pytest.mark.parametrize(
    ("host", "summary", "detail", "source"),
    [
        (
            host_with(environ={"CUDA_VISIBLE_DEVICES": "0"}),
            "CUDA_VISIBLE_DEVICES=0",
            "CUDA_VISIBLE_DEVICES=0 shows GPU 0 only to CUDA",
            CVD_SOURCE,
        ),
        (
            host_with(environ={"CUDA_VISIBLE_DEVICES": "0"}, serving_environ={"CUDA_VISIBLE_DEVICES": "0"}),
            "CUDA_VISIBLE_DEVICES=0",
            "CUDA_VISIBLE_DEVICES=0 shows GPU 0 only to CUDA",
            SERVING_CVD_SOURCE,
        ),
        (
            host_with(environ={}, serving_environ={"CUDA_VISIBLE_DEVICES": "1"}),
            "CUDA_VISIBLE_DEVICES=1",
            "doctor has CUDA_VISIBLE_DEVICES unset, the serving interpreter CUDA_VISIBLE_DEVICES=1; "
            "CUDA_VISIBLE_DEVICES=1 shows GPU 1 only to CUDA",
            SERVING_CVD_SOURCE,
        ),
        (
            host_with(environ={"CUDA_VISIBLE_DEVICES": "0"}, serving_environ={}),
            "CUDA_VISIBLE_DEVICES unset in the serving interpreter",
            "doctor has CUDA_VISIBLE_DEVICES=0, the serving interpreter CUDA_VISIBLE_DEVICES unset; "
            "CUDA_VISIBLE_DEVICES is not set: CUDA shows every GPU",
            SERVING_CVD_SOURCE,
        ),
        (  # nvidia-smi lists no GPU: nothing to select from, only the difference is said
            host_with(environ={"CUDA_VISIBLE_DEVICES": "0"}, serving_environ={"CUDA_VISIBLE_DEVICES": ""}, smi=()),
            'CUDA_VISIBLE_DEVICES=""',
            'doctor has CUDA_VISIBLE_DEVICES=0, the serving interpreter CUDA_VISIBLE_DEVICES=""',
            SERVING_CVD_SOURCE,
        ),
        (host_with(environ={"CUDA_VISIBLE_DEVICES": "0"}, smi=()), "CUDA_VISIBLE_DEVICES=0", "", CVD_SOURCE),
        (
            host_with(environ={"CUDA_VISIBLE_DEVICES": "1"}, smi=MIXED),
            "CUDA_VISIBLE_DEVICES=1",
            "CUDA_VISIBLE_DEVICES=1 shows GPU 1 only to CUDA" + BY_INDEX,
            CVD_SOURCE,
        ),
        (
            host_with(environ={"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, smi=MIXED),
            "CUDA_VISIBLE_DEVICES=1",
            "CUDA_VISIBLE_DEVICES=1 shows GPU 1 only to CUDA",
            CVD_SOURCE,
        ),
        (  # the serving interpreter's CUDA_DEVICE_ORDER is the one its CUDA reads
            host_with(
                environ={"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
                serving_environ={"CUDA_VISIBLE_DEVICES": "1"},
                smi=MIXED,
            ),
            "CUDA_VISIBLE_DEVICES=1",
            "CUDA_VISIBLE_DEVICES=1 shows GPU 1 only to CUDA" + BY_INDEX,
            SERVING_CVD_SOURCE,
        ),
    ],
)
def test_cuda_visible_devices_finding(host: Host, summary: str, detail: str, source: str) -> None:
    expected = HostFinding("cuda-visible-devices", Severity.INFO, summary, detail, source)
    assert checks.cuda_visible_devices(host) == [expected]


SAME = "the server started from this environment sees the same"
NOT_SET = (
    f"CUDA_VISIBLE_DEVICES is not set in {PYTHON}: its CUDA runtime lists fewer GPUs than the driver "
    "(a GPU in a bad state, a container limiting devices, or a driver/runtime mismatch)"
)
UNTOLD = "which ones cannot be told (no UUIDs to match)"
WITH_UUIDS = tuple(Gpu(i, RTX, (12, 0), uuid=f"GPU-{i}aaa") for i in (0, 1))


@pytest.mark.parametrize(
    ("host", "severity", "summary", "detail"),
    [
        (
            host_with(torch_gpus=TWO_SM120[:1], serving_environ={"CUDA_VISIBLE_DEVICES": "0"}),
            Severity.INFO,
            "torch sees 1 of the 2 GPUs nvidia-smi lists",
            f"hidden: GPU 1; CUDA_VISIBLE_DEVICES=0 shows GPU 0 only to CUDA; {SAME}",
        ),
        (  # explained, but nothing left to serve on
            host_with(torch_gpus=(), serving_environ={"CUDA_VISIBLE_DEVICES": ""}),
            Severity.WARNING,
            "torch sees 0 of the 2 GPUs nvidia-smi lists",
            f'hidden: GPUs 0, 1; CUDA_VISIBLE_DEVICES="" hides every GPU from CUDA; {SAME}',
        ),
        (
            host_with(torch_gpus=(), smi=TWO_SM120[:1], serving_environ={}),
            Severity.WARNING,
            "torch sees 0 of the 1 GPU nvidia-smi lists",
            f"hidden: GPU 0; {NOT_SET}; {SAME}",
        ),
        (
            host_with(torch_gpus=TWO_SM120[:1], serving_environ={}),
            Severity.WARNING,
            "torch sees 1 of the 2 GPUs nvidia-smi lists",
            f"{UNTOLD}; {NOT_SET}; {SAME}",
        ),
        (
            host_with(torch_gpus=TWO_SM120[:1], serving_environ={"CUDA_VISIBLE_DEVICES": "0,1"}),
            Severity.WARNING,
            "torch sees 1 of the 2 GPUs nvidia-smi lists",
            f"{UNTOLD}; CUDA_VISIBLE_DEVICES=0,1 shows every GPU to CUDA; "
            f"yet torch sees 1: something else hides GPUs too; {SAME}",
        ),
        (  # the variable cannot be read here: not explained
            host_with(torch_gpus=TWO_SM120[:1], serving_environ={"CUDA_VISIBLE_DEVICES": "GPU-1"}),
            Severity.WARNING,
            "torch sees 1 of the 2 GPUs nvidia-smi lists",
            f"{UNTOLD}; CUDA_VISIBLE_DEVICES=GPU-1 names GPUs by UUID, and nvidia-smi gave no UUIDs; "
            f"torch sees 1; {SAME}",
        ),
        (
            host_with(
                torch_gpus=(Gpu(0, RTX, (12, 0), uuid="1aaa"),),
                smi=WITH_UUIDS,
                serving_environ={"CUDA_VISIBLE_DEVICES": "GPU-1"},
            ),
            Severity.INFO,
            "torch sees 1 of the 2 GPUs nvidia-smi lists",
            f"hidden: GPU 0; CUDA_VISIBLE_DEVICES=GPU-1 shows GPU 1 only to CUDA; {SAME}",
        ),
    ],
)
def test_torch_gpus_finding(host: Host, severity: Severity, summary: str, detail: str) -> None:
    expected = HostFinding("torch-gpus", severity, summary, detail, f"{TORCH_COUNT}; nvidia-smi")
    assert checks.torch_gpus(host) == [expected]


def test_sglang_findings() -> None:
    assert checks.sglang(None, None) == [
        HostFinding("sglang", Severity.ERROR, "no sglang found", "", "sm120patch locate")
    ]
    missing = HostFinding(
        "sglang", Severity.ERROR, "no sglang found", "no sglang in this interpreter", "sm120patch locate"
    )
    assert checks.sglang(None, "no sglang in this interpreter") == [missing]
    assert checks.sglang(tree(), None) == [
        HostFinding("sglang", Severity.INFO, "sglang 0.5.9 (wheel)", "/site/sglang", "test")
    ]
    unknown = HostFinding("sglang", Severity.INFO, "sglang (unknown version) (wheel)", "/site/sglang", "test")
    assert checks.sglang(tree(version=None), None) == [unknown]


def by_version(version: str) -> str:
    return f"version {version} against 0.6.17 (flashinfer#3903); its code was not found"


FLASHINFER_DIR = Path("/site/flashinfer")
NO_BUILDER = (
    f"{FLASHINFER_DIR}/jit/comm.py has no gen_trtllm_comm_module(supported_major_versions=[...]) to read; "
    "judged by the version against 0.6.17 (flashinfer#3903)"
)
PIP = "the fused path fails at JIT on SM12x (sglang#15650); `pip install -U 'flashinfer-python>=0.6.17'`"
LACKS = "FlashInfer 0.6.3 lacks the SM12x allreduce kernel (>= 0.6.17 needed)"


@pytest.mark.parametrize("blocking", BLOCKING)
@pytest.mark.parametrize(
    ("installed", "refusing", "expected"),
    [
        (
            tree(),
            False,
            HostFinding(
                "flashinfer",
                BLOCKS,
                "FlashInfer is not installed beside sglang",
                "sglang 0.5.9 pins 0.6.3",
                "no flashinfer package found beside sglang",
            ),
        ),
        (  # a release with no pin in the table
            tree(version="9.9.9"),
            False,
            HostFinding(
                "flashinfer",
                BLOCKS,
                "FlashInfer is not installed beside sglang",
                "",
                "no flashinfer package found beside sglang",
            ),
        ),
        (
            tree("0.6.18"),
            False,
            HostFinding(
                "flashinfer",
                Severity.OK,
                "FlashInfer 0.6.18 builds the trtllm allreduce for SM12x",
                "",
                by_version("0.6.18"),
            ),
        ),
        (
            tree("not-a-version"),
            False,
            HostFinding(
                "flashinfer",
                Severity.WARNING,
                "FlashInfer not-a-version: cannot tell whether it builds the SM12x kernel",
                "",
                by_version("not-a-version"),
            ),
        ),
        (  # a package directory without a version or a comm.py to read
            replace(tree(), flashinfer_dir=FLASHINFER_DIR),
            False,
            HostFinding(
                "flashinfer",
                Severity.WARNING,
                "FlashInfer (unknown version): cannot tell whether it builds the SM12x kernel",
                "",
                NO_BUILDER,
            ),
        ),
        (
            tree("0.6.3"),
            False,
            HostFinding("flashinfer", BLOCKS, LACKS, PIP, f"{by_version('0.6.3')}; flashinfer#3903"),
        ),
        (
            tree("0.6.3"),
            True,
            HostFinding(
                "flashinfer",
                BLOCKS,
                LACKS,
                "sglang >= 0.5.18 pins a FlashInfer that has it",
                f"{by_version('0.6.3')}; flashinfer#3903",
            ),
        ),
    ],
)
def test_flashinfer_finding(blocking: Severity, installed: SglangTree, refusing: bool, expected: HostFinding) -> None:
    found = checks.flashinfer(installed, blocking, refused=True) if refusing else checks.flashinfer(installed, blocking)
    assert found == [judged(expected, blocking)]


@pytest.mark.parametrize("blocking", BLOCKING)
def test_patches_findings(blocking: Severity) -> None:
    states = {"a": State.APPLIED, "b": State.NOT_NEEDED, "c": State.PENDING, "d": State.DRIFT, "e": State.REFUSED}
    source = "sm120patch verify (/site/sglang)"
    verify = "see `sm120patch verify` for what the code looks like"
    assert checks.patches(tree(), states, blocking) == [
        HostFinding("patch:a", Severity.OK, "applied", "", source),  # the id is said once: "patch:a: applied"
        HostFinding("patch:b", Severity.OK, "not-needed", "", source),
        HostFinding("patch:c", blocking, "pending (not applied)", "run `sm120patch apply`", source),
        HostFinding("patch:d", blocking, "drift", verify, source),
        HostFinding("patch:e", blocking, "refused", verify, source),
    ]
    outside = HostFinding("patch:a", Severity.OK, "applied", "", "sm120patch verify")
    assert checks.patches(None, {"a": State.APPLIED}, blocking) == [outside]


@pytest.mark.parametrize(("version", "release"), [("0.5.3", "sglang 0.5.3"), (None, "this sglang")])
def test_a_refused_release_is_one_finding_with_the_upgrade(version: str | None, release: str) -> None:
    summary = (
        f"{release} cannot be patched: upgrade to sglang >= 0.5.4 (>= 0.5.18 pins a FlashInfer with the SM12x kernel)"
    )
    found = checks.refused(tree(version=version), "sglang 0.5.3 has no SM12x probe", Severity.WARNING)
    source = "sm120patch apply (/site/sglang)"
    assert found == [HostFinding("patches", Severity.WARNING, summary, "sglang 0.5.3 has no SM12x probe", source)]


@pytest.mark.parametrize(
    ("host", "severity", "detail"),
    [
        (
            host_with(torch_gpus=(), smi=TWO_SM120[:1], serving_environ={}),
            Severity.WARNING,
            f"the CUDA driver in {PYTHON} lists no GPU: there is no device to ask, while nvidia-smi lists 1 GPU",
        ),
        (
            host_with(torch_gpus=(), smi=(), serving_environ={"CUDA_VISIBLE_DEVICES": ""}),
            Severity.INFO,
            f'the CUDA driver in {PYTHON} lists no GPU (CUDA_VISIBLE_DEVICES=""): there is no device to ask',
        ),
    ],
)
def test_skipped_when_the_driver_lists_no_gpu(host: Host, severity: Severity, detail: str) -> None:
    summary = "skipped: multicast, GPUDirect RDMA with VMM"
    expected = HostFinding("host-checks", severity, summary, detail, f"{PYTHON} (sm120patch.doctor.remote.host_facts)")
    assert checks.skipped(host) == [expected]


THREE_SM120 = (*TWO_SM120, Gpu(2, RTX, (12, 0)))
IPC = "the trtllm allreduce exchanges IPC buffers between GPUs and needs peer access"


def partial_p2p(error: str | None) -> Host:
    """Two GPUs, of whose two pairs torch checked one."""
    host = host_with(torch=replace(TORCH, error=error))
    return replace(host, facts=replace(host.facts, p2p=host.facts.p2p[:1]))


@pytest.mark.parametrize("blocking", BLOCKING)
@pytest.mark.parametrize(
    ("host", "tp", "expected"),
    [
        (host_with(), None, HostFinding("p2p", Severity.OK, "P2P access between all 2 GPU pairs", "", PEER)),
        (
            host_with(torch_gpus=THREE_SM120, p2p=(False, True)),
            None,
            HostFinding("p2p", BLOCKS, "no P2P access between GPUs 0->1, 0->2", IPC, PEER),
        ),
        (partial_p2p(None), None, HostFinding("p2p", Severity.WARNING, "P2P: 1 of 2 GPU pairs checked", "", PEER)),
        (
            partial_p2p("RuntimeError: CUDA error"),
            None,
            HostFinding(
                "p2p",
                Severity.WARNING,
                "P2P: 1 of 2 GPU pairs checked",
                "torch failed part way: RuntimeError: CUDA error",
                PEER,
            ),
        ),
        (
            host_with(torch_gpus=()),
            None,
            HostFinding("p2p", Severity.INFO, "P2P: torch sees 0 GPUs, no pair to check", "", PEER),
        ),
        (
            host_with(torch_gpus=TWO_SM120[:1]),
            1,
            HostFinding("p2p", Severity.INFO, "P2P: torch sees 1 GPU, no pair to check", "", PEER),
        ),
        (
            host_with(torch_gpus=()),
            1,
            HostFinding("p2p", Severity.INFO, "P2P: torch sees 0 GPUs, no pair to check", "", PEER),
        ),
        (
            host_with(torch_gpus=()),
            2,
            HostFinding(
                "p2p",
                Severity.WARNING,
                "P2P: torch sees 0 GPUs, no pair to check",
                "--tp 2 needs peer access between 2 GPUs",
                PEER,
            ),
        ),
        (
            host_with(torch_gpus=TWO_SM120[:1]),
            2,
            HostFinding(
                "p2p",
                Severity.WARNING,
                "P2P: torch sees 1 GPU, no pair to check",
                "--tp 2 needs peer access between 2 GPUs",
                PEER,
            ),
        ),
    ],
)
def test_p2p_finding(blocking: Severity, host: Host, tp: int | None, expected: HostFinding) -> None:
    assert checks.p2p(host, blocking, tp) == [judged(expected, blocking)]


NEEDS_PREFLIGHT = (
    "sglang's workspace preflight queries cuMulticastGetGranularity, fails here and turns fusion off for the run; "
    "`sm120patch apply` (workspace-preflight) fixes that"
)


def covered(state: State) -> str:
    return (
        f"workspace-preflight is {state.value}: the workspace preflight does not ask for it on SM12x, "
        "and FlashInfer allocates without it"
    )


@pytest.mark.parametrize("blocking", BLOCKING)
@pytest.mark.parametrize(
    ("multicast", "states", "expected"),
    [
        (
            (True, True),
            {"workspace-preflight": State.PENDING},
            HostFinding("multicast", Severity.OK, "multicast supported on every GPU", "", MULTICAST),
        ),
        (
            (False, False),
            {"workspace-preflight": State.APPLIED},
            HostFinding("multicast", Severity.INFO, "no multicast on GPUs 0, 1", covered(State.APPLIED), MULTICAST),
        ),
        (
            (True, False),
            {"workspace-preflight": State.NOT_NEEDED},
            HostFinding("multicast", Severity.INFO, "no multicast on GPU 1", covered(State.NOT_NEEDED), MULTICAST),
        ),
        (
            (True, False),
            {"workspace-preflight": State.PENDING},
            HostFinding("multicast", BLOCKS, "no multicast on GPU 1", NEEDS_PREFLIGHT, f"{MULTICAST}; sglang#32330"),
        ),
        (
            (False, False),
            {"other-patch": State.APPLIED},
            HostFinding(
                "multicast", BLOCKS, "no multicast on GPUs 0, 1", NEEDS_PREFLIGHT, f"{MULTICAST}; sglang#32330"
            ),
        ),
    ],
)
def test_multicast_finding(
    blocking: Severity, multicast: tuple[bool, bool], states: dict[str, State], expected: HostFinding
) -> None:
    assert checks.multicast(host_with(multicast=multicast), states, blocking) == [judged(expected, blocking)]


@pytest.mark.parametrize("blocking", BLOCKING)
def test_gdr_findings(blocking: Severity) -> None:
    ok = HostFinding("gdr", Severity.OK, "GPUDirect RDMA with VMM supported on every GPU", "", GDR)
    assert checks.gdr(host_with(), blocking) == [ok]
    detail = (
        "FlashInfer and sglang's preflight allocate the workspace with gpuDirectRDMACapable=1, which fails "
        "without it (made optional by flashinfer#4634, not in a release yet)"
    )
    missing = HostFinding("gdr", blocking, "no GPUDirect RDMA with VMM on GPUs 0, 1", detail, f"{GDR}; flashinfer#4634")
    assert checks.gdr(host_with(gdr_vmm=(False, False)), blocking) == [missing]


CUDA_CONF, CONF = BOTH
ALLOC_SOURCE = f"PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF in doctor's environment and in {PYTHON}"
FOUND_IN = f"{ALLOC_SOURCE}; the names found in {LIB}"
READS_BOTH = f"torch 2.9.0 in {PYTHON} reads PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF"
BREAKS = "expandable segments break the CUDA IPC the fused allreduce relies on; unset it for the server; "
EXPANDABLE = "expandable_segments:True"


@pytest.mark.parametrize("blocking", BLOCKING)
@pytest.mark.parametrize(
    ("torch", "environ", "serving_environ", "expected"),
    [
        (
            torch_reading(),
            {},
            None,
            HostFinding(
                "alloc-conf",
                Severity.OK,
                "PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF are not set",
                f"torch 2.9.0 in {PYTHON} reads neither spelling",
                FOUND_IN,
            ),
        ),
        (
            replace(torch_reading(CONF), version=None),
            {},
            None,
            HostFinding(
                "alloc-conf",
                Severity.OK,
                "PYTORCH_ALLOC_CONF is not set",
                f"torch in {PYTHON} reads PYTORCH_ALLOC_CONF",
                FOUND_IN,
            ),
        ),
        (
            replace(torch_reading(), version=None),
            {},
            None,
            HostFinding(
                "alloc-conf",
                Severity.OK,
                "PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF are not set",
                f"torch in {PYTHON} reads neither spelling",
                FOUND_IN,
            ),
        ),
        (  # a spelling this torch does not read, without expandable segments
            torch_reading(CONF),
            {CUDA_CONF: "max_split_size_mb:512"},
            None,
            HostFinding(
                "alloc-conf",
                Severity.OK,
                "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512",
                f"torch 2.9.0 in {PYTHON} reads PYTORCH_ALLOC_CONF",
                FOUND_IN,
            ),
        ),
        (
            replace(TORCH, alloc_evidence="no torch/lib/libc10*.so"),
            {},
            None,
            HostFinding(
                "alloc-conf",
                Severity.OK,
                "PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF are not set",
                "which spelling this torch reads could not be told (no torch/lib/libc10*.so): both are checked",
                ALLOC_SOURCE,
            ),
        ),
        (
            TORCH,
            {CONF: " "},
            None,
            HostFinding(
                "alloc-conf",
                Severity.OK,
                "PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF are not set",
                "which spelling this torch reads could not be told: both are checked",
                ALLOC_SOURCE,
            ),
        ),
        (  # set in both environments: said once; blank values count as unset
            torch_reading(*BOTH),
            {CONF: "max_split_size_mb:512", CUDA_CONF: " "},
            {CONF: "max_split_size_mb:512", CUDA_CONF: "garbage_collection_threshold:0.6"},
            HostFinding(
                "alloc-conf",
                Severity.OK,
                "PYTORCH_ALLOC_CONF=max_split_size_mb:512; PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6",
                READS_BOTH,
                FOUND_IN,
            ),
        ),
        (  # both spellings expandable: the older is named
            torch_reading(*BOTH),
            {CONF: EXPANDABLE, CUDA_CONF: EXPANDABLE},
            None,
            HostFinding("alloc-conf", BLOCKS, f"{CUDA_CONF}={EXPANDABLE}", BREAKS + READS_BOTH, FOUND_IN),
        ),
        (  # only in the serving interpreter
            torch_reading(*BOTH),
            {},
            {CONF: EXPANDABLE},
            HostFinding("alloc-conf", BLOCKS, f"{CONF}={EXPANDABLE}", BREAKS + READS_BOTH, FOUND_IN),
        ),
        (  # torch did not answer: both spellings count, whatever it said before
            replace(NOT_ANSWERED, alloc_reads=(CUDA_CONF,), alloc_evidence=LIB),
            {CONF: EXPANDABLE},
            None,
            HostFinding(
                "alloc-conf",
                BLOCKS,
                f"{CONF}={EXPANDABLE}",
                f"{BREAKS}torch did not answer in {PYTHON}: both spellings are checked",
                ALLOC_SOURCE,
            ),
        ),
        (
            torch_reading(CONF),
            {CONF: "max_split_size_mb:512", CUDA_CONF: "expandable_segments:true"},
            None,
            HostFinding(
                "alloc-conf",
                Severity.INFO,
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:true (not read by this torch)",
                f"torch 2.9.0 in {PYTHON} reads PYTORCH_ALLOC_CONF",
                FOUND_IN,
            ),
        ),
        (
            torch_reading(),
            {CUDA_CONF: EXPANDABLE},
            None,
            HostFinding(
                "alloc-conf",
                Severity.INFO,
                f"{CUDA_CONF}={EXPANDABLE} (not read by this torch)",
                f"torch 2.9.0 in {PYTHON} reads neither spelling",
                FOUND_IN,
            ),
        ),
    ],
)
def test_alloc_conf_finding(
    blocking: Severity,
    torch: TorchFacts,
    environ: dict[str, str],
    serving_environ: dict[str, str] | None,
    expected: HostFinding,
) -> None:
    host = host_with(torch=torch, environ=environ, serving_environ=serving_environ)
    assert checks.alloc_conf(host, blocking) == [judged(expected, blocking)]


NO_UUIDS = "CUDA_VISIBLE_DEVICES=GPU-1 names GPUs by UUID, and nvidia-smi gave no UUIDs"
TORCH_TP = f"{TORCH_COUNT}; --tp"
SMI_TP = "nvidia-smi; CUDA_VISIBLE_DEVICES; --tp"
PER_RANK = "sglang needs one GPU per rank; "


def smi_failed(host: Host) -> Host:
    """``host`` where nvidia-smi gave no answer."""
    return replace(host, gpus=GpuReport((), "nvidia-smi", error="nvidia-smi: not on PATH"))


@pytest.mark.parametrize("blocking", BLOCKING)
@pytest.mark.parametrize(
    ("host", "tp", "expected"),
    [
        (host_with(), 2, HostFinding("tp-gpus", Severity.OK, f"TP 2: torch in {PYTHON} shows 2 GPUs", "", TORCH_TP)),
        (
            host_with(torch_gpus=TWO_SM120[:1]),
            2,
            HostFinding(
                "tp-gpus",
                BLOCKS,
                "TP 2 needs 2 GPUs, 1 visible",
                f"{PER_RANK}torch in {PYTHON} shows 1 GPU of the 2 nvidia-smi lists (see torch-gpus)",
                TORCH_TP,
            ),
        ),
        (  # torch sees more than nvidia-smi lists
            host_with(smi=TWO_SM120[:1]),
            4,
            HostFinding(
                "tp-gpus", BLOCKS, "TP 4 needs 4 GPUs, 2 visible", f"{PER_RANK}torch in {PYTHON} shows 2 GPUs", TORCH_TP
            ),
        ),
        (
            smi_failed(host_with(torch_gpus=TWO_SM120[:1])),
            2,
            HostFinding(
                "tp-gpus", BLOCKS, "TP 2 needs 2 GPUs, 1 visible", f"{PER_RANK}torch in {PYTHON} shows 1 GPU", TORCH_TP
            ),
        ),
        (
            host_with(torch=NOT_ANSWERED),
            2,
            HostFinding("tp-gpus", Severity.OK, "TP 2: nvidia-smi shows 2 GPUs", "", "nvidia-smi; --tp"),
        ),
        (
            host_with(torch=NOT_ANSWERED, environ={"CUDA_VISIBLE_DEVICES": "0"}),
            1,
            HostFinding(
                "tp-gpus",
                Severity.OK,
                "TP 1: CUDA under CUDA_VISIBLE_DEVICES=0 shows 1 GPU",
                "CUDA_VISIBLE_DEVICES=0 shows GPU 0 only to CUDA",
                SMI_TP,
            ),
        ),
        (
            host_with(torch=NOT_ANSWERED, environ={"CUDA_VISIBLE_DEVICES": "0"}, serving_environ={}),
            2,
            HostFinding(
                "tp-gpus",
                Severity.OK,
                "TP 2: nvidia-smi shows 2 GPUs",
                "",
                "nvidia-smi; --tp",
            ),
        ),
        (  # CUDA numbers the GPUs as nvidia-smi does under CUDA_DEVICE_ORDER=PCI_BUS_ID
            host_with(
                torch=NOT_ANSWERED, smi=MIXED, environ={"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
            ),
            1,
            HostFinding(
                "tp-gpus",
                Severity.OK,
                "TP 1: CUDA under CUDA_VISIBLE_DEVICES=1 shows 1 GPU",
                "CUDA_VISIBLE_DEVICES=1 shows GPU 1 only to CUDA",
                SMI_TP,
            ),
        ),
        (  # the selection cannot be told: nvidia-smi's count stands
            host_with(torch=NOT_ANSWERED, environ={"CUDA_VISIBLE_DEVICES": "GPU-1"}),
            2,
            HostFinding("tp-gpus", Severity.OK, "TP 2: nvidia-smi shows 2 GPUs", NO_UUIDS, SMI_TP),
        ),
        (
            host_with(torch=NOT_ANSWERED, environ={"CUDA_VISIBLE_DEVICES": "GPU-1"}),
            4,
            HostFinding(
                "tp-gpus",
                BLOCKS,
                "TP 4 needs 4 GPUs, 2 visible",
                f"{PER_RANK}nvidia-smi shows 2 GPUs; {NO_UUIDS}",
                SMI_TP,
            ),
        ),
        (
            host_with(),
            8,
            HostFinding(
                "tp-gpus", BLOCKS, "TP 8 needs 8 GPUs, 2 visible", f"{PER_RANK}torch in {PYTHON} shows 2 GPUs", TORCH_TP
            ),
        ),
        (
            host_with(torch=NOT_ANSWERED, environ={"CUDA_VISIBLE_DEVICES": "0"}),
            2,
            HostFinding(
                "tp-gpus",
                BLOCKS,
                "TP 2 needs 2 GPUs, 1 visible",
                f"{PER_RANK}CUDA under CUDA_VISIBLE_DEVICES=0 shows 1 GPU of the 2 nvidia-smi lists; "
                "CUDA_VISIBLE_DEVICES=0 shows GPU 0 only to CUDA",
                SMI_TP,
            ),
        ),
        (  # no GPU on this host
            host_with(torch=NOT_ANSWERED, smi=()),
            1,
            HostFinding(
                "tp-gpus",
                BLOCKS,
                "TP 1 needs 1 GPU, 0 visible",
                f"{PER_RANK}nvidia-smi shows 0 GPUs",
                "nvidia-smi; --tp",
            ),
        ),
        (
            smi_failed(host_with(torch=NOT_ANSWERED)),
            2,
            HostFinding(
                "tp-gpus",
                Severity.WARNING,
                "TP 2: how many GPUs the server will see is unknown",
                "neither nvidia-smi nor torch in the serving interpreter answered",
                "--tp",
            ),
        ),
    ],
)
def test_tp_gpus_finding(blocking: Severity, host: Host, tp: int, expected: HostFinding) -> None:
    assert checks.tp_gpus(host, tp, blocking) == [judged(expected, blocking)]


# --- the checks that could not be judged ----------------------------------------------------------


def test_skipped_says_nothing_when_everything_answered() -> None:
    assert checks.skipped(host_with()) == []


@pytest.mark.parametrize(
    ("host", "names", "reason"),
    [
        (host_with(error="could not run it"), "P2P access, multicast, GPUDirect RDMA with VMM", "could not run it"),
        (
            host_with(torch=TorchFacts(False, error="No module named 'torch'")),
            "P2P access, multicast, GPUDirect RDMA with VMM",
            "No module named 'torch'",
        ),
        (host_with(torch=TorchFacts(False)), "P2P access, multicast, GPUDirect RDMA with VMM", "torch did not answer"),
        (
            host_with(driver=DriverFacts(False, error="No module named 'cuda'")),
            "multicast, GPUDirect RDMA with VMM",
            "No module named 'cuda'",
        ),
        (
            host_with(driver=DriverFacts(False)),
            "multicast, GPUDirect RDMA with VMM",
            "the CUDA driver bindings did not answer",
        ),
    ],
)
def test_skipped_names_what_could_not_be_judged(host: Host, names: str, reason: str) -> None:
    detail = f"torch / cuda.bindings did not import or answer in {PYTHON}: {reason}"
    source = f"{PYTHON} (sm120patch.doctor.remote.host_facts)"
    assert checks.skipped(host) == [HostFinding("host-checks", Severity.WARNING, f"skipped: {names}", detail, source)]


@pytest.mark.parametrize(("smi", "severity"), [(TWO_SM120, Severity.WARNING), ((), Severity.INFO)])
def test_no_device_listed_skips_the_attribute_checks_and_says_so(smi: tuple[Gpu, ...], severity: Severity) -> None:
    """torch and the driver answered, but under CUDA_VISIBLE_DEVICES="" they list no GPU."""
    host = host_with(torch_gpus=(), smi=smi, serving_environ={"CUDA_VISIBLE_DEVICES": ""})
    assert checks.multicast(host, {}, Severity.ERROR) == [] and checks.gdr(host, Severity.ERROR) == []
    finding = only(checks.skipped(host))
    assert finding.severity is severity and finding.summary == "skipped: multicast, GPUDirect RDMA with VMM"
    assert finding.detail.startswith(f'the CUDA driver in {PYTHON} lists no GPU (CUDA_VISIBLE_DEVICES=""): ')
    assert finding.detail.endswith(", while nvidia-smi lists 2 GPUs") is bool(smi)


# --- the allocator variable, spelling by spelling -----------------------------------------------


@pytest.mark.parametrize("blocking", BLOCKING)
@pytest.mark.parametrize(
    ("environ", "reads", "severity", "summary"),
    [
        ({}, BOTH, Severity.OK, "PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF are not set"),
        ({}, BOTH[:1], Severity.OK, "PYTORCH_CUDA_ALLOC_CONF is not set"),
        (
            {"PYTORCH_CUDA_ALLOC_CONF": ""},
            BOTH,
            Severity.OK,
            "PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF are not set",
        ),
        (
            {"PYTORCH_ALLOC_CONF": "max_split_size_mb:512"},
            BOTH,
            Severity.OK,
            "PYTORCH_ALLOC_CONF=max_split_size_mb:512",
        ),
        (
            {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
            BOTH,
            None,
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        ),
        ({"PYTORCH_ALLOC_CONF": "max_split_size_mb:64, Expandable_Segments : true"}, BOTH, None, None),
        ({"PYTORCH_ALLOC_CONF": "expandable_segments:True"}, BOTH[:1], Severity.INFO, None),
        ({"PYTORCH_ALLOC_CONF": "expandable_segments:True"}, None, None, None),  # cannot tell: both count
    ],
)
def test_alloc_conf_in_each_spelling_the_serving_torch_reads(
    blocking: Severity, environ: dict, reads: tuple[str, ...] | None, severity: Severity | None, summary: str | None
) -> None:
    torch = torch_reading(*reads) if reads is not None else TORCH
    finding = only(checks.alloc_conf(host_with(torch=torch, environ=environ), blocking))
    assert finding.severity is (severity or blocking)
    [(name, value)] = environ.items() or [("", "")]
    if summary is None:
        summary = f"{name}={value}" + (" (not read by this torch)" if severity is Severity.INFO else "")
    assert finding.summary == summary
    assert finding.source.startswith(
        f"PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF in doctor's environment and in {PYTHON}"
    )
    if reads is None:
        assert finding.detail.endswith("could not be told: both are checked")
    else:
        assert f"torch 2.9.0 in {PYTHON} reads {' and '.join(reads)}" in finding.detail
        assert finding.source.endswith(f"; the names found in {LIB}")


def test_alloc_conf_set_only_in_the_serving_interpreter_counts() -> None:
    host = host_with(torch=torch_reading(*BOTH), serving_environ={"PYTORCH_ALLOC_CONF": "expandable_segments:True"})
    finding = only(checks.alloc_conf(host, Severity.ERROR))
    assert finding.severity is Severity.ERROR and finding.summary == "PYTORCH_ALLOC_CONF=expandable_segments:True"


def test_alloc_conf_without_torch_checks_both_spellings() -> None:
    host = host_with(torch=TorchFacts(False), environ={"PYTORCH_ALLOC_CONF": "expandable_segments:True"})
    finding = only(checks.alloc_conf(host, Severity.WARNING))
    assert finding.severity is Severity.WARNING
    assert finding.detail.endswith(f"torch did not answer in {PYTHON}: both spellings are checked")


@pytest.mark.parametrize(
    ("check", "host"),
    [
        (checks.cuda_visible_devices, host_with()),
        (checks.torch_gpus, host_with()),  # torch sees every GPU
        (lambda host: checks.p2p(host, Severity.ERROR, 2), host_with(torch=NOT_ANSWERED)),
        (lambda host: checks.multicast(host, {}, Severity.ERROR), host_with(driver=DriverFacts(False))),
        (lambda host: checks.multicast(host, {}, Severity.ERROR), host_with(torch=NOT_ANSWERED)),
        (lambda host: checks.gdr(host, Severity.ERROR), host_with(driver=DriverFacts(False))),
        (lambda host: checks.tp_gpus(host, None, Severity.ERROR), host_with()),
    ],
)
def test_a_check_with_nothing_to_judge_says_nothing(check: Callable[[Host], list[HostFinding]], host: Host) -> None:
    """Where another finding says why (``skipped``, ``gpus``) or nothing is set, no finding."""
    assert check(host) == []
