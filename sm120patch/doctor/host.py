"""The host, typed: what ``host_facts`` answers in the serving interpreter, and nvidia-smi.

``run_host_facts`` runs the probe and parses its JSON answer into ``HostFacts``.  A probe
that fails is an answer (``HostFacts.error``); so is one whose answer has a field missing
or of another type: the part it spoils (torch's GPUs and peer access, or the driver's
devices) reads as not answered, saying what was odd.  Parsing never raises.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace

from sm120patch.doctor.gpus import Gpu, GpuReport, from_nvidia_smi
from sm120patch.probes import host_facts, run_script


@dataclass(frozen=True)
class TorchFacts:
    """``import torch`` in the serving interpreter.  ``ok`` with an ``error``: torch imported,
    but listing the GPUs or their peer access failed part way."""

    ok: bool
    version: str | None = None
    cuda: str | None = None
    error: str | None = None


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
    driver bindings."""

    torch: TorchFacts = TorchFacts(ok=False)
    gpus: tuple[Gpu, ...] = ()
    p2p: tuple[PeerAccess, ...] = ()
    driver: DriverFacts = DriverFacts(ok=False)
    devices: tuple[DeviceFacts, ...] = ()
    error: str | None = None  # why the probe gave no answer at all

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
    CUDA driver bindings say (``host_facts``), and the allocator's setting."""

    gpus: GpuReport
    facts: HostFacts
    python: str
    alloc_conf: str | None  # PYTORCH_CUDA_ALLOC_CONF

    def visible_gpus(self) -> tuple[tuple[Gpu, ...], str]:
        """The GPUs and who listed them: nvidia-smi first; torch in the serving interpreter
        when nvidia-smi gives nothing."""
        if self.gpus.answered:
            return self.gpus.gpus, self.gpus.source
        torch = self.facts.torch
        answer = "answered" if torch.ok else f"did not answer: {torch.error or self.facts.error}"
        return self.facts.gpus, f"{self.gpus.source} ({self.gpus.error}); torch.cuda in {self.python} ({answer})"


def read_host(python: str, env: Mapping[str, str] | None = None) -> Host:
    env = os.environ if env is None else env
    return Host(from_nvidia_smi(), run_host_facts(python), python, env.get("PYTORCH_CUDA_ALLOC_CONF"))


def run_host_facts(python: str, timeout: float = 120.0) -> HostFacts:
    """Run ``host_facts`` in the serving interpreter; a failure is part of the answer."""
    try:
        proc = run_script(python, host_facts.__file__, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return HostFacts(error=f"could not run {python} ({exc})")
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        last = (proc.stderr.strip() or f"exit {proc.returncode}").splitlines()[-1]
        return HostFacts(error=f"{python} {host_facts.__file__} gave no answer: {last}")
    if not isinstance(data, dict):
        return HostFacts(error=f"{python} {host_facts.__file__} answered a JSON {type(data).__name__}, not an object")
    return parse_host_facts(data)


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
    return HostFacts(torch, gpus, p2p, driver, devices)


def _torch(value: object) -> TorchFacts:
    if not isinstance(value, Mapping):  # None: the probe did not get that far
        return TorchFacts(ok=False, error=None if value is None else f"odd host_facts answer: torch: {value!r}")
    return TorchFacts(
        value.get("ok") is True, _text(value.get("version")), _text(value.get("cuda")), _text(value.get("error"))
    )


def _driver(value: object) -> DriverFacts:
    if not isinstance(value, Mapping):  # None: the probe did not get that far
        return DriverFacts(ok=False, error=None if value is None else f"odd host_facts answer: driver: {value!r}")
    return DriverFacts(value.get("ok") is True, _text(value.get("module")), _text(value.get("error")))


def _gpu(entry: object, where: str) -> Gpu:
    fields = _mapping(entry, where)
    name = fields.get("name")
    if not isinstance(name, str):
        raise _Odd(f"{where}.name: {name!r}")
    capability = fields.get("capability")
    if not isinstance(capability, list) or len(capability) != 2:
        raise _Odd(f"{where}.capability: {capability!r}")
    major, minor = (_int(part, f"{where}.capability") for part in capability)
    return Gpu(_int(fields.get("index"), f"{where}.index"), name, (major, minor))


def _peer(entry: object, where: str) -> PeerAccess:
    if not isinstance(entry, list) or len(entry) != 3:
        raise _Odd(f"{where}: {entry!r}")
    source, target, ok = entry
    return PeerAccess(_int(source, where), _int(target, where), _flag(ok, where))


def _device(entry: object, where: str) -> DeviceFacts:
    fields = _mapping(entry, where)
    return DeviceFacts(
        _int(fields.get("index"), f"{where}.index"),
        _flag(fields.get("multicast"), f"{where}.multicast"),
        _flag(fields.get("gdr_vmm"), f"{where}.gdr_vmm"),
    )


def _list(data: Mapping[str, object], key: str) -> list[object]:
    value = data.get(key)
    if value is None:  # the probe did not get that far
        return []
    if not isinstance(value, list):
        raise _Odd(f"{key}: {value!r}")
    return value


def _mapping(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise _Odd(f"{where}: {value!r}")
    return value


def _int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Odd(f"{where}: {value!r}")
    return value


def _flag(value: object, where: str) -> bool:
    """A yes/no the probe writes as a bool (peer access) or as a 0/1 attribute value."""
    if not isinstance(value, int):  # bool is an int
        raise _Odd(f"{where}: {value!r}")
    return bool(value)


def _text(value: object) -> str | None:
    return None if value is None else str(value)
