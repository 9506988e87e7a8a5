"""Delays that occupy the compute device and measure what they took, and the gate that turns
injection on per iteration (what :mod:`swinkit.rank.inject` puts into a rank).

A CPU spin never yields the core (a host sleep would free it for the loader and gloo's
threads); a CUDA sleep kernel occupies the stream it is queued on. A sleep kernel counts SM
clock cycles and is calibrated against CUDA events before the run, but under training load the
SM clock moves (boost, power and thermal limits), so each delay is timed where it runs (CUDA
events around the kernel, the host clock around a spin) and handed back per iteration
(:meth:`MeasuredDelay.take_measured`): the ground truth attribution is held to.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable


class Gate:
    """Whether this iteration is injected: the rank loop sets ``on`` at the top of every
    iteration, and every injection point reads it (one per process; the data pipeline's is
    the module's :data:`GATE`, since MMEngine builds transforms from config dicts).

    ``iteration`` is the loop's position, set beside ``on``: each measured delay is filed under
    the iteration that asked for it (a CPU comm delay ends on another thread, a CUDA one on the
    device, both later)."""
    on = True
    iteration: int | None = None


GATE = Gate()


class DelayMeter:
    """The seconds each injected call actually took, filed by iteration, until taken.

    A host-timed call is stored as seconds; a CUDA one as its (start, stop) event pair, read
    only in :meth:`take`, so nothing waits on the device inside a step. Appended from the
    autograd thread and a launcher thread, taken from the loop: hence the lock."""

    def __init__(self):
        self._lock = threading.Lock()
        self._calls: list = []   # (iteration, seconds | (start_event, stop_event))

    def add_seconds(self, iteration: int | None, seconds: float) -> None:
        with self._lock:
            self._calls.append((iteration, seconds))

    def add_events(self, iteration: int | None, start, stop) -> None:
        with self._lock:
            self._calls.append((iteration, (start, stop)))

    def take(self) -> list[tuple[int | None, float]]:
        """``(iteration, seconds)`` per call since the last take, in call order. Waits for
        each CUDA stop event: call it after the loop (or after a synchronize), never inside
        a measured step."""
        with self._lock:
            calls, self._calls = self._calls, []
        return [(it, _seconds(value)) for it, value in calls]


def _seconds(value) -> float:
    if isinstance(value, tuple):
        start, stop = value
        stop.synchronize()  # free once the caller has synchronised
        return start.elapsed_time(stop) / 1e3
    return value


class MeasuredDelay:
    """A delay that times itself (``meter``): what it injected, read after the run."""
    meter: DelayMeter

    def take_measured(self) -> list[tuple[int | None, float]]:
        """``(iteration, seconds)`` per injected call since the last take (see
        :meth:`DelayMeter.take`)."""
        return self.meter.take()

    def take_measured_s(self) -> float:
        """Seconds injected, all calls together, since the last take."""
        return sum(seconds for _, seconds in self.meter.take())


def per_iteration(measured: list[tuple[int | None, float]], positions: list[int]) -> list[float]:
    """Seconds injected in each iteration at ``positions`` (0.0 where nothing was), from
    :meth:`MeasuredDelay.take_measured`'s pairs.

    >>> per_iteration([(0, 0.5), (2, 0.25), (2, 0.25)], [0, 1, 2])
    [0.5, 0.0, 0.5]
    """
    totals: dict = defaultdict(float)
    for iteration, seconds in measured:
        totals[iteration] += seconds
    return [totals.get(n, 0.0) for n in positions]


def spin(seconds: float) -> None:
    """Occupy this thread's core until ``seconds`` of wall time have passed."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


class HostSpin:
    """CPU: spin ``seconds`` on the calling thread, timed by the host clock."""

    def __init__(self, seconds: float, meter: DelayMeter | None = None):
        self.seconds = seconds
        self.meter = DelayMeter() if meter is None else meter

    def __call__(self) -> None:
        start = time.perf_counter()
        spin(self.seconds)
        self.meter.add_seconds(GATE.iteration, time.perf_counter() - start)


class CudaSleep:
    """GPU: a sleep kernel of about ``seconds`` on the current stream, between two CUDA events
    (the measured amount). ``cycles_per_second`` defaults to a fresh calibration."""

    def __init__(self, seconds: float, meter: DelayMeter | None = None,
                 cycles_per_second: float | None = None):
        rate = cuda_sleep_cycles_per_second() if cycles_per_second is None else cycles_per_second
        self.cycles = max(int(seconds * rate), 1)
        self.meter = DelayMeter() if meter is None else meter

    def __call__(self) -> None:
        self.meter.add_events(GATE.iteration, *_cuda_sleep_between_events(self.cycles))


def _cuda_sleep_between_events(cycles: int) -> tuple:
    """Enqueue ``torch.cuda._sleep(cycles)`` between two timing events on the current stream;
    returns the events (nothing waits for them here)."""
    import torch
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    stop.record()
    return start, stop


def calibrate_sleep_rate(timed_sleep: Callable[[int], float], warmup_s: float = 0.1,
                         measure_s: float = 0.1, probe_cycles: int = 2_000_000) -> float:
    """Cycles per second of a clock-counting sleep, as it runs once the clocks have ramped up.

    ``timed_sleep(cycles)`` runs the sleep and returns the seconds it took. A short probe gives
    a first rate; then at least ``warmup_s`` of spinning in chunks (an idle GPU boosts its
    clock only after a while of load, so a ms-long warm-up measures a cold clock); then one
    sleep of about ``measure_s`` gives the rate.
    """
    rate = probe_cycles / _positive(timed_sleep(probe_cycles), probe_cycles)
    spent = 0.0
    while spent < warmup_s:
        chunk = max(int(rate * warmup_s / 4), 1)
        took = _positive(timed_sleep(chunk), chunk)
        rate, spent = chunk / took, spent + took
    cycles = max(int(rate * measure_s), 1)
    return cycles / _positive(timed_sleep(cycles), cycles)


def _positive(seconds: float, cycles: int) -> float:
    if not seconds > 0:
        raise ValueError(f"a sleep of {cycles} cycles took {seconds!r} s: cannot calibrate")
    return seconds


def cuda_sleep_cycles_per_second() -> float:
    """Calibrate ``torch.cuda._sleep`` (it counts SM clock cycles, and clocks vary) against
    CUDA events, after a warm-up (:func:`calibrate_sleep_rate`), before anything is measured."""
    return calibrate_sleep_rate(lambda cycles: _seconds(_cuda_sleep_between_events(cycles)))
