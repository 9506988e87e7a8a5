"""Local steps meet the other ranks where DDP would hold them (swinkit.rank.meet), and the
oracle's inputs leave those waits out: it replays them itself."""
import pytest

from swinkit.measure.timeline import MEET, phase_durations, phase_intervals

DATA_MS = 150  # per sample on rank 1; the test preset loads 2 per micro-batch in the rank


def _meets(iteration):
    """(phase it fell in, seconds) of each meeting in a resolved iteration."""
    spans = phase_intervals(iteration)
    return [(next(n for n, t0, t1 in spans if t0 <= c["arrive"] < t1), c["done"] - c["arrive"])
            for c in iteration["collectives"] if c["name"] == MEET]


@pytest.mark.slow
def test_local_steps_meet_at_ddps_blocking_points_and_the_costs_leave_the_wait_out(no_orphans):
    """A local run at N=2 with accumulation 2 and rank 1 slow to load: the first micro-batch
    of each step meets before its forward (DDP's buffer sync), the second after its backward
    (DDP's last all-reduce). Rank 0, ready first, waits at the first for rank 1's loading; its
    forward in the oracle's costs is its own compute, without that wait."""
    from swinkit.runs.component_costs import costs
    from swinkit.ddp_options import DDPOptions
    from swinkit.runs.ddp_run import DDPRunSpec, run_ddp
    from swinkit.injection import Injection
    delay_s = 2 * DATA_MS / 1e3
    out = run_ddp(DDPRunSpec(preset="test", nproc_per_node=2, iters=4, warmup=2, local=True,
                             ddp=DDPOptions(grad_accum=2),
                             injection=Injection(data_ms=DATA_MS, ranks=(1,))))
    ranks = {r["rank"]: r for r in out["ranks"]}
    for rank in ranks.values():
        meets = [_meets(it) for it in rank["timeline"]]
        assert [[phase for phase, _ in m] for m in meets] == [["forward"], ["exposed_comm"]] * 3
    waits = {r: [m[0][1] for m in map(_meets, ranks[r]["timeline"][2::2])] for r in ranks}
    assert min(waits[0]) > 0.5 * delay_s and max(waits[1]) < 0.5 * delay_s, waits
    # the run's own forward of rank 0 holds the wait; the oracle's input does not
    forward = [phase_durations(it)["forward"] for it in ranks[0]["timeline"][2::2]]
    assert min(forward) > 0.5 * delay_s
    own = costs(out)["ranks"][0]["positions"][0]["phases_s"]["forward"]
    assert own < min(forward) - 0.5 * delay_s
