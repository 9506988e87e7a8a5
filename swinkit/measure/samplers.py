"""CPU utilisation (psutil: a rank and its loader workers) and GPU utilisation (NVML).

NVML numbers every GPU of the node in PCI order and ignores ``CUDA_VISIBLE_DEVICES``, while
CUDA numbers only the visible ones (fastest first by default). Under SLURM or on a shared node
(``CUDA_VISIBLE_DEVICES=4,5``) NVML's device 0 is another job's GPU, so the sampler finds the
NVML device that CUDA calls ``i`` by its UUID (then by PCI bus id), never by the bare index
unless visibility is the identity (:func:`nvml_handle`).
"""
from __future__ import annotations

import os
import threading
import time
import warnings

import psutil


class CpuUsage:
    """CPU seconds used by this process and its children (loader workers) over a window."""

    def __init__(self):
        self.proc = psutil.Process(os.getpid())

    def _cpu_seconds(self) -> float:
        total = 0.0
        for p in [self.proc, *self.proc.children(recursive=True)]:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass  # a worker that exited between listing and reading
        return total

    def start(self) -> None:
        self._t0, self._c0 = time.perf_counter(), self._cpu_seconds()

    def stop(self) -> dict:
        wall = time.perf_counter() - self._t0
        used = self._cpu_seconds() - self._c0
        return {"cpu_seconds": used, "wall_seconds": wall,
                "cores_busy": used / wall if wall > 0 else None,
                "percent_of_one_core": 100 * used / wall if wall > 0 else None}


# ----------------------------------------------------------------- CUDA index -> NVML device

def uuid_candidates(uuid) -> list[str]:
    """The NVML spellings of a CUDA device UUID. torch prints it bare
    (``6a3c...-...``); NVML names a GPU ``GPU-<uuid>`` and a MIG instance ``MIG-<uuid>``.
    Bytes (older drivers and bindings) are decoded; a prefix already there is kept."""
    text = (uuid.decode() if isinstance(uuid, bytes) else str(uuid)).strip()
    if not text:
        raise ValueError("uuid is empty")
    if text[:4].upper() in ("GPU-", "MIG-"):
        return [text]
    return [f"GPU-{text}", f"MIG-{text}"]


def pci_bus_id(props) -> str | None:
    """``domain:bus:device.function`` in hex as NVML writes it (``NVML_DEVICE_PCI_BUS_ID_FMT``),
    the form it looks a device up by; None when torch's properties lack the PCI fields."""
    fields = [getattr(props, f, None) for f in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if any(v is None for v in fields):
        return None
    domain, bus, device = fields
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def visibility_is_identity(env) -> bool:
    """True when CUDA's device i is the node's device i by the environment: no
    ``CUDA_VISIBLE_DEVICES``, or one listing ``0, 1, ...`` in order."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return True
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    return entries == [str(i) for i in range(len(entries))]


def _by_uuid(nvml, uuid: str):
    """Newer bindings take str; older ones pass the argument to ctypes as it is and need bytes."""
    try:
        return nvml.nvmlDeviceGetHandleByUUID(uuid)
    except TypeError:
        return nvml.nvmlDeviceGetHandleByUUID(uuid.encode())


def nvml_handle(nvml, cuda_index: int, props, env=os.environ) -> tuple[object, dict]:
    """The NVML handle of the device CUDA calls ``cuda_index``, and how it was found.

    Args:
        nvml: the ``pynvml`` module (initialised), or a stand-in with the same functions.
        props: ``torch.cuda.get_device_properties(cuda_index)`` (``uuid``, PCI ids), or None.
        env: the environment whose ``CUDA_VISIBLE_DEVICES`` decides whether the bare index
            may be trusted.

    Returns:
        (handle, {"cuda_index", "lookup": "uuid" | "pci_bus_id" | "index", "id"}).

    Raises:
        LookupError: no lookup found the device (the message lists what was tried).
    """
    tried = []
    uuid = getattr(props, "uuid", None)
    for candidate in uuid_candidates(uuid) if uuid is not None else []:
        try:
            return _by_uuid(nvml, candidate), {"cuda_index": cuda_index, "lookup": "uuid",
                                               "id": candidate}
        except nvml.NVMLError as exc:
            tried.append(f"uuid {candidate}: {exc}")
    bus = pci_bus_id(props) if props is not None else None
    if bus is not None:
        try:
            return nvml.nvmlDeviceGetHandleByPciBusId(bus), {"cuda_index": cuda_index,
                                                             "lookup": "pci_bus_id", "id": bus}
        except nvml.NVMLError as exc:
            tried.append(f"PCI bus id {bus}: {exc}")
    if visibility_is_identity(env):
        return nvml.nvmlDeviceGetHandleByIndex(cuda_index), {"cuda_index": cuda_index,
                                                             "lookup": "index", "id": cuda_index}
    tried.append(f"index {cuda_index}: not used, CUDA_VISIBLE_DEVICES="
                 f"{env.get('CUDA_VISIBLE_DEVICES')!r} renumbers the devices")
    raise LookupError(f"no NVML device found for CUDA device {cuda_index} ({'; '.join(tried)})")


def _cuda_properties(index: int):
    import torch
    return torch.cuda.get_device_properties(index)


class NvmlSampler:
    """Samples GPU utilisation and memory every ``interval_s`` in a thread. Without NVML (no
    GPU, no driver, call not supported) every figure is None and one warning is issued.

    Args:
        device_index: the CUDA device index (as ``torch.cuda`` numbers it).
        nvml, properties: stand-ins for ``pynvml`` and ``torch.cuda.get_device_properties``
            (tests; default: the real ones).
    """

    def __init__(self, device_index: int = 0, interval_s: float = 0.1, *, nvml=None,
                 properties=None, env=os.environ):
        self.index, self.interval = device_index, interval_s
        self.samples: list[tuple[float, float]] = []
        self.error: str | None = None
        self.device: dict | None = None
        self._stop = threading.Event()
        self._thread = None
        try:
            if nvml is None:
                import pynvml as nvml
            nvml.nvmlInit()
            props = (properties or _cuda_properties)(device_index)
            self._handle, self.device = nvml_handle(nvml, device_index, props, env)
            self._nvml = nvml
        except Exception as exc:  # NVMLError subclasses, ImportError, no CUDA, LookupError
            self._nvml = None
            self.error = f"NVML unavailable: {exc}"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
                mem = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
                self.samples.append((float(util.gpu), mem.used / 2**20))
            except Exception as exc:  # NVMLError_NotSupported on some devices (MIG)
                self.error = f"NVML query failed: {exc}"
                return
            self._stop.wait(self.interval)

    def start(self) -> None:
        if self._nvml is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def stop(self) -> dict:
        if self._thread:
            self._stop.set()
            self._thread.join()
        out = {"gpu_util_percent": None, "gpu_mem_used_mib": None, "nvml_error": self.error,
               "nvml_device": self.device}
        if not self.samples:
            if self.error:
                warnings.warn(f"GPU utilisation not recorded ({self.error})", stacklevel=2)
            return out
        util = [s[0] for s in self.samples]
        return dict(out, gpu_util_percent=sum(util) / len(util),
                    gpu_mem_used_mib=max(s[1] for s in self.samples))


class NvmlSamplers:
    """One :class:`NvmlSampler` per CUDA device, for a process that drives several
    (DataParallel): ``stop`` reports each device under its CUDA index, and the mean
    utilisation and largest memory over them in the single-device keys."""

    def __init__(self, device_indices, interval_s: float = 0.1, **kw):
        self.samplers = {i: NvmlSampler(i, interval_s, **kw) for i in device_indices}
        if not self.samplers:
            raise ValueError("device_indices is empty: no device to sample")

    def start(self) -> None:
        for s in self.samplers.values():
            s.start()

    def stop(self) -> dict:
        with warnings.catch_warnings(record=True) as caught:  # one warning, not one per device
            warnings.simplefilter("always")
            devices = {str(i): s.stop() for i, s in self.samplers.items()}
        utils = [d["gpu_util_percent"] for d in devices.values()]
        mems = [d["gpu_mem_used_mib"] for d in devices.values()
                if d["gpu_mem_used_mib"] is not None]
        errors = [f"device {i}: {d['nvml_error']}" for i, d in devices.items() if d["nvml_error"]]
        if caught:
            warnings.warn(f"GPU utilisation not recorded ({'; '.join(errors)})", stacklevel=2)
        return {"gpu_util_percent": None if None in utils else sum(utils) / len(utils),
                "gpu_mem_used_mib": max(mems) if mems else None,
                "nvml_error": "; ".join(errors) or None, "devices": devices}
