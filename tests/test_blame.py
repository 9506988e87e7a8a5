"""Blame on hand-made timelines whose answers are worked out by hand in each test's docstring.

A timeline iteration here: marks for start, data_wait, forward, backward, exposed_comm,
optimizer, other; blocking collectives 'buffers' (in forward) and 'grad_sync' (in
exposed_comm). Times in seconds, on one clock.
"""
import pytest

from swinkit.attribution.blame import annotate, charge_wait, compute_blame, summarize_blame
from swinkit.measure.phases import BLAME_KEYS
from swinkit.measure.timeline import chrome_trace


def _iteration(t0, data, fwd, bwd, exposed, opt=0.01, other=0.001, bcast_wait_until=None,
               bcast_transfer=0.001, launch_delay=0.0):
    """One iteration starting at t0. The buffer broadcast starts when data ends and finishes at
    max(own arrival, bcast_wait_until) + bcast_transfer; grad_sync spans the exposed window
    after a launch delay."""
    marks, t = [["start", t0]], t0
    for name, d in (("data_wait", data), ("forward", fwd), ("backward", bwd),
                    ("exposed_comm", exposed), ("optimizer", opt), ("other", other)):
        t += d
        marks.append([name, t])
    m = dict(marks)
    b_arrive = m["data_wait"]
    b_done = max(b_arrive, bcast_wait_until or b_arrive) + bcast_transfer
    assert b_done <= m["forward"], "broadcast must fit in forward"
    g_arrive = m["backward"] + launch_delay
    return {"marks": marks, "collectives": [
        {"name": "buffers", "blocking": True, "arrive": b_arrive, "done": b_done, "ready": None, "bytes": 8},
        {"name": "bucket0", "blocking": False, "arrive": g_arrive, "done": m["exposed_comm"],
         "ready": m["backward"], "bytes": 64},
        {"name": "grad_sync", "blocking": True, "arrive": g_arrive, "done": m["exposed_comm"],
         "ready": m["backward"], "bytes": 64}]}


def test_charge_wait_splits_by_excess_and_keeps_the_untraced_rest():
    """Late rank: data 0.10 vs 0.02 (+0.08), forward 0.30 vs 0.28 (+0.02), backward -0.05.
    A wait of 0.05 < 0.10 of excess: scaled 0.8/0.2 -> 0.04, 0.01; nothing unattributed.
    A wait of 0.15 > 0.10: 0.08 and 0.02 charged, 0.05 unattributed."""
    late = {"data_wait": 0.10, "forward": 0.30, "backward": 0.20}
    waiting = {"data_wait": 0.02, "forward": 0.28, "backward": 0.25}
    charged, rest = charge_wait(0.05, late, waiting)
    assert charged == pytest.approx({"data_wait": 0.04, "forward": 0.01}) and rest == 0
    charged, rest = charge_wait(0.15, late, waiting)
    assert charged == pytest.approx({"data_wait": 0.08, "forward": 0.02})
    assert rest == pytest.approx(0.05)
    assert charge_wait(0.01, waiting, waiting) == ({}, 0.01)


def test_slow_loader_on_rank_1_is_blamed_on_its_data_wait_not_on_rank_0s_forward():
    """Both ranks: forward 0.3 (broadcast included), backward 0.4, exposed 0.02. Rank 0 loads
    in 0.02 s, rank 1 in 0.10 s. Rank 0 reaches the broadcast at 0.02 and waits for rank 1
    (arrives 0.10): sync_wait 0.08, its forward phase is 0.3 but its own forward work is 0.22
    - transfer... so blame: rank 0 data_wait 0.02 + 0.08 = 0.10, forward 0.3 - 0.08 = 0.22;
    rank 1 data_wait 0.10, forward 0.3. Then both are aligned: no wait at grad_sync."""
    t1 = {0: [], 1: []}
    for i in range(3):
        t0 = i * 1.0
        t1[1].append(_iteration(t0, data=0.10, fwd=0.30, bwd=0.40, exposed=0.02))
        # rank 0 finishes loading at +0.02, waits until rank 1 arrives at +0.10
        t1[0].append(_iteration(t0, data=0.02, fwd=0.38, bwd=0.40, exposed=0.02,
                                bcast_wait_until=t0 + 0.10))
    out = compute_blame(t1, warmup=1)
    assert out.measured_iterations == 2
    b0, b1 = out.blame[0][0], out.blame[1][0]
    assert b0["data_wait"] == pytest.approx(0.10) and b1["data_wait"] == pytest.approx(0.10)
    assert b0["forward"] == pytest.approx(0.38 - 0.081)   # minus wait 0.08 and transfer 0.001
    assert b0["exposed_comm"] == pytest.approx(0.02 + 0.001)
    assert b0[ "unattributed"] == pytest.approx(0.0, abs=1e-12)
    assert out.sync_wait[0][0]["forward"] == pytest.approx(0.08)
    assert out.sync_wait[1][0]["forward"] == pytest.approx(0.0)
    for rank in (0, 1):  # blame re-reads the iteration: it still adds up, per rank
        for row, it in zip(out.blame[rank], t1[rank][1:]):
            assert sum(row.values()) == pytest.approx(it["marks"][-1][1] - it["marks"][0][1])
    s = summarize_blame(out)
    assert s["straggler"]["rank"] == 1 and s["straggler"]["phase"] == "data_wait"
    assert s["straggler"]["wait_caused_s"] == pytest.approx(0.08)
    assert set(s["blame_s"]) == set(BLAME_KEYS)


def test_late_launch_is_blamed_on_exposed_comm_of_the_late_rank():
    """Rank 1 launches its last bucket 0.05 s after it is ready (a slow link's latency on that
    rank); rank 0 waits 0.05 s in grad_sync. The excess of rank 1 since the broadcast is only
    in exposed_comm (its launch delay) -> the wait is blamed on exposed_comm, rank 1."""
    tl = {0: [], 1: []}
    for i in range(2):
        t0 = i * 1.0
        tl[1].append(_iteration(t0, 0.02, 0.3, 0.4, exposed=0.07, launch_delay=0.05))
        tl[0].append(_iteration(t0, 0.02, 0.3, 0.4, exposed=0.07))
        g = tl[0][-1]["collectives"][2]
        g["arrive"] = g["ready"]  # rank 0 arrives on time and waits
    s = summarize_blame(compute_blame(tl))
    assert (s["straggler"]["rank"], s["straggler"]["phase"]) == (1, "exposed_comm")
    assert s["straggler"]["wait_caused_s"] == pytest.approx(0.05)
    assert s["straggler"]["by_phase"] == pytest.approx({"exposed_comm": 0.05})
    assert s["sync_wait_s"]["0"]["exposed_comm"] == pytest.approx(0.05)


def test_root_that_finishes_before_the_last_arrival_waited_only_as_long_as_it_did():
    """A broadcast root may finish (its send buffered) before the last rank arrives: its wait
    is capped at its own span, and its transfer is not negative."""
    tl = {0: [_iteration(0.0, 0.02, 0.3, 0.4, 0.02)], 1: [_iteration(0.0, 0.10, 0.3, 0.4, 0.02)]}
    out = compute_blame(tl)
    assert out.sync_wait[0][0]["forward"] == pytest.approx(0.001)  # its whole 1 ms span
    assert out.transfer[0][0]["forward"] == pytest.approx(0.0)


def test_three_ranks_each_waiting_rank_charged_by_its_own_difference():
    """Rank 2 loads in 0.10 s, rank 1 in 0.06, rank 0 in 0.02; all reach the broadcast then
    wait for rank 2: rank 0 waits 0.08, rank 1 0.04, both charged to data_wait of rank 2:
    0.12 caused per iteration."""
    tl = {r: [_iteration(0.0, d, 0.4 - d, 0.4, 0.02, bcast_wait_until=0.10)]
          for r, d in ((0, 0.02), (1, 0.06), (2, 0.10))}
    s = summarize_blame(compute_blame(tl))
    assert s["straggler"]["rank"] == 2 and s["straggler"]["phase"] == "data_wait"
    assert s["straggler"]["wait_caused_s"] == pytest.approx(0.12)
    assert s["per_rank_blame_s"]["1"]["data_wait"] == pytest.approx(0.10)


def test_waits_without_a_traceable_cause_are_unattributed():
    """Rank 0 waits 0.05 s at the broadcast but rank 1 did nothing longer before it (its
    iteration started 0.05 s later: outside the window both ranks share)."""
    tl = {0: [_iteration(0.0, 0.02, 0.35, 0.4, 0.02, bcast_wait_until=0.07)],
          1: [_iteration(0.05, 0.02, 0.30, 0.4, 0.02)]}
    s = summarize_blame(compute_blame(tl))
    assert s["per_rank_blame_s"]["0"]["unattributed"] == pytest.approx(0.05)
    assert s["straggler"]["rank"] is None


def test_ranks_with_different_collective_counts_keep_their_phases_and_say_so():
    tl = {0: [_iteration(0.0, 0.02, 0.3, 0.4, 0.02)], 1: [_iteration(0.0, 0.02, 0.3, 0.4, 0.02)]}
    tl[1][0]["collectives"].pop(0)
    out = compute_blame(tl)
    assert out.problems and "different numbers of blocking collectives" in out.problems[0]
    assert out.blame[0][0]["forward"] == pytest.approx(0.3)


def test_chrome_trace_has_a_track_per_rank_and_the_waits():
    tl = {0: [_iteration(0.0, 0.02, 0.38, 0.4, 0.02, bcast_wait_until=0.10)],
          1: [_iteration(0.0, 0.10, 0.30, 0.4, 0.02)]}
    annotate(tl)
    trace = chrome_trace(tl)
    names = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {(0, "rank 0"), (1, "rank 1")}
    waits = [e for e in trace["traceEvents"] if e.get("name") == "buffers" and e["pid"] == 0]
    assert waits[0]["args"]["sync_wait_s"] == pytest.approx(0.08)
    phases = [e for e in trace["traceEvents"] if e.get("tid") == 0 and e["ph"] == "X" and e["pid"] == 1]
    assert [e["name"] for e in phases][:3] == ["data_wait", "forward", "backward"]
    assert phases[0]["dur"] == pytest.approx(0.10 * 1e6)
