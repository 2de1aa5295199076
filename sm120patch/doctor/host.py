"""The host, typed: what ``host_facts`` answers in the serving interpreter, and nvidia-smi.

``run_host_facts`` runs the probe and parses its JSON answer into ``HostFacts``.  A probe
that fails is an answer (``HostFacts.error``); so is one whose answer has a field missing
or of another type: the part it spoils (torch's GPUs and peer access, or the driver's
devices) reads as not answered, saying what was odd.  Whatever bytes the interpreter
prints, with whatever exit status, reading them never raises.

``Host.visible_gpus`` merges the two lists of GPUs: nvidia-smi's, with a capability it
could not read taken from torch where the GPU is certainly the same (same UUID, or the same
name with one capability), saying so.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from sm120patch.doctor.remote import host_facts
from sm120patch.runner import (
    DEFAULT_TIMEOUT_S,
    Answer,
    ProbeError,
    allow_probes,
    end_all,
    leave_ctrl_c_to_the_main_thread,
    run_script,
)
from sm120patch.runner.gpus import Gpu, GpuReport, from_nvidia_smi, same_uuid
from sm120patch.runner.visibility import VARIABLE, select

STEP = "read the host facts (torch, the CUDA driver)"


@dataclass(frozen=True)
class TorchFacts:
    """``import torch`` in the serving interpreter.  ``ok`` with an ``error``: torch imported,
    but listing the GPUs or their peer access failed part way."""

    ok: bool
    version: str | None = None
    cuda: str | None = None
    error: str | None = None
    path: str | None = None  # the torch package directory
    #: The spellings of the allocator variable this torch reads (found in its c10 libraries);
    #: None when that could not be told.
    alloc_reads: tuple[str, ...] | None = None
    alloc_evidence: str | None = None  # the files looked in, or why none was


@dataclass(frozen=True)
class PeerAccess:
    source: int
    target: int
    ok: bool  # torch.cuda.can_device_access_peer(source, target)


@dataclass(frozen=True)
class DriverFacts:
    """The CUDA driver bindings in the serving interpreter."""

    ok: bool
    module: str | None = None  # which bindings answered: cuda.bindings.driver or cuda.cuda
    error: str | None = None


@dataclass(frozen=True)
class DeviceFacts:
    index: int
    multicast: bool  # CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED
    gdr_vmm: bool  # CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED


@dataclass(frozen=True)
class HostFacts:
    """``host_facts``'s answer: GPUs and peer access from torch, device attributes from the
    driver bindings, and the serving interpreter's own environment (``host_facts.ENVIRON``)."""

    torch: TorchFacts = TorchFacts(ok=False)
    gpus: tuple[Gpu, ...] = ()
    p2p: tuple[PeerAccess, ...] = ()
    driver: DriverFacts = DriverFacts(ok=False)
    devices: tuple[DeviceFacts, ...] = ()
    error: str | None = None  # why the probe gave no answer at all
    environ: Mapping[str, str] | None = None  # the variables set there; None: not told
    nvlink: tuple[PeerAccess, ...] | None = None  # NVML's NVLink per GPU pair; None: not told

    @property
    def torch_answered(self) -> bool:
        """Whether the peer-access check can be judged."""
        return self.error is None and self.torch.ok

    @property
    def driver_answered(self) -> bool:
        """Whether the device attributes (multicast, GPUDirect RDMA) can be judged."""
        return self.torch_answered and self.driver.ok


@dataclass(frozen=True)
class Host:
    """What was read off the host: nvidia-smi's GPUs, what the serving interpreter's torch and
    CUDA driver bindings say (``host_facts``), and doctor's own environment, which the server
    inherits."""

    gpus: GpuReport
    facts: HostFacts
    python: str
    alloc_conf: str | None  # PYTORCH_CUDA_ALLOC_CONF in doctor's environment
    environ: Mapping[str, str] | None = None  # doctor's ``host_facts.ENVIRON`` variables that are set

    @property
    def env(self) -> Mapping[str, str]:
        """Doctor's environment variables that matter here (``host_facts.ENVIRON``)."""
        if self.environ is not None:
            return self.environ
        return {} if self.alloc_conf is None else {"PYTORCH_CUDA_ALLOC_CONF": self.alloc_conf}

    @property
    def serving_env(self) -> Mapping[str, str]:
        """The serving interpreter's, where it told them; else doctor's, which it inherits."""
        return self.facts.environ if self.facts.environ is not None else self.env

    @property
    def torch_gpus(self) -> tuple[Gpu, ...]:
        """The GPUs torch sees in the serving interpreter (none where it did not answer)."""
        return self.facts.gpus if self.facts.torch_answered else ()

    def visible_gpus(self) -> tuple[tuple[Gpu, ...], str]:
        """The GPUs and who listed them: nvidia-smi first, with the capabilities it could not
        read filled in from torch where the GPU is certainly the same; torch in the serving
        interpreter when nvidia-smi lists nothing."""
        torch = self.facts.torch
        if self.gpus.answered and self.gpus.gpus:
            filled = tuple(self._fill(g) for g in self.gpus.gpus)
            if any(g.capability_from for g in filled):
                where = f"torch.cuda.get_device_capability in {self.python}"
                return filled, f"{self.gpus.source}; {where}"
            return filled, self.gpus.source
        if self.gpus.answered and not self.facts.gpus:
            return (), self.gpus.source
        answer = "answered" if torch.ok else f"did not answer: {torch.error or self.facts.error}"
        said = self.gpus.error or "listed no GPU"
        return self.facts.gpus, f"{self.gpus.source} ({said}); torch.cuda in {self.python} ({answer})"

    def _fill(self, gpu: Gpu) -> Gpu:
        """``gpu`` with torch's capability where nvidia-smi gave none and the mapping is certain."""
        seen = self.torch_gpus
        if gpu.capability is not None or not seen:
            return gpu
        by_uuid = [t for t in seen if same_uuid(t.uuid, gpu.uuid)]
        if by_uuid:
            return replace(gpu, capability=by_uuid[0].capability, capability_from="torch, same UUID")
        named = {t.capability for t in seen if t.name == gpu.name}
        if len(named) == 1:
            return replace(gpu, capability=named.pop(), capability_from="torch, same name")
        every = {t.capability for t in seen}
        if len(seen) == len(self.gpus.gpus) and len(every) == 1 and "CUDA_VISIBLE_DEVICES" not in self.serving_env:
            return replace(gpu, capability=every.pop(), capability_from="torch, which sees them all")
        return gpu


def read_host(python: str, env: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> Host:
    """nvidia-smi and the probe in ``python``, side by side: a hanging one costs at most
    ``timeout`` seconds, not twice that.  ``env``: doctor's environment (os.environ)."""
    env = os.environ if env is None else env
    allow_probes()
    with ThreadPoolExecutor(max_workers=1, initializer=leave_ctrl_c_to_the_main_thread) as pool:
        smi = pool.submit(from_nvidia_smi, timeout)
        try:
            facts = run_host_facts(python, timeout)
            gpus = smi.result()
        except BaseException:  # Ctrl-C: end nvidia-smi too, rather than wait it out
            end_all()
            raise
    environ = {name: env[name] for name in host_facts.ENVIRON if name in env}
    return Host(gpus, facts, python, env.get("PYTORCH_CUDA_ALLOC_CONF"), environ)


def run_host_facts(python: str, timeout: float = DEFAULT_TIMEOUT_S) -> HostFacts:
    """Run ``host_facts`` in the serving interpreter; a failure is part of the answer."""
    try:
        answer = run_script(python, host_facts.__file__, step=STEP, timeout=timeout)
    except ProbeError as exc:
        return HostFacts(error=str(exc))
    return from_answer(python, answer)


def from_answer(python: str, answer: Answer) -> HostFacts:
    """The probe's answer, whatever it printed, as ``HostFacts``; never raises."""
    try:
        return parse_host_facts(answer.json_object(python, STEP))
    except ProbeError as exc:
        return HostFacts(error=str(exc))
    except RecursionError:  # a JSON nested deeper than the parser goes
        return HostFacts(error=f"{python} could not {STEP}: it printed JSON nested too deep to read")


class _Odd(ValueError):
    """A field of the answer that is missing or of another type than ``host_facts`` writes."""


def parse_host_facts(data: Mapping[str, object]) -> HostFacts:
    """``host_facts``'s JSON object, typed (see the module docstring for an odd answer)."""
    torch = _torch(data.get("torch"))
    try:
        gpus = tuple(_gpu(entry, f"gpus[{i}]") for i, entry in enumerate(_list(data, "gpus")))
        p2p = tuple(_peer(entry, f"p2p[{i}]") for i, entry in enumerate(_list(data, "p2p")))
    except _Odd as exc:
        gpus, p2p = (), ()
        if torch.ok:
            torch = replace(torch, ok=False, error=f"odd host_facts answer: {exc}")
    driver = _driver(data.get("driver"))
    try:
        devices = tuple(_device(entry, f"devices[{i}]") for i, entry in enumerate(_list(data, "devices")))
    except _Odd as exc:
        devices = ()
        if driver.ok:
            driver = replace(driver, ok=False, error=f"odd host_facts answer: {exc}")
    try:
        links = data.get("nvlink")
        nvlink = None if links is None else tuple(_peer(e, f"nvlink[{i}]") for i, e in enumerate(_list(data, "nvlink")))
    except _Odd:
        nvlink = None  # an odd answer is no answer: the allreduce check says NVLink is unknown
    return HostFacts(torch, gpus, p2p, driver, devices, environ=_environ(data.get("environ")), nvlink=nvlink)


def shown(value: object, limit: int = 80) -> str:
    """A value of the answer as JSON (never a Python repr), cut at ``limit`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _environ(value: object) -> Mapping[str, str] | None:
    if not isinstance(value, Mapping):  # not told (or told oddly): doctor's own stands in
        return None
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def _torch(value: object) -> TorchFacts:
    if not isinstance(value, Mapping):  # None: the probe did not get that far
        return TorchFacts(ok=False, error=None if value is None else f"odd host_facts answer: torch: {shown(value)}")
    alloc = value.get("alloc_conf")
    reads, evidence = None, None
    if isinstance(alloc, Mapping):
        names = alloc.get("reads")
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            reads = tuple(names)
        evidence = _text(alloc.get("evidence"))
    return TorchFacts(
        value.get("ok") is True,
        _text(value.get("version")),
        _text(value.get("cuda")),
        _text(value.get("error")),
        _text(value.get("path")),
        reads,
        evidence,
    )


def _driver(value: object) -> DriverFacts:
    if not isinstance(value, Mapping):  # None: the probe did not get that far
        return DriverFacts(ok=False, error=None if value is None else f"odd host_facts answer: driver: {shown(value)}")
    return DriverFacts(value.get("ok") is True, _text(value.get("module")), _text(value.get("error")))


def _gpu(entry: object, where: str) -> Gpu:
    fields = _mapping(entry, where)
    name = fields.get("name")
    if not isinstance(name, str):
        raise _Odd(f"{where}.name: {shown(name)}")
    capability = fields.get("capability")
    if not isinstance(capability, list) or len(capability) != 2:
        raise _Odd(f"{where}.capability: {shown(capability)}")
    major, minor = (_int(part, f"{where}.capability") for part in capability)
    uuid = fields.get("uuid")
    return Gpu(
        _int(fields.get("index"), f"{where}.index"), name, (major, minor), uuid if isinstance(uuid, str) else None
    )


def _peer(entry: object, where: str) -> PeerAccess:
    if not isinstance(entry, list) or len(entry) != 3:
        raise _Odd(f"{where}: {shown(entry)}")
    source, target, ok = entry
    return PeerAccess(_int(source, where), _int(target, where), _flag(ok, where))


def _device(entry: object, where: str) -> DeviceFacts:
    fields = _mapping(entry, where)
    return DeviceFacts(
        _int(fields.get("index"), f"{where}.index"),
        _flag(fields.get("multicast"), f"{where}.multicast"),
        _flag(fields.get("gdr_vmm"), f"{where}.gdr_vmm"),
    )


def _list(data: Mapping[str, object], key: str) -> Sequence[object]:
    value = data.get(key)
    if value is None:  # the probe did not get that far
        return []
    if not isinstance(value, list):
        raise _Odd(f"{key}: {shown(value)}")
    return value


def _mapping(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise _Odd(f"{where}: {shown(value)}")
    return value


def _int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Odd(f"{where}: {shown(value)}")
    return value


def _flag(value: object, where: str) -> bool:
    """A yes/no the probe writes as a bool (peer access) or as a 0/1 attribute value."""
    if not isinstance(value, int):  # bool is an int
        raise _Odd(f"{where}: {shown(value)}")
    return bool(value)


def _text(value: object) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class TorchView:
    """How many of nvidia-smi's GPUs torch sees in the serving interpreter, which it does
    not, and why."""

    listed: int  # nvidia-smi's GPUs
    seen: int  # torch's
    hidden: tuple[Gpu, ...] | None  # None: which ones cannot be told
    why: str
    explained: bool | None  # whether the variable accounts for every hidden GPU; None: cannot tell


def torch_view(host: Host) -> TorchView | None:
    """None where there is nothing to compare: nvidia-smi or torch did not answer, or torch
    sees every GPU nvidia-smi lists."""
    listed = host.gpus.gpus
    if not host.gpus.answered or not listed or not host.facts.torch_answered:
        return None
    seen = host.facts.gpus
    if len(seen) >= len(listed):
        return None
    env = host.serving_env
    value = env.get(VARIABLE)
    selection = select(value, listed, env.get("CUDA_DEVICE_ORDER"))
    hidden: tuple[Gpu, ...] | None = None
    if seen and all(t.uuid for t in seen) and all(g.uuid for g in listed):
        hidden = tuple(g for g in listed if not any(same_uuid(g.uuid, t.uuid) for t in seen))
    elif selection.gpus is not None and len(selection.gpus) == len(seen):
        hidden = tuple(g for g in listed if g not in selection.gpus)
    elif not seen:
        hidden = tuple(listed)
    explained = None if selection.gpus is None else len(selection.gpus) == len(seen)
    if value is None:
        error = host.facts.torch.error
        why = (
            f"{VARIABLE} is not set in {host.python}: its CUDA runtime lists fewer GPUs than the driver "
            f"(a GPU in a bad state, a container limiting devices, or a driver/runtime mismatch)"
            + (f"; torch said: {error}" if error else "")
        )
    elif explained:
        why = selection.why
    elif explained is None:
        why = f"{selection.why}; torch sees {len(seen)}"
    else:
        why = f"{selection.why}; yet torch sees {len(seen)}: something else hides GPUs too"
    return TorchView(len(listed), len(seen), hidden, why, explained)
