"""Injected delays measure what they inject, and their side streams are made once.

A sleep kernel is calibrated once before the run, but under load the SM clock moves, so the
delay it gives is not the one asked for: every injected call is timed where it runs, and the
measured seconds, filed by iteration, are the ground truth. The CPU paths (a spin timed by the
host clock, the launcher thread's wait) run here; the CUDA event path runs with fake events
here and for real under ``pytest -m gpu``.

Side streams (comm delays, the contention load) must never be a communicator's stream: each is
made once per device and name from the high-priority pool. A fake stream factory counts the
draws however many buckets and iterations run.
"""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
import torch

from swinkit.measure.contention import (HIGH_PRIORITY, POOL_SIZE, SIDE_STREAMS, CommLoad,
                                        SideStreams, load_stream)
from swinkit.injection import Injection
from swinkit.rank.delays import (GATE, CudaSleep, DelayMeter, HostSpin, calibrate_sleep_rate,
                                      per_iteration)
from swinkit.rank.inject import add_backward_delay, add_compute_delay, add_optimizer_delay
from swinkit.rank.inject_comm import CudaDelayedLaunch, ThreadDelayedLaunch

REQUESTED_S = 0.02


@pytest.fixture(autouse=True)
def gate():
    """Every test starts with the gate open and no iteration, and leaves it so."""
    GATE.on, GATE.iteration = True, None
    yield GATE
    GATE.on, GATE.iteration = True, None


class FakeFactory:
    """A stream factory that records its calls and returns a fresh token per call."""

    def __init__(self):
        self.calls: list[tuple] = []

    def __call__(self, device, priority):
        self.calls.append((device, priority))
        return object()


# ---------------------------------------------------------------- measured amounts (CPU)

def test_a_host_spin_measures_at_least_the_request_and_at_most_the_outer_span(gate):
    gate.iteration = 7
    spin = HostSpin(REQUESTED_S)
    before = time.perf_counter()
    spin()
    outer = time.perf_counter() - before
    [(iteration, seconds)] = spin.meter.take()
    assert iteration == 7
    assert REQUESTED_S * 0.9 <= seconds <= outer
    assert spin.meter.take() == []  # taken once


class Backboned(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Linear(2, 2)

    def forward(self, x):
        return self.backbone(x)


def test_the_compute_hook_files_each_injected_forward_under_its_iteration(gate):
    model = Backboned()
    delay = add_compute_delay(model, Injection(compute_ms=REQUESTED_S * 1e3, every=2), rank=0,
                              cuda=False)
    x = torch.ones(1, 2)
    spans = {}
    for n in range(4):
        gate.on, gate.iteration = n % 2 == 0, n
        before = time.perf_counter()
        out = model(x)
        spans[n] = time.perf_counter() - before
        # the hook leaves the inputs alone (not model.backbone(x): that would fire it again)
        assert torch.equal(out, torch.nn.functional.linear(x, model.backbone.weight,
                                                           model.backbone.bias))
    measured = delay.take_measured()
    assert [it for it, _ in measured] == [0, 2]
    seconds = per_iteration(measured, [0, 1, 2, 3])
    assert seconds[1] == seconds[3] == 0.0
    for n in (0, 2):
        assert REQUESTED_S * 0.9 <= seconds[n] <= spans[n]
    assert delay.take_measured_s() == 0.0


def test_no_compute_injection_gives_no_hook():
    model = Backboned()
    assert add_compute_delay(model, Injection(comm_ms=5), rank=0, cuda=False) is None
    assert add_compute_delay(model, Injection(compute_ms=5, ranks=(1,)), rank=0, cuda=False) is None
    assert not model.backbone._forward_pre_hooks


class FakeEvent:
    """A CUDA timing event stand-in: ``at`` ms on the device clock, synchronisations counted."""

    def __init__(self, at_ms: float):
        self.at_ms, self.synchronized = at_ms, 0

    def synchronize(self):
        self.synchronized += 1

    def elapsed_time(self, other) -> float:
        return other.at_ms - self.at_ms


def test_cuda_event_pairs_are_read_when_taken_not_when_recorded():
    meter = DelayMeter()
    start, stop = FakeEvent(100.0), FakeEvent(112.5)
    meter.add_events(3, start, stop)
    meter.add_seconds(4, 0.25)
    assert stop.synchronized == 0  # recording waits for nothing
    assert meter.take() == [(3, 0.0125), (4, 0.25)]
    assert stop.synchronized == 1


def test_per_iteration_sums_the_calls_of_each_iteration():
    measured = [(0, 0.5), (0, 0.25), (2, 0.125), (None, 1.0)]  # None: outside the loop
    assert per_iteration(measured, [0, 1, 2]) == [0.75, 0.0, 0.125]


def test_the_cpu_comm_delay_measures_ready_to_launch(one_rank_group, gate):
    delay_s = REQUESTED_S
    launch = ThreadDelayedLaunch(delay_s)
    group = torch.distributed.group.WORLD
    clock = SimpleNamespace(now=time.perf_counter)
    spans = {}
    for n in range(3):
        gate.on, gate.iteration = n != 1, n
        tensor = torch.full((4,), 2.0)
        record = SimpleNamespace(name="bucket0", arrive=None)
        before = time.perf_counter()
        fut = launch(SimpleNamespace(buffer=lambda t=tensor: t), group, record, clock)
        fut.wait()
        spans[n] = time.perf_counter() - before
        assert torch.equal(fut.value(), torch.full((4,), 2.0))  # divided by 1, summed over 1
    measured = launch.take_measured()
    assert [it for it, _ in measured] == [0, 2]  # the clean iteration injected nothing
    for it, seconds in measured:
        assert delay_s * 0.9 <= seconds <= spans[it]


# ---------------------------------------------------------------- calibration

class RampingSleep:
    """A sleep whose clock runs at ``cold`` cycles/s for the first ``ramp_s`` seconds of load,
    then at ``warm`` (an idle GPU boosting): returns the seconds each sleep took."""

    def __init__(self, cold=1e9, warm=2e9, ramp_s=0.05):
        self.cold, self.warm, self.ramp_s = cold, warm, ramp_s
        self.busy_s = 0.0
        self.sleeps: list[tuple[float, float]] = []  # (busy before, seconds)

    def __call__(self, cycles: int) -> float:
        cold_left = max(self.ramp_s - self.busy_s, 0.0)
        cold_cycles = min(cycles, cold_left * self.cold)
        took = cold_cycles / self.cold + (cycles - cold_cycles) / self.warm
        self.sleeps.append((self.busy_s, took))
        self.busy_s += took
        return took


def test_calibration_measures_the_clock_after_at_least_100_ms_of_warm_up():
    device = RampingSleep()
    rate = calibrate_sleep_rate(device)
    assert rate == pytest.approx(2e9, rel=1e-9)  # the warm clock; a cold probe gives 1e9
    busy_before_last, last = device.sleeps[-1]
    assert busy_before_last >= 0.1
    assert last == pytest.approx(0.1, rel=1e-6)  # the measured sleep itself lasts ~100 ms


def test_calibration_rejects_a_sleep_that_took_no_time():
    with pytest.raises(ValueError, match="2000000 cycles took 0.0 s"):
        calibrate_sleep_rate(lambda cycles: 0.0)


# ---------------------------------------------------------------- side streams

def test_comm_delay_streams_are_drawn_once_per_device_and_bucket_from_the_high_priority_pool():
    factory = FakeFactory()
    launch = CudaDelayedLaunch(0.01, sleep=HostSpin(0.0), streams=SideStreams(factory))
    devices = [torch.device("cuda", 0), torch.device("cuda", 1)]
    first = {}
    for _ in range(5):  # iterations
        for device in devices:
            for b in range(20):  # buckets, as in the thesis preset
                stream = launch.side_stream(f"bucket{b}", device)
                assert first.setdefault((device, b), stream) is stream
    assert len(factory.calls) == 40
    # torch's high-priority pool is priority -1 (NCCL and future callbacks draw from the other)
    assert sorted(factory.calls, key=str) == sorted(
        [(d, -1) for d in devices for _ in range(20)], key=str)
    assert len({id(s) for s in first.values()}) == 40


def test_side_streams_are_shared_by_default_and_named_apart():
    assert CudaDelayedLaunch(0.01, sleep=HostSpin(0.0)).streams is SIDE_STREAMS
    factory = FakeFactory()
    streams = SideStreams(factory)
    cuda0 = torch.device("cuda", 0)
    launch = CudaDelayedLaunch(0.01, sleep=HostSpin(0.0), streams=streams)
    assert load_stream(cuda0, streams) is not launch.side_stream("bucket0", cuda0)
    assert load_stream(cuda0, streams) is load_stream(cuda0, streams)
    assert factory.calls == [(cuda0, HIGH_PRIORITY), (cuda0, HIGH_PRIORITY)]


def test_the_load_stream_is_drawn_once_per_device_and_none_on_cpu(one_rank_group):
    factory = FakeFactory()
    streams = SideStreams(factory)
    for _ in range(3):
        load_stream(torch.device("cuda", 1), streams)
    assert factory.calls == [(torch.device("cuda", 1), HIGH_PRIORITY)]
    assert load_stream(torch.device("cpu"), streams) is None
    load = CommLoad([[4]], torch.float32, torch.device("cpu"), streams=streams)
    load.finish()
    load.start()
    load.join_or_raise(timeout_s=30)
    assert len(load.rounds) == 1 and len(factory.calls) == 1


def test_the_load_rounds_are_timed_by_device_events_where_given(one_rank_group):
    """On GPU a round under load is read from events on its stream, as the round alone it is
    divided by (event_timed): a host clock would add a launch and a wake-up to each. Stand-in
    events 7 ms apart: every round reads 7 ms, whatever the host clock says."""
    class Event:
        clock = [0.0]

        def record(self):
            Event.clock[0] += 7.0
            self.at = Event.clock[0]

        def elapsed_time(self, other):
            return other.at - self.at

    load = CommLoad([[4], [8]], torch.float32, torch.device("cpu"), events=Event)
    load.finish()
    load.start()
    load.join_or_raise(timeout_s=30)
    assert load.rounds == [0.007]


def test_more_side_streams_than_the_pool_holds_warn_once():
    streams = SideStreams(FakeFactory())
    cuda0 = torch.device("cuda", 0)
    for b in range(POOL_SIZE):
        streams.get(cuda0, f"bucket{b}")
    with pytest.warns(RuntimeWarning, match=f"more than {POOL_SIZE} side streams"):
        streams.get(cuda0, "one too many")
    streams.get(torch.device("cuda", 1), "bucket0")  # another device has its own pool


def test_side_streams_are_made_once_under_threads():
    factory = FakeFactory()
    streams = SideStreams(factory)
    cuda0 = torch.device("cuda", 0)
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(streams.get(cuda0, "x")))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(factory.calls) == 1 and len({id(s) for s in got}) == 1


# ---------------------------------------------------------------- the real CUDA paths

@pytest.mark.gpu
@pytest.mark.skipif("not torch.cuda.is_available()", reason="needs a CUDA GPU")
def test_gpu_a_sleep_kernel_measures_itself_with_events(gate):
    sleep = CudaSleep(REQUESTED_S)
    torch.cuda.synchronize()
    gate.iteration = 5
    before = time.perf_counter()
    sleep()
    torch.cuda.synchronize()
    outer = time.perf_counter() - before
    [(iteration, seconds)] = sleep.meter.take()
    assert iteration == 5
    assert 0.5 * REQUESTED_S <= seconds <= outer  # calibrated near the request, never beyond


@pytest.mark.gpu
@pytest.mark.skipif("not torch.cuda.is_available()", reason="needs a CUDA GPU")
def test_gpu_side_streams_are_high_priority_and_never_a_default_pool_stream():
    streams = SideStreams()
    device = torch.device("cuda", torch.cuda.current_device())
    side = streams.get(device, "bucket0")
    assert side.priority < torch.cuda.Stream(device=device).priority
    # more default-pool draws than the pool holds: every one of its streams, NCCL's among them
    pool = [torch.cuda.Stream(device=device) for _ in range(2 * POOL_SIZE)]
    assert all(s != side for s in pool)
    assert all(streams.get(device, "bucket0") is side for _ in range(3))
    assert load_stream(device, streams) != side


@pytest.mark.gpu
@pytest.mark.skipif("not torch.cuda.is_available()", reason="needs a CUDA GPU")
def test_gpu_comm_delay_measures_each_bucket_sleep(tmp_path, gate):
    import torch.distributed as dist
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        launch = CudaDelayedLaunch(REQUESTED_S, streams=SideStreams())
        clock = SimpleNamespace(now=time.perf_counter)
        torch.cuda.synchronize()
        before = time.perf_counter()
        for n in range(3):
            gate.on, gate.iteration = n != 1, n
            for b in range(2):
                tensor = torch.full((1024,), 3.0, device="cuda")
                record = SimpleNamespace(name=f"bucket{b}", arrive=None)
                fut = launch(SimpleNamespace(buffer=lambda t=tensor: t), dist.group.WORLD,
                             record, clock)
                fut.wait()
        torch.cuda.synchronize()
        outer = time.perf_counter() - before
        measured = launch.take_measured()
        assert [it for it, _ in measured] == [0, 0, 2, 2]
        assert all(0.5 * REQUESTED_S <= s <= outer for _, s in measured)
    finally:
        dist.destroy_process_group()


class StagedOnGpu(torch.nn.Module):
    """A backbone with ``stages`` (the backward injection's middle one) and a head."""

    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Module()
        self.backbone.stages = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(3))
        self.head = torch.nn.Linear(64, 1)

    def forward(self, x):
        for stage in self.backbone.stages:
            x = torch.tanh(stage(x))
        return self.head(x).sum()


def _timed_on_stream(fn) -> float:
    """Seconds ``fn``'s work took on the current stream (CUDA events around it)."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / 1e3


@pytest.mark.gpu
@pytest.mark.skipif("not torch.cuda.is_available()", reason="needs a CUDA GPU")
@pytest.mark.parametrize("phase", ["backward", "optimizer"])
def test_gpu_phase_delays_sleep_inside_their_phase_and_measure_it(gate, phase):
    """The sleep kernel runs on the stream the phase's own work runs on (the autograd stream
    inside backward, the current one in the step): the phase's span on that stream, timed by
    events outside the delay's, holds each measured sleep; clean iterations measure none."""
    model = StagedOnGpu().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    injection = Injection(**{f"{phase}_ms": REQUESTED_S * 1e3}, every=2)
    delay = (add_backward_delay(model, injection, rank=0, cuda=True) if phase == "backward"
             else add_optimizer_delay(optimizer, injection, rank=0, cuda=True))
    x = torch.randn(256, 64, device="cuda")
    spans = {}
    for n in range(4):
        gate.on, gate.iteration = n % 2 == 0, n
        loss = model(x)
        backward = _timed_on_stream(loss.backward)
        step = _timed_on_stream(optimizer.step)
        optimizer.zero_grad()
        spans[n] = backward if phase == "backward" else step
    torch.cuda.synchronize()
    measured = delay.take_measured()
    assert [it for it, _ in measured] == [0, 2]
    for it, seconds in measured:
        assert 0.5 * REQUESTED_S <= seconds <= spans[it]  # near the request, inside the phase
    assert max(spans[1], spans[3]) < 0.5 * REQUESTED_S  # the clean ones slept nowhere
