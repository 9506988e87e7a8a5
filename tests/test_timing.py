"""The shared timing loop: what it calls, in which order, and what it returns."""
from swinkit.measure import timing


def test_warmup_calls_are_not_timed_and_sync_brackets_each_sample(monkeypatch):
    events = []
    ticks = iter(range(100))
    # A fake clock that advances 1 per read: each sample is then exactly 1 "second" whatever
    # the machine does, and a loop that timed warm-up calls or read the clock twice per side
    # would return other values.
    monkeypatch.setattr(timing.time, "perf_counter", lambda: (events.append("clock"), next(ticks))[1])
    out = timing.timed(lambda: events.append("call"), samples=2, warmup=3,
                       sync=lambda: events.append("sync"))
    assert out == [1, 1]
    assert events == ["call"] * 3 + ["sync", "clock", "call", "sync", "clock"] * 2
