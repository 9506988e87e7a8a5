"""Blame against injected, known causes, tracked over commits (``swinkit validate``'s cells).

Per world size and injection (``case/placement``: ``compute_ms/one`` is a forward slowed by
120 ms on the last rank, every 2nd iteration), the share of the added time blamed on the
injected cause and the recovery of the injected amount: a change that breaks attribution shows
in asv's history. The default run tracks two one-rank cells at world size 2 (a slow forward, a
slow backward: the straggler DDP hides), about half a minute on 2 CPU cores; the rest with
``SWINKIT_VALIDATE=all`` or comma-separated names, world sizes by
``SWINKIT_VALIDATE_WORLD_SIZES``. The preset: ``SWINKIT_VALIDATE_PRESET``, else the suite's on
GPU and ``test`` on CPU (the amounts are sized to stand out of its noise).
"""
import math
import os

from .common import WORLD_SIZES, lazy, module, preset

Sweep = module("swinkit.runs.sweep").Sweep

# written out, not imported: swinkit.attribution.validation's CASES x PLACEMENTS
ALL = [f"{case}/{placement}" for case in ("data_ms", "compute_ms", "backward_ms",
                                          "optimizer_ms", "comm_ms")
       for placement in ("all", "one")]
SUITE_DEFAULT = "compute_ms/one,backward_ms/one"
_chosen = os.environ.get("SWINKIT_VALIDATE") or SUITE_DEFAULT
INJECTIONS = ALL if _chosen == "all" else [n.strip() for n in _chosen.split(",") if n.strip()]
# the suite's world sizes are the params (ids stay the same whatever runs); these run
RUN_WORLD_SIZES = [int(x) for x in os.environ["SWINKIT_VALIDATE_WORLD_SIZES"].split(",")] if (
    os.environ.get("SWINKIT_VALIDATE_WORLD_SIZES")) else [2]

bench_cells = lazy("swinkit.experiments.validate:bench_cells")  # torch in setup_cache only


def _preset() -> str:
    if os.environ.get("SWINKIT_VALIDATE_PRESET"):
        return os.environ["SWINKIT_VALIDATE_PRESET"]
    return "test" if preset() == "cpu" else preset()


class Validation:
    """One setup_cache runs every (world size, injection) cell; the tracks read it."""
    timeout = 3600
    params = [list(WORLD_SIZES), INJECTIONS]
    param_names = ["world_size", "injection"]

    def setup_cache(self):
        sweep = Sweep(meta={"preset": _preset()})
        oversubscribe = module("swinkit.runs.sweep").oversubscribe_allowed()
        for ws in set(WORLD_SIZES) - set(RUN_WORLD_SIZES):
            sweep.skipped[ws] = (f"not in the default set (world size {RUN_WORLD_SIZES}): "
                                 "set SWINKIT_VALIDATE_WORLD_SIZES")
        for ws in sweep.runnable([ws for ws in WORLD_SIZES if ws in RUN_WORLD_SIZES]):
            sweep.run(ws, lambda: bench_cells(_preset(), ws, INJECTIONS, oversubscribe), print)
        return sweep

    def setup(self, sweep, world_size, injection):
        cell = sweep.get(world_size).get(injection)
        if cell is None or "skipped" in cell:
            raise NotImplementedError(f"{injection}: {(cell or {}).get('skipped', 'not run')}")

    def _value(self, sweep, world_size, injection, key):
        value = sweep.get(world_size)[injection].get(key)
        return math.nan if value is None else value

    def track_share(self, sweep, world_size, injection):
        """Share of the added time blamed on the injected cause (passes 0.85-1.15)."""
        return self._value(sweep, world_size, injection, "share")
    track_share.unit = "ratio"

    def track_recovery(self, sweep, world_size, injection):
        """Added time blamed on the injected cause / the injected amount, the ranks' median
        (passes 0.8-1.2, on every rank too)."""
        return self._value(sweep, world_size, injection, "recovery")
    track_recovery.unit = "ratio"
