"""Name the rank that failed first, from the records a run leaves in its folder.

Exit codes alone cannot do it: a survivor's code after a peer died varies (3, or -6 from an
abort), and torchrun blames the survivor of a hang. The evidence, in order of
trust:

1. a rank killed by a signal that left no error record (it could not write one): SIGKILL, OOM;
2. an error record that is not a communication error: the rank's own exception;
3. a rank with no heartbeat at all: it never joined the process group;
4. a rank with no error record while the others hold communication errors: it hung, and they
   timed out waiting for it;
5. the watchdog: everything was still running at the wall-clock limit.

The backend changes what a survivor leaves. On gloo it raises a communication error. On NCCL
it does not raise: its host runs ahead of the stuck collective until the NCCL watchdog aborts
the whole process ("Watchdog caught collective operation timeout", SIGABRT, exit code -6), with
no error record, about a minute after the timeout (it waits for its debug dump first). So on
NCCL such an abort is a communication symptom, like a gloo survivor's error record, and rule 4
names the rank that made the least progress.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

# how long after its process-group timeout NCCL's watchdog aborts a rank waiting on a hung
# collective, with room to spare: 64 s measured (torch 2.11, NCCL 2.28.9; it writes its
# debug dump first), 96 s with TORCH_NCCL_ASYNC_ERROR_HANDLING=1
NCCL_ABORT_LAG_S = 70.0


@dataclass
class Diagnosis:
    cause: str            # killed | raised | never_joined | hung | watchdog | agent
    rank: int | None
    summary: str
    detail: str = ""
    records: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"cause": self.cause, "rank": self.rank, "summary": self.summary,
                "detail": self.detail}


def is_comm_abort(failure: dict, backend: str) -> bool:
    """True when a rank's signal death is a symptom of another rank's failure, not its own.

    Only NCCL has a watchdog that aborts a rank whose collective timed out (SIGABRT, exit code
    -6). Gloo raises instead, so there a SIGABRT is the rank's own (a failed C++ check, ...).

    Args:
        failure: the agent's record of one rank: ``{"exitcode": int, "signal": str | None}``.
        backend: the run's resolved backend, "gloo" or "nccl".
    """
    return backend == "nccl" and (failure.get("signal") == "SIGABRT"
                                  or failure.get("exitcode") == -6)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _rank_of(path: Path) -> int:
    return int(path.stem.rsplit("rank", 1)[1])


def _collect(run_dir: Path, expected) -> tuple[list, dict, dict, dict]:
    errors, beats, failures = {}, {}, {}
    found = {_rank_of(p) for p in run_dir.glob("*-rank*.json") if p.stem.rsplit("rank", 1)[1].isdigit()}
    ranks = sorted(set(expected) if expected is not None else found)
    for rank in ranks:
        err = _read_json(run_dir / f"error-rank{rank}.json")
        if err:
            errors[rank] = err
        beat = _read_json(run_dir / f"hb-rank{rank}.json")
        if beat:
            beats[rank] = beat
    for path in sorted(run_dir.glob("agent-failures-node*.json")):
        for rank, info in (_read_json(path) or {}).items():
            failures[int(rank)] = info
    return ranks, errors, beats, failures


def _hung_summary(r: int, beats: dict, aborted: list, stalled: list) -> str:
    """Why ``r``, the rank that made the least progress, is named."""
    step = beats[r]["step"]
    if r not in aborted:
        return (f"rank {r} hung after step {step}: it stopped making progress and the other "
                f"ranks timed out waiting for it in a collective")
    tied = [k for k in stalled if k != r and beats[k]["step"] == step]
    also = f"; ranks {tied} stopped at the same step" if tied else ""
    return (f"rank {r} hung after step {step}: it made the least progress, then SIGABRT "
            f"(exit code -6) ended it without an error record, as the NCCL watchdog ends a "
            f"rank whose collective timed out{also}")


def diagnose(run_dir: str | Path, expected, agent_exitcode: int | None,
             watchdog_s: float | None = None, join_timeout_s: float | None = None,
             backend: str = "gloo") -> Diagnosis | None:
    """None for a clean run, else what went wrong and on which rank.

    Args:
        expected: the global ranks that should have run here (None: those that left records).
        join_timeout_s: the process-group timeout (how long started ranks waited for a missing
            one; on NCCL, its watchdog's abort follows it), for the messages.
        backend: the run's resolved backend: on "nccl" a SIGABRT is the watchdog's.
    """
    run_dir = Path(run_dir)
    ranks, errors, beats, failures = _collect(run_dir, expected)
    records = {"errors": errors, "heartbeats": beats, "failures": failures}
    if watchdog_s is None and agent_exitcode == 0 and not errors:
        return None

    def make(cause, rank, summary, detail=""):
        return Diagnosis(cause, rank, summary, detail, records)

    unrecorded = {r: f for r, f in failures.items() if f.get("signal") and r not in errors}
    aborted = sorted(r for r, f in unrecorded.items() if is_comm_abort(f, backend))
    killed = sorted(r for r in unrecorded if r not in aborted)
    if killed and watchdog_s is None:
        r = killed[0]
        return make("killed", r, f"rank {r} was killed by {failures[r]['signal']} "
                                 f"(exit code {failures[r]['exitcode']}; out of memory is a common cause)")
    own = sorted((e for e in errors.values() if not e.get("comm_error")), key=lambda e: e["time"])
    if own:
        e = own[0]
        return make("raised", e["rank"], f"rank {e['rank']} raised {e['type']}: {e['message']}",
                    e.get("traceback", ""))
    missing = [r for r in ranks if r not in beats]
    if missing and beats:  # some joined, these did not
        waited = f" within {join_timeout_s:g} s" if join_timeout_s else ""
        return make("never_joined", missing[0],
                    f"rank {missing[0]} did not join{waited} (ranks {missing} never reached the "
                    f"process group)")
    # Ranks without an error record that had not finished: the hung one and, on NCCL, the
    # survivors its watchdog aborted. The least progress names it; at equal steps a rank still
    # silent beats an aborted one (the watchdog aborts those that waited, not the one waited for).
    stalled = [r for r in ranks if r not in errors and r in beats
               and beats[r].get("stage") != "done"]
    silent = [r for r in stalled if r not in aborted]
    if (errors or aborted) and stalled and len(silent) < len(ranks):
        r = min(stalled, key=lambda k: (beats[k]["step"], k in aborted, beats[k]["time"]))
        return make("hung", r, _hung_summary(r, beats, aborted, stalled))
    if watchdog_s is not None:
        steps = ", ".join(f"rank {k}: step {v['step']}" for k, v in sorted(beats.items()))
        return make("watchdog", None, f"watchdog: the run exceeded its wall-clock limit of "
                    f"{watchdog_s:g} s and was stopped (last progress: {steps or 'none'})"
                    + _before_nccl_could(watchdog_s, join_timeout_s, backend))
    if errors:
        e = min(errors.values(), key=lambda e: e["time"])
        return make("raised", e["rank"], f"rank {e['rank']} raised {e['type']}: {e['message']}",
                    e.get("traceback", ""))
    if missing:
        return make("never_joined", missing[0], f"no rank joined (ranks {missing} have no heartbeat)")
    return make("agent", None, f"the launch agent exited with code {agent_exitcode} and no rank "
                               f"left an error record")


def _before_nccl_could(watchdog_s: float, pg_timeout_s: float | None, backend: str) -> str:
    """Where the wall-clock limit came before NCCL's watchdog could abort the ranks waiting on
    a hung one (the abort that lets rule 4 name it), what to change; else nothing.

    >>> "rerun with --timeout above 130 s" in _before_nccl_could(100, 60, "nccl")
    True
    >>> _before_nccl_could(200, 60, "nccl") + _before_nccl_could(100, 60, "gloo")
    ''
    """
    if backend != "nccl" or not pg_timeout_s or watchdog_s >= pg_timeout_s + NCCL_ABORT_LAG_S:
        return ""
    return (f"; if a rank hung, this limit came before NCCL could abort the ranks waiting on "
            f"it (about {NCCL_ABORT_LAG_S:g} s after the process-group timeout of "
            f"{pg_timeout_s:g} s), so no rank could be named: rerun with --timeout above "
            f"{pg_timeout_s + NCCL_ABORT_LAG_S:g} s (or a lower --pg-timeout)")
