"""Root-cause rules on hand-made run folders (the launch tests exercise them for real)."""
import json

import pytest

from swinkit.launch.diagnose import diagnose, is_comm_abort


def _write(run_dir, name, data):
    (run_dir / name).write_text(json.dumps(data))


def _beat(run_dir, rank, step, stage="step", t=0.0):
    _write(run_dir, f"hb-rank{rank}.json", {"rank": rank, "step": step, "stage": stage, "time": t})


def _error(run_dir, rank, comm, t, message="boom"):
    _write(run_dir, f"error-rank{rank}.json", {"rank": rank, "type": "RuntimeError",
                                               "message": message, "traceback": "tb",
                                               "comm_error": comm, "time": t})


def test_clean_run_has_no_diagnosis(tmp_path):
    _beat(tmp_path, 0, -2, "done")
    assert diagnose(tmp_path, range(1), 0) is None


def test_signal_death_beats_the_survivors_comm_errors(tmp_path):
    _beat(tmp_path, 0, 3), _beat(tmp_path, 1, 3)
    _error(tmp_path, 0, comm=True, t=1.0, message="Connection closed by peer")
    _write(tmp_path, "agent-failures-node0.json",
           {"0": {"exitcode": 1, "signal": None}, "1": {"exitcode": -9, "signal": "SIGKILL"}})
    d = diagnose(tmp_path, range(2), 1)
    assert (d.cause, d.rank) == ("killed", 1) and "SIGKILL" in d.summary


def test_earliest_own_error_wins_over_later_ones_and_comm_errors(tmp_path):
    _error(tmp_path, 0, comm=True, t=0.5)
    _error(tmp_path, 2, comm=False, t=2.0, message="second")
    _error(tmp_path, 1, comm=False, t=1.0, message="first")
    d = diagnose(tmp_path, range(3), 1)
    assert (d.cause, d.rank) == ("raised", 1) and "first" in d.summary


def test_silent_rank_among_timed_out_ones_is_the_hung_one(tmp_path):
    _beat(tmp_path, 0, 5), _beat(tmp_path, 1, 5), _beat(tmp_path, 2, 5)
    _error(tmp_path, 0, comm=True, t=1.0), _error(tmp_path, 2, comm=True, t=1.1)
    d = diagnose(tmp_path, range(3), 1)
    assert (d.cause, d.rank) == ("hung", 1)


def test_watchdog_reports_last_progress(tmp_path):
    _beat(tmp_path, 0, 2), _beat(tmp_path, 1, 2)
    d = diagnose(tmp_path, range(2), -15, watchdog_s=30)
    assert d.cause == "watchdog" and "30 s" in d.summary and "rank 1: step 2" in d.summary


def test_a_wall_limit_before_nccls_own_abort_says_which_timeout_to_raise(tmp_path):
    """On NCCL the ranks waiting on a hung one are aborted about 70 s after the process-group
    timeout: a wall limit of 100 s with a timeout of 60 s fires first, and the diagnosis says
    to raise it above 130 s; at 200 s, or on gloo (whose waiting ranks raise at the timeout),
    nothing is added."""
    _beat(tmp_path, 0, 2), _beat(tmp_path, 1, 2)
    d = diagnose(tmp_path, range(2), -15, watchdog_s=100, join_timeout_s=60, backend="nccl")
    assert d.cause == "watchdog" and "--timeout above 130 s" in d.summary
    for wall, backend in ((200, "nccl"), (100, "gloo")):
        d = diagnose(tmp_path, range(2), -15, watchdog_s=wall, join_timeout_s=60, backend=backend)
        assert d.cause == "watchdog" and "NCCL" not in d.summary


def test_unreadable_records_are_ignored_not_fatal(tmp_path):
    (tmp_path / "error-rank0.json").write_text("{trunc")
    _beat(tmp_path, 0, 1)
    d = diagnose(tmp_path, range(1), 1)
    assert d.cause == "agent"


# NCCL: a survivor waiting on a hung peer does not raise; the NCCL watchdog aborts it (SIGABRT,
# exit code -6) and it leaves no error record. The records below are what such a run leaves.
ABORTED = {"exitcode": -6, "signal": "SIGABRT", "local_rank": 0}


def _failures(run_dir, by_rank):
    _write(run_dir, "agent-failures-node0.json", {str(r): f for r, f in by_rank.items()})


def test_nccl_watchdog_abort_of_the_survivor_names_the_hung_rank(tmp_path):
    _beat(tmp_path, 0, 5, t=10.0)  # the survivor's host ran ahead of the stuck collective
    _beat(tmp_path, 1, 2, t=3.0)   # the hung rank
    _failures(tmp_path, {0: ABORTED})
    d = diagnose(tmp_path, range(2), 1, backend="nccl")
    assert (d.cause, d.rank) == ("hung", 1), d.summary
    assert d.summary.startswith("rank 1 hung after step 2")


def test_gloo_keeps_naming_a_signalled_rank_killed(tmp_path):
    """The same records on gloo: nothing there aborts a waiting rank, so the SIGABRT is the
    rank's own."""
    _beat(tmp_path, 0, 5, t=10.0), _beat(tmp_path, 1, 2, t=3.0)
    _failures(tmp_path, {0: ABORTED})
    d = diagnose(tmp_path, range(2), 1, backend="gloo")
    assert (d.cause, d.rank) == ("killed", 0) and "SIGABRT" in d.summary


def test_nccl_still_names_a_sigkilled_rank_before_the_aborted_survivors(tmp_path):
    _beat(tmp_path, 0, 4), _beat(tmp_path, 1, 4), _beat(tmp_path, 2, 3)
    _failures(tmp_path, {0: ABORTED, 2: {"exitcode": -9, "signal": "SIGKILL", "local_rank": 2}})
    d = diagnose(tmp_path, range(3), 1, backend="nccl")
    assert (d.cause, d.rank) == ("killed", 2) and "SIGKILL" in d.summary


def test_nccl_own_error_beats_the_aborted_survivor(tmp_path):
    _beat(tmp_path, 0, 4), _beat(tmp_path, 1, 4)
    _error(tmp_path, 1, comm=False, t=1.0, message="CUDA error: an illegal memory access")
    _failures(tmp_path, {0: ABORTED})
    d = diagnose(tmp_path, range(2), 1, backend="nccl")
    assert (d.cause, d.rank) == ("raised", 1)


def test_nccl_at_equal_steps_the_silent_rank_is_named_not_the_aborted_one(tmp_path):
    """The watchdog aborts the ranks that waited; the one waited for stays silent."""
    _beat(tmp_path, 0, 3, t=1.0), _beat(tmp_path, 1, 3, t=2.0)
    _failures(tmp_path, {0: ABORTED})
    d = diagnose(tmp_path, range(2), 1, backend="nccl")
    assert (d.cause, d.rank) == ("hung", 1)


def test_nccl_every_rank_aborted_names_the_one_with_least_progress(tmp_path):
    """The hung rank had a collective pending too, so its own watchdog aborted it as well."""
    _beat(tmp_path, 0, 7), _beat(tmp_path, 1, 7), _beat(tmp_path, 2, 4)
    _failures(tmp_path, {0: ABORTED, 1: ABORTED, 2: ABORTED})
    d = diagnose(tmp_path, range(3), 1, backend="nccl")
    assert (d.cause, d.rank) == ("hung", 2)
    assert "SIGABRT" in d.summary and "same step" not in d.summary


def test_nccl_every_rank_aborted_at_one_step_says_the_tie(tmp_path):
    _beat(tmp_path, 0, 4, t=2.0), _beat(tmp_path, 1, 4, t=1.0)
    _failures(tmp_path, {0: ABORTED, 1: ABORTED})
    d = diagnose(tmp_path, range(2), 1, backend="nccl")
    assert (d.cause, d.rank) == ("hung", 1)  # the earlier last heartbeat
    assert "ranks [0] stopped at the same step" in d.summary


@pytest.mark.parametrize("failure, backend, expected", [
    ({"exitcode": -6, "signal": "SIGABRT"}, "nccl", True),
    ({"exitcode": -6, "signal": None}, "nccl", True),
    ({"exitcode": -6, "signal": "SIGABRT"}, "gloo", False),
    ({"exitcode": -9, "signal": "SIGKILL"}, "nccl", False),
    ({"exitcode": 1, "signal": None}, "nccl", False),
])
def test_is_comm_abort(failure, backend, expected):
    assert is_comm_abort(failure, backend) is expected
