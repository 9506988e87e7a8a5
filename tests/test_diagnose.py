"""Root-cause rules on hand-made run folders (the launch tests exercise them for real)."""
import json

from swinkit.dist.diagnose import diagnose


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


def test_unreadable_records_are_ignored_not_fatal(tmp_path):
    (tmp_path / "error-rank0.json").write_text("{trunc")
    _beat(tmp_path, 0, 1)
    d = diagnose(tmp_path, range(1), 1)
    assert d.cause == "agent"
