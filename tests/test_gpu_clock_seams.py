"""The GPU-only timing paths driven on CPU through their seams: CUDA-event clocks mapped to
host time, collectives timed by device events, offsets that drift between hosts, and SyncBN's
collectives in the oracle. Every expected value is worked by hand from a fake device whose
timer runs at a known rate against the host clock."""
import pytest

from swinkit.attribution.oracle import simulate
from swinkit.measure.clocks import CudaClock, OffsetLine, map_piecewise
from swinkit.measure.timeline import IterationRecord
from swinkit.measure.timing import event_timed


class FakeDevice:
    """A device timer running ``rate`` times as fast as a host clock that the test moves."""

    def __init__(self, rate: float = 1.0):
        self.rate, self.host, self.syncs = rate, 0.0, 0

    def now(self) -> float:
        return self.host

    def sync(self) -> None:
        self.syncs += 1

    def event(self):
        device = self

        class Event:
            def record(self):
                self.t = device.host * device.rate  # device seconds

            def elapsed_time(self, other):  # ms, as torch.cuda.Event's
                return (other.t - self.t) * 1e3
        return Event()


def test_cuda_clock_follows_a_drifting_device_timer_between_anchors():
    """A device timer 100 ppm fast: one anchor at start-up (the old mapping) would put a mark
    taken at host 50 s at 50.005 s; with a second anchor at the end the line through both maps
    it back to 50 s."""
    dev = FakeDevice(rate=1.0001)
    clock = CudaClock(event_factory=dev.event, synchronize=dev.sync, now=dev.now)
    dev.host = 50.0
    mark = clock.now()
    dev.host = 100.0
    clock.finish()
    assert clock.seconds(mark) == pytest.approx(50.0, abs=1e-9)
    # zero-width anchors, two of them: only the float32 step of the 100.01 s device interval
    assert clock.error_s() == pytest.approx(100.01 * 2.0 ** -24, rel=1e-6)


def test_cuda_clock_error_counts_a_bend_one_line_would_miss():
    """Three anchors at host 0, 10 and 20 whose device times bend (the timer runs 1 % fast in
    the second half only): the middle anchor sits 0.05 s off the line through the ends."""
    dev = FakeDevice()
    clock = CudaClock(event_factory=dev.event, synchronize=dev.sync, now=dev.now)
    dev.host = 10.0
    clock.now()
    clock.anchor()
    dev.rate = 1.0 + 0.01 * (20.0 - 10.0) / 20.0  # device time at host 20: 20.1
    dev.host = 20.0
    clock.now()
    clock.finish()
    # the ends map device 0 -> host 0 and 20.1 -> 20: device 10 maps to 9.950..., 0.0497 off
    # plus the float32 step of the longer device interval, 10.1 s
    assert clock.error_s() == pytest.approx(10.0 - 10.0 * 20.0 / 20.1 + 10.1 * 2.0 ** -24, rel=1e-6)


def test_resolving_twice_adds_no_second_anchor():
    dev = FakeDevice()
    clock = CudaClock(event_factory=dev.event, synchronize=dev.sync, now=dev.now)
    clock.now()
    clock.finish()
    syncs = dev.syncs
    clock.finish()
    assert dev.syncs == syncs


def test_piecewise_map_is_exact_on_the_anchors():
    points = [(0.0, 5.0), (2.0, 7.0), (3.0, 9.0)]
    assert [map_piecewise(points, x) for x, _ in points] == [5.0, 7.0, 9.0]


def test_an_offset_line_moves_marks_by_the_offset_at_their_own_time():
    """Across hosts the offset is applied as it was when the mark was taken: 10 ms at the
    start, 12 ms at the end of a 100 s run."""
    record = IterationRecord(marks=[("start", 100.0), ("forward", 150.0), ("backward", 200.0)])

    class Host:
        def seconds(self, mark, near=None):
            return mark
    resolved = record.resolve(Host(), OffsetLine(100.0, 0.010, 200.0, 0.012))
    assert [t for _, t in resolved["marks"]] == pytest.approx([99.990, 149.989, 199.988])
    assert [t for _, t in record.resolve(Host(), 0.010)["marks"]] == pytest.approx(
        [99.990, 149.990, 199.990])


def test_event_timed_reads_each_call_between_its_events_with_one_sync_a_side():
    dev = FakeDevice()

    def work(seconds):
        def run():
            dev.host += seconds
        return run
    times = event_timed([work(0.001), work(0.002), work(0.004)], dev.event, dev.sync)
    assert times == pytest.approx([0.001, 0.002, 0.004])
    assert dev.syncs == 2


def _rank(rank, fwd):
    phases = {"data_wait": 0.0, "forward": fwd, "backward": 0.5, "exposed_comm": 0.0,
              "optimizer": 0.0, "other": 0.0}
    return {"rank": rank, "positions": [{"phases_s": phases, "bucket_ready_s": []}]}


def test_oracle_puts_syncbn_collectives_back_as_a_barrier_at_the_end_of_forward():
    """Two ranks, forward 1.0 s and 1.2 s, backward 0.5 s, nothing else. Without SyncBN each
    runs its own cycle and the slower one sets the period: 1.7 s. SyncBN's gathers (0.1 s)
    hold both until the slower forward ends: 1.2 + 0.1, then backward 0.5 + 0.05 of
    all-reduces: 1.85 s. (The barrier itself shows in the next case.)"""
    costs = {"world_size": 2, "grad_accum": 1, "ranks": [_rank(0, 1.0), _rank(1, 1.2)],
             "bucket_comm_s": [], "broadcast_s": 0.0, "buffer_sync": False}
    assert simulate(costs)["predicted_iter_s"] == pytest.approx(1.7)
    costs["sync_bn_s"] = {"forward": 0.1, "backward": 0.05}
    assert simulate(costs)["predicted_iter_s"] == pytest.approx(1.85)


def test_oracle_syncbn_barrier_makes_alternating_stragglers_cost_every_iteration():
    """The stragglers alternate (iteration i: rank i % 2 takes 1.2 s of forward, the other
    1.0 s). Unsynchronised, each rank averages (1.2 + 1.0) / 2 + 0.5 = 1.6 s per iteration
    (the steps' periods alternate 1.5 and 1.7; 9 samples leave 8 after the first, median 1.6).
    Held at SyncBN's gather, every iteration waits for its slow rank: 1.2 + 0.1 + 0.5 + 0.05 =
    1.85 s; adding SyncBN's time without the barrier would give 1.75."""
    def rank(r):
        samples = [{"phases_s": {**_rank(r, 1.2 if i % 2 == r else 1.0)["positions"][0]["phases_s"]},
                    "bucket_ready_s": []} for i in range(9)]
        base = _rank(r, 1.1)
        base["positions"][0]["samples"] = samples
        return base
    costs = {"world_size": 2, "grad_accum": 1, "ranks": [rank(0), rank(1)],
             "bucket_comm_s": [], "broadcast_s": 0.0, "buffer_sync": False}
    assert simulate(costs)["predicted_iter_s"] == pytest.approx(1.6)
    costs["sync_bn_s"] = {"forward": 0.1, "backward": 0.05}
    assert simulate(costs)["predicted_iter_s"] == pytest.approx(1.85)


class Float32Device(FakeDevice):
    """cudaEventElapsedTime's float32 milliseconds: what a real device timer hands back."""

    def event(self):
        import numpy as np
        inner = super().event()

        class Event:
            def record(self):
                inner.record()
                self.t = inner.t

            def elapsed_time(self, other):
                return float(np.float32((other.t - self.t) * 1e3))
        return Event()


def test_marks_within_an_iteration_keep_microseconds_late_in_a_long_run():
    """600 s into a run a float32 interval from the first anchor has a 61 us step (2**-24 of
    600 000 ms, rounded to a power of two): a 3 us collective late in the run read that way
    comes out 0 or 61 us. Read from its iteration's start it stays 3 us, and the mapping's
    error bound counts the step of the start's own interval."""
    from swinkit.measure.timeline import Timeline
    dev = Float32Device()
    clock = CudaClock(event_factory=dev.event, synchronize=dev.sync, now=dev.now)
    timeline = Timeline(clock)
    dev.host = 600.000001
    timeline.begin()
    dev.host += 0.000100
    record = timeline.collective("x.fwd", blocking=True, arrive=clock.now())
    dev.host += 0.000003
    record.done = clock.now()
    timeline.mark("forward")
    dev.host = 601.0
    (it,) = timeline.resolve()
    (c,) = it["collectives"]
    assert c["done"] - c["arrive"] == pytest.approx(3e-6, abs=2e-7)
    assert it["marks"][0][1] == pytest.approx(600.000001, abs=1e-4)
    assert clock.error_s() >= 601.0 * 2.0 ** -24


def test_cold_event_timing_starts_after_the_arrival_all_reduce(one_rank_group):
    """The GPU path of a cold collective: the start event is recorded after the one-element
    all-reduce that holds every rank's stream until the last arrives (a host barrier alone
    leaves the ranks' launches apart), and nothing synchronises between the two."""
    import torch
    import torch.distributed as dist

    from swinkit.rank.collective_timing import _cold_events
    log = []
    dev = FakeDevice()

    def events():
        event = dev.event()
        record = event.record

        def logged():
            log.append("event")
            record()
        event.record = logged
        return event

    real = dist.all_reduce

    def all_reduce(t, *a, **kw):
        log.append("all_reduce")
        return real(t, *a, **kw)
    dist.all_reduce = all_reduce
    try:
        _cold_events([torch.ones(3)], lambda entry: log.append("collective"),
                     lambda: log.append("sync"), events, torch.zeros(1))
    finally:
        dist.all_reduce = real
    assert log == ["sync", "all_reduce", "event", "collective", "event", "sync"]


class QueuedWork:
    """A host clock the test moves, and a device queue whose drain moves it on by the work
    still queued: a clock read before the drain sees the host's time, after it the work's."""

    def __init__(self):
        self.host, self.queued, self.drains = 0.0, 0.0, 0

    def now(self) -> float:
        return self.host

    def drain(self) -> None:
        self.drains += 1
        self.host += self.queued
        self.queued = 0.0


def test_a_loops_last_clock_read_waits_for_the_work_still_queued(monkeypatch):
    """Two steps that each return after 0.01 s of host time with 0.05 s of kernels queued:
    the loop's own iteration times are 0.06 s each only if the end is read after a drain
    (before the fix, the last read came first: 0.01 s for the last step). The first step's
    end is the second's start: in a steady state each step blocks on the device at the same
    point (here: the first step's own wait), so only the last has a queued tail left."""
    from types import SimpleNamespace

    from swinkit.rank import skeleton

    dev = QueuedWork()
    monkeypatch.setattr(skeleton, "time", SimpleNamespace(perf_counter=dev.now))

    def step(n):
        dev.host += 0.01
        dev.queued += 0.05
        if n == 0:  # a step's blocking wait on the device (a collective's) drains the queue
            dev.drain()

    class Rank:
        def heartbeat(self, n):
            pass

    class NoWindow:
        def start(self):
            pass

    starts = skeleton.run_steps(Rank(), 2, 0, step, NoWindow(), drain=dev.drain)
    assert [round(b - a, 9) for a, b in zip(starts, starts[1:])] == [0.06, 0.06]
    assert dev.drains == 2
    # on CPU nothing is queued and nothing is drained
    assert skeleton.drained_now(None) == dev.host and dev.drains == 2


def test_a_ddp_ranks_drain_is_cudas_synchronize_on_a_gpu_rank_only(monkeypatch):
    """What a DDP rank drains its device with before the clock reads that end an iteration
    (the paired run's cut at a change of kind, the loop's end): CUDA's synchronize on a GPU
    rank, nothing on a CPU rank. Whether the cut uses it is the gpu-marked
    test_a_paired_launch_cuts_its_steps_after_draining_the_gpu's clock check."""
    import torch

    from swinkit.rank import ddp

    drained = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: drained.append(a))

    class Run:
        cuda = True
    ddp._drain(Run())()
    assert drained == [()]
    Run.cuda = False
    assert ddp._drain(Run()) is None
