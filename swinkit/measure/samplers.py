"""CPU utilisation (psutil: a rank and its loader workers) and GPU utilisation (NVML)."""
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


class NvmlSampler:
    """Samples GPU utilisation and memory every ``interval_s`` in a thread. Without NVML (no
    GPU, no driver, call not supported) every figure is None and one warning is issued."""

    def __init__(self, device_index: int = 0, interval_s: float = 0.1):
        self.index, self.interval = device_index, interval_s
        self.samples: list[tuple[float, float]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = None
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        except Exception as exc:  # NVMLError subclasses, ImportError, OSError without a driver
            self._nvml = None
            self.error = f"NVML unavailable: {exc}"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
                mem = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
                self.samples.append((float(util.gpu), mem.used / 2**20))
            except Exception as exc:  # NVMLError_NotSupported on some devices
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
        if not self.samples:
            if self.error:
                warnings.warn(f"GPU utilisation not recorded ({self.error})", stacklevel=2)
            return {"gpu_util_percent": None, "gpu_mem_used_mib": None, "nvml_error": self.error}
        util = [s[0] for s in self.samples]
        return {"gpu_util_percent": sum(util) / len(util),
                "gpu_mem_used_mib": max(s[1] for s in self.samples), "nvml_error": self.error}
