"""The ground-truth cells that tell charging rules apart (``swinkit validate``; the matrix's
own cells and thresholds: :mod:`swinkit.attribution.validation`).

* **Two stragglers** (``two_stragglers``): rank 0's loading and the last rank's backward made
  slower in the same iterations. Each late rank makes the other wait at a different collective
  (the buffer broadcast, the gradient sync), so every rank's row must hold both causes, each
  at what it added to the iteration when run alone (the ground truth: the same delays run one
  at a time, read from wall time, not from blame). The loading delay is kept small
  (:data:`PAIR_DATA_MS`), so that the rank's loading is not most of the time it spends between
  two collectives: a rule that spreads a wait over the late rank's own phases then charges a
  third of it elsewhere, and the waiting rank's recovery on loading fails. A rule that charges
  the whole wait to the late rank's longest phase since the last collective agrees with the
  right one here (a delay makes its own phase the longest of its stretch); the small delay
  below is the cell that catches it, which is why a small delay the host's noise hides makes
  the matrix inconclusive, not passed. Whether the delays added up or overlapped (the
  iteration grew by their sum, or by their maximum) is read from the runs alone, and shown.
* **A small delay** (``small_backward``): a backward a few ms slower on the last rank, near
  the noise floor. Its ground truth is what the delay added to the late rank's own backward
  (that rank waits for nobody then, so its row is its phase timer's), not the amount asked: on
  a GPU the two agree; on CPU ranks sharing cores a rank's delay frees a core the other's
  compute and gloo's threads then use, so a 5 ms delay adds about 3 ms there (the recovery
  against the amount is shown, not judged). Every other rank's added time on backward must
  match that truth within the run's detection threshold (the noise of the estimate,
  :func:`~swinkit.attribution.neighbours.detection_threshold`), which the cell reports; a
  truth below twice the threshold cannot be checked: the cell is then counted apart
  (inconclusive), saying so.
"""
from __future__ import annotations

from swinkit.attribution.validation import (EXPECTED, SMALL_DELAY, TWO_STRAGGLERS, Thresholds,
                                            addup_failures, injected_amount, matrix_row,
                                            split_failures)

# the two stragglers: (injection kind, its rank; -1 the last)
PAIR = (("data_ms", 0), ("backward_ms", -1))
# the pair's loading delay per injected iteration: small beside the rest of the stretch it
# lies in (the optimizer and tail before it), so that spreading a wait over the late rank's
# own phases shows (at 120 ms the loading would be nearly all of it, and look right)
PAIR_DATA_MS = 15.0
# the two stragglers' runs (both delays, each alone) measure this many times the matrix's
# iterations: the loading delay is small (15 ms), and its ratio to what it added alone compares
# two runs' medians, each with its own noise (at 10 iterations, 0.66-1.30 on an idle 2-core host)
PAIR_ITERS = 4
SMALL_KIND = "backward_ms"
# the least share of the small delay the late rank's backward may show (see score_small)
SMALL_FLOOR = 0.4
SMALL_MS = 5.0      # per injected iteration: about a twentieth of the test preset's iteration
SMALL_ITERS = 40    # times the matrix's measured iterations (10 by default): the noise of a
#                     median of n differences shrinks as 1/sqrt(n); at 100 iterations the
#                     test preset's threshold on an idle 2-core host was 1.5-2.5 ms, too near a
#                     delay that adds about 3 ms there (see the truth above); 400 halve it


def pair_ranks(world_size: int) -> list[tuple[str, int]]:
    """The two stragglers' (kind, rank) at ``world_size`` (at least 2)."""
    return [(kind, rank % world_size) for kind, rank in PAIR]


def score_pair(both: dict, alone: dict[str, dict], thresholds: Thresholds = Thresholds()) -> dict:
    """The two-stragglers cell from the run with both delays (``both``) and each delay's run
    alone (``alone``: kind -> ``run_ddp``'s dict).

    Returns the cell: ``row`` and ``share`` (on both causes together), ``truth_s`` (what each
    cause's delay alone added to the iteration), ``rank_recovery`` (per cause, each rank's added
    time on its key over that truth), ``added_s`` beside ``sum_alone_s`` and ``max_alone_s``,
    ``late`` (each late rank's phase blamed for the waits it caused), ``passed``, ``failures``.
    """
    world = both["world_size"]
    pair = pair_ranks(world)
    keys = [EXPECTED[kind] for kind, _ in pair]
    cell = {"world_size": world, "case": TWO_STRAGGLERS, "placement": "pair",
            "expected": "+".join(keys), "ranks": [rank for _, rank in pair]}
    effects = [both.get("injection_effect")] + [alone[k].get("injection_effect") for k, _ in pair]
    if not all(effects):
        return {**cell, "passed": False, "failures": ["a run had no injected iteration with a "
                                                      "clean neighbour: nothing to compare"]}
    effect, singles = effects[0], dict(zip(keys, effects[1:]))
    row = matrix_row(effect)
    # each cause's ground truth is what its delay alone added to the iteration: wall time,
    # not blame's reading of it (blame held to its own reading would pass any charging rule)
    truth = {key: singles[key]["added_iter_s"] for key in keys}
    cell.update(row=row, share=sum(row[k] for k in keys), added_s=effect["added_iter_s"],
                pairs=effect.get("pairs"), truth_s=truth,
                sum_alone_s=sum(e["added_iter_s"] for e in singles.values()),
                max_alone_s=max(e["added_iter_s"] for e in singles.values()),
                rank_recovery={key: {r: v["growth_s"][key] / truth[key]
                                     for r, v in effect["per_rank"].items()} for key in keys},
                late=_late_phases(both, pair), addup_s=both.get("blame_addup_s"))
    failures = split_failures(cell, keys, thresholds) + addup_failures(cell, thresholds)
    failures += [f"truth: {key} alone added {1e3 * t:+.0f} ms, nothing to hold blame to"
                 for key, t in truth.items() if not t > 0]
    # each ratio compares two runs' estimates, each with its own noise: the tolerance is the
    # larger of recovery_tol and their combined detection threshold over the truth
    noise = {key: _combined_noise(effect, singles[key], key) for key in keys}
    cell["tolerance"] = {key: max(thresholds.recovery_tol, noise[key] / truth[key])
                         if truth[key] > 0 else thresholds.recovery_tol for key in keys}
    for key, by_rank in cell["rank_recovery"].items():
        tol = cell["tolerance"][key]
        off = {r: x for r, x in by_rank.items() if not abs(x - 1.0) <= tol}
        if truth[key] > 0 and off:
            failures.append(f"{key} on rank " + ", ".join(f"{r} {x:.2f}" for r, x in off.items())
                            + f" of what it added alone (needs 1 +- {tol:.2f})")
    failures += [f"rank {rank}'s waits caused charged to {got}, injected {want}"
                 for (rank, want), got in zip([(r, EXPECTED[k]) for k, r in pair],
                                              cell["late"].values()) if got != want]
    return {**cell, "failures": failures, "passed": not failures}


def _combined_noise(a: dict, b: dict, key: str) -> float:
    """The detection threshold of a difference of two runs' estimates of ``key``: their
    thresholds added in quadrature (independent runs); 0 where a run has none.

    >>> _combined_noise({"noise_s": {"k": 0.003}}, {"noise_s": {"k": 0.004}}, "k")
    0.005
    """
    return sum(((e.get("noise_s") or {}).get(key, 0.0)) ** 2 for e in (a, b)) ** 0.5


def _late_phases(result: dict, pair: list[tuple[str, int]]) -> dict[str, str | None]:
    """Per late rank of the pair, the phase blame charged most of the waits it caused to."""
    caused = result.get("wait_caused_s") or {}
    return {str(rank): max(caused[str(rank)], key=caused[str(rank)].get)
            if caused.get(str(rank)) else None for _, rank in pair}


def score_small(result: dict, requested_s: float, thresholds: Thresholds = Thresholds()) -> dict:
    """The small-delay cell from its run. Each waiting rank's added time on backward must be
    its own added iteration time (all of what it lost, read from the loop's clock, not from
    blame) within the larger of ``recovery_tol`` of it and the run's detection threshold; the
    late (last) rank's own backward must show between :data:`SMALL_FLOOR` and 1 +
    ``recovery_tol`` of the delay (shared CPU cores absorb part of a small delay, a GPU none).
    A wait below twice the threshold gets no verdict: the cell is inconclusive, saying so,
    with its figures kept (a noisy host cannot tell it from nothing, right or wrong). The
    share, residual and straggler are shown, not judged: near the noise floor a ratio of small
    differences says little, and the straggler is named from every iteration (the clean ones'
    jitter too)."""
    world, key = result["world_size"], EXPECTED[SMALL_KIND]
    late = str(world - 1)  # where experiments.validate places the small delay
    cell = {"world_size": world, "case": SMALL_DELAY, "placement": "one", "expected": key,
            "requested_s": requested_s}
    effect = result.get("injection_effect")
    per_rank = (effect or {}).get("per_rank") or {}
    if not effect or not effect.get("noise_s") or late not in per_rank or len(per_rank) < 2:
        return {**cell, "passed": False, "failures": ["too few clean iterations to read the "
                                                      "delay or the noise"]}
    amount, source = injected_amount(result, SMALL_KIND, requested_s)
    threshold = effect["noise_s"][key]
    grown = {r: v["growth_s"][key] for r, v in per_rank.items()}
    waits = {r: v["added_iter_s"] for r, v in per_rank.items() if r != late}
    truth = grown[late]   # what the delay added to the late rank's own backward
    row = matrix_row(effect)
    straggler = result.get("straggler") or {}
    cell.update(row=row, share=row[key], added_s=effect["added_iter_s"], amount_s=amount,
                amount_source=source, truth_s=truth, waits_s=waits, threshold_s=threshold,
                iteration_threshold_s=effect["noise_s"]["iteration"], pairs=effect.get("pairs"),
                recovery=truth / amount,   # each waiting rank's against its own loss, below
                rank_recovery={r: grown[r] / w for r, w in waits.items() if w > 0},
                addup_s=result.get("blame_addup_s"),
                straggler={"rank": straggler.get("rank"), "phase": straggler.get("phase")})
    # judged only where every wait is at least twice the threshold: just above it, a tolerance
    # of the threshold would accept nearly any growth between nothing and twice the wait
    if min(waits.values()) < 2 * threshold:  # no verdict: shown with its figures
        return {**cell, "inconclusive": True, "skipped": (
            f"the delay ({1e3 * amount:.1f} ms) cost the other ranks "
            + ", ".join(f"{1e3 * w:.1f}" for w in waits.values()) + " ms, below twice this "
            f"run's detection threshold ({1e3 * threshold:.1f} ms): not checkable here (more "
            "--iters lower the threshold)")}
    failures = addup_failures(cell, thresholds)
    if not SMALL_FLOOR * amount <= truth <= amount + max(thresholds.recovery_tol * amount,
                                                          threshold):
        failures.append(f"the delay added {1e3 * truth:.1f} ms to rank {late}'s {key} of the "
                        f"{1e3 * amount:.1f} asked (needs {SMALL_FLOOR:.0%} to "
                        f"{1 + thresholds.recovery_tol:.0%} of it)")
    for r, wait in waits.items():
        tolerance = max(thresholds.recovery_tol * wait, threshold)
        if not abs(grown[r] - wait) <= tolerance:
            failures.append(f"{key} grew {1e3 * grown[r]:.1f} ms on rank {r}, whose iteration "
                            f"grew {1e3 * wait:.1f} ms (needs within {1e3 * tolerance:.1f})")
    return {**cell, "failures": failures, "passed": not failures}
