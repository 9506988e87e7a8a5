"""The words swinkit measures a data-parallel iteration in: phases (where time went) and blame
keys (why). Plain data, torch-free, so rendering and analysis import it without the workload.

Phases of one iteration on one rank, in order; they add up to the iteration's wall time:

    data_wait     blocked on the loader, plus the data preprocessor (host->device copy, pad)
    forward       forward + loss (collectives inside it, e.g. DDP's buffer broadcast, included)
    backward      backward compute until the last gradient bucket is handed to the collective
    exposed_comm  the rest of backward: gradient communication not hidden under compute,
                  including waiting for the slowest rank
    optimizer     optimizer step + zero_grad
    other         the tail of the iteration outside the above (LR schedule, bookkeeping)

Blame re-reads the same seconds by cause. Every collective splits, per rank, into ``sync_wait``
(own arrival -> the last rank's arrival) and ``transfer`` (the rest). A rank's own working time
stays in its phase; its transfers (not hidden under compute) become ``exposed_comm``; each of
its waits is charged to the phase that made the late rank late (that rank's excess over the
waiting rank since the previous collective both took part in). What cannot be traced that way
is ``unattributed``, never folded into a phase.
"""
from __future__ import annotations

PHASES = ("data_wait", "forward", "backward", "exposed_comm", "optimizer", "other")
UNATTRIBUTED = "unattributed"
BLAME_KEYS = PHASES + (UNATTRIBUTED,)

BLAME_MEANING = {
    "data_wait": "time lost to loading: own loading, and others' waits for a rank late from loading",
    "forward": "forward compute, own and that which made other ranks wait",
    "backward": "backward compute, own and that which made other ranks wait",
    "exposed_comm": "collective transfer not hidden under compute (no waiting in it), and waits "
                    "caused by a rank that launched its collective late",
    "optimizer": "optimizer step, own and that which made other ranks wait",
    "other": "iteration tail, own and that which made other ranks wait",
    UNATTRIBUTED: "waits whose cause the timeline cannot trace (shown, never folded elsewhere)",
}
