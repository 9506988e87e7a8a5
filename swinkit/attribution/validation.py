"""The ground-truth matrix: blame scored against injected, known causes (``swinkit validate``).

Each cell is one run with one injection on every 2nd iteration (``every=2``): the added cost is
read from injected vs clean neighbouring iterations of that run (``injection_effect``, see
:mod:`swinkit.attribution.neighbours`), on every rank, the ones that wait too, so a busy
machine's drift cancels. A cell's row of the confusion matrix is the added time split by blame
key (the ranks' median), as shares of the iteration's added time; ``residual`` is what the
per-key medians leave unplaced, so the row adds up to 100 %.

A cell passes when (thresholds stated, :class:`Thresholds`):

* the share of the added time blamed on the injected cause lies between ``min_share`` (85 %)
  and ``max_share`` (115 %): above it, blame put more there than the iteration grew;
* the residual lies within ``max_residual`` (10 %) either way;
* recovery, the added time blamed on the injected cause over the injected amount actually
  measured (the run's ``injected_measured_s``; the requested figure where the injection
  measures nothing, e.g. ``data_ms``'s sleep in the loader), is within ``1 +- recovery_tol``,
  on every rank: the ranks that waited for a one-rank injection must find the wait charged to
  it, as the injected rank finds its own slower phase;
* every rank's blame adds up to its iteration, each measured iteration, within
  ``addup_tol_s`` (blame moves seconds between causes, never makes or loses any);
* for a one-rank injection, blame names that rank as the straggler, late in the injected phase
  (an all-rank injection makes nobody late: no straggler is required).

Cells that tell charging rules apart (two late ranks at once, a delay near the noise floor):
:mod:`swinkit.attribution.validation_cells`. Numbers only, no torch: the runs are
:mod:`swinkit.experiments.validate`'s, the rendering :mod:`swinkit.report.validation`'s.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from swinkit.injection import KIND_BY_NAME, KINDS
from swinkit.measure.phases import BLAME_KEYS

# injection kind -> the blame key its added time belongs to (the kinds' table says)
EXPECTED = {kind.name: kind.phase for kind in KINDS}
# cells that tell charging rules apart (:mod:`~swinkit.attribution.validation_cells`): two
# late ranks at once in different phases; a small delay near the noise floor
TWO_STRAGGLERS, SMALL_DELAY = "two_stragglers", "small_backward"
CASES = tuple(EXPECTED) + (TWO_STRAGGLERS, SMALL_DELAY)
PLACEMENTS = ("all", "one")          # every rank; the last rank alone
ROW_KEYS = BLAME_KEYS + ("residual",)
NOT_VALIDATED = "not validated here: run swinkit validate"
# Another process's CPU (cores' worth) above which a cell did not run on an idle machine: a rank
# that waits then frees its core for that process, so an injection costs less than its amount.
# Shown beside the verdict, never used to excuse it.
BUSY_CORES = 0.1


@dataclass(frozen=True)
class Thresholds:
    min_share: float = 0.85      # of the added time on the injected cause, at least
    max_share: float = 1.15      # and at most: the cause grew by more than the iteration
    max_residual: float = 0.10   # |residual| of the row: what the per-key medians leave unplaced
    recovery_tol: float = 0.20   # recovery within 1 +- this, on every rank
    addup_tol_s: float = 0.001   # a rank's blame against its iteration, each iteration

    def validate(self) -> "Thresholds":
        if not 0.0 < self.min_share <= 1.0:
            raise ValueError(f"min_share must lie in (0, 1], got {self.min_share!r}")
        if not self.max_share >= 1.0:
            raise ValueError(f"max_share must be >= 1, got {self.max_share!r}")
        if not 0.0 < self.max_residual < 1.0:
            raise ValueError(f"max_residual must lie in (0, 1), got {self.max_residual!r}")
        if not 0.0 < self.recovery_tol < 1.0:
            raise ValueError(f"recovery_tol must lie in (0, 1), got {self.recovery_tol!r}")
        if not self.addup_tol_s > 0.0:
            raise ValueError(f"addup_tol_s must be > 0, got {self.addup_tol_s!r}")
        return self

    def to_dict(self) -> dict:
        return asdict(self)


def matrix_row(effect: dict) -> dict[str, float]:
    """The added time split by blame key, as shares of the iteration's added time.

    >>> row = matrix_row({"added_iter_s": 0.1, "growth_s": {"forward": 0.09, "backward": 0.02}})
    >>> round(row["forward"], 6), round(row["backward"], 6), round(row["residual"], 6)
    (0.9, 0.2, -0.1)
    """
    added = effect["added_iter_s"]
    if added <= 0:  # nothing was added: no split to state
        return {k: float("nan") for k in ROW_KEYS}
    row = {k: effect["growth_s"].get(k, 0.0) / added for k in BLAME_KEYS}
    row["residual"] = 1.0 - sum(row.values())
    return row


def injected_amount(result: dict, case: str, requested_s: float) -> tuple[float, str]:
    """Seconds one injected iteration received, and where that figure comes from.

    The run measures a device-occupying delay per call (``injected_measured_s``: ``compute``,
    ``comm``, ``backward``, ``optimizer``); one call per iteration (comm: the last bucket's
    delay is the exposed one). ``data_ms`` sleeps in the loader and measures nothing: the
    requested amount stands.
    """
    measured = (result.get("injected_measured_s") or {}).get(KIND_BY_NAME[case].measured)
    return (measured, "measured") if measured else (requested_s, "requested")


def rank_recovery(effect: dict, key: str, amount_s: float) -> dict[str, float]:
    """Per rank, the added time blamed on ``key`` over ``amount_s``: a waiting rank's wait
    charged to the cause, the injected rank's own slower phase.

    >>> rank_recovery({"per_rank": {"0": {"growth_s": {"data_wait": 0.06}},
    ...                             "1": {"growth_s": {"data_wait": 0.12}}}}, "data_wait", 0.12)
    {'0': 0.5, '1': 1.0}
    """
    return {r: v["growth_s"].get(key, 0.0) / amount_s
            for r, v in (effect.get("per_rank") or {}).items()}


def score_cell(result: dict, case: str, placement: str, requested_s: float,
               thresholds: Thresholds = Thresholds()) -> dict:
    """One cell of the matrix from one run's result (``run_ddp``'s dict).

    Returns the cell: ``row`` (shares by blame key), ``share`` (on the injected cause),
    ``recovery`` (the ranks' median) and ``rank_recovery`` (each rank's), ``amount_s`` and its
    ``amount_source``, ``added_s``, ``addup_s``, the ``straggler`` named (rank, phase),
    ``passed`` and ``failures`` (why not, one line each).
    """
    world = result["world_size"]
    key = EXPECTED[case]
    cell = {"world_size": world, "case": case, "placement": placement, "expected": key,
            "requested_s": requested_s}
    effect = result.get("injection_effect")
    if not effect:
        return {**cell, "passed": False, "failures": ["no injected iteration had a clean "
                                                      "neighbour: nothing to compare"]}
    amount, source = injected_amount(result, case, requested_s)
    row = matrix_row(effect)
    straggler = result.get("straggler") or {}
    cell.update(row=row, share=row[key], added_s=effect["added_iter_s"],
                blamed_s=effect["growth_s"].get(key, 0.0), pairs=effect.get("pairs"),
                amount_s=amount, amount_source=source,
                recovery=effect["growth_s"].get(key, 0.0) / amount,
                rank_recovery=rank_recovery(effect, key, amount),
                # shown, not judged: on a shared machine the iteration grows by less than the
                # amount (a waiting rank's core serves another process) while blame is right
                iteration_recovery=effect["added_iter_s"] / amount,
                addup_s=result.get("blame_addup_s"), noise_s=_noise(effect, key),
                straggler={"rank": straggler.get("rank"), "phase": straggler.get("phase")})
    cell["failures"] = (split_failures(cell, [key], thresholds)
                        + recovery_failures(cell, thresholds) + addup_failures(cell, thresholds))
    if placement == "one":
        cell["failures"] += straggler_failures(cell["straggler"], world - 1, key)
    cell["passed"] = not cell["failures"]
    return cell


def _noise(effect: dict, key: str) -> dict | None:
    """The run's detection thresholds for the iteration and ``key`` (seconds), or None."""
    noise = effect.get("noise_s")
    return {"iteration": noise["iteration"], key: noise[key]} if noise else None


def split_failures(cell: dict, keys: list[str], t: Thresholds) -> list[str]:
    """The row's verdict: the iteration grew, the share on ``keys`` (together) within
    [min_share, max_share], the residual within max_residual."""
    if not cell["added_s"] > 0:
        return [f"the iteration did not grow ({1e3 * cell['added_s']:+.0f} ms): no added "
                "time to split"]
    out, share, name = [], cell["share"], "+".join(keys)
    if not t.min_share <= share <= t.max_share:
        shares = {k: v for k, v in cell["row"].items() if v == v}  # NaN: nothing added
        best = max(shares, key=shares.get, default=None)
        most = f"; most on {best}" if best not in keys and share < t.min_share else ""
        bound = (f">= {t.min_share:.0%}" if share < t.min_share else f"<= {t.max_share:.0%}")
        out.append(f"{share:.0%} of the added time on {name} (needs {bound}){most}")
    residual = cell["row"]["residual"]
    if not abs(residual) <= t.max_residual:
        out.append(f"residual {residual:+.0%} of the added time (needs within "
                   f"+-{t.max_residual:.0%})")
    return out


def recovery_failures(cell: dict, t: Thresholds) -> list[str]:
    """Recovery within 1 +- recovery_tol, of the ranks' median and on every rank."""
    out = []
    if not abs(cell["recovery"] - 1.0) <= t.recovery_tol:
        out.append(f"recovery {cell['recovery']:.2f} of the {cell['amount_source']} "
                   f"{1e3 * cell['amount_s']:.0f} ms (needs 1 +- {t.recovery_tol:g})")
    off = {r: v for r, v in (cell.get("rank_recovery") or {}).items()
           if not abs(v - 1.0) <= t.recovery_tol}
    if off:
        out.append("recovery on rank " + ", ".join(f"{r} {v:.2f}" for r, v in off.items())
                   + f" (needs 1 +- {t.recovery_tol:g} on every rank)")
    return out


def addup_failures(cell: dict, t: Thresholds) -> list[str]:
    """Every rank's blame adds up to its iteration (unknown in results from before it was
    recorded: not judged)."""
    gap = cell.get("addup_s")
    if gap is None or gap <= t.addup_tol_s:
        return []
    return [f"a rank's blame misses its iteration by {1e3 * gap:.1f} ms (needs <= "
            f"{1e3 * t.addup_tol_s:g} ms: blame must move seconds, not make them)"]


def straggler_failures(straggler: dict, rank: int, key: str) -> list[str]:
    """Blame names ``rank`` as the straggler, late in ``key``."""
    got = (straggler["rank"], straggler["phase"])
    return [] if got == (rank, key) else [
        f"straggler named {got[0]}/{got[1]}, injected {rank}/{key}"]


def skipped_cell(world: int, case: str, placement: str, reason: str) -> dict:
    """A cell not run, with the reason (shown, never counted as passed or failed)."""
    return {"world_size": world, "case": case, "placement": placement,
            "expected": EXPECTED.get(case), "skipped": reason}


def failed_cell(world: int, case: str, placement: str, reason: str) -> dict:
    """A cell whose run failed (a rank died, a timeout): counted as failed."""
    return {"world_size": world, "case": case, "placement": placement,
            "expected": EXPECTED.get(case), "passed": False, "failures": [reason]}


def tally(cells: list[dict]) -> dict:
    """``{"passed", "failed", "skipped", "inconclusive", "run"}`` counts; ``run`` = passed +
    failed; ``inconclusive`` counts the skipped cells that could not be checked on this run (a
    delay under the host's noise), apart from those that mean nothing at their world size."""
    passed = sum(1 for c in cells if c.get("passed") is True)
    skipped = sum(1 for c in cells if "skipped" in c)
    inconclusive = sum(1 for c in cells if c.get("inconclusive"))
    failed = len(cells) - passed - skipped
    return {"passed": passed, "failed": failed, "skipped": skipped,
            "inconclusive": inconclusive, "run": passed + failed}


def all_passed(validation: dict) -> bool:
    """Every cell that ran passed, at least one ran, and none was inconclusive: a cell the
    host's noise hid is the one that tells a charging rule apart (the small delay), so a
    matrix without it has not shown what it is there to show."""
    t = tally(validation["cells"])
    return t["run"] > 0 and t["failed"] == 0 and t["inconclusive"] == 0


def default_path(results_dir: str | Path, host: str, commit: str) -> Path:
    """Where a validation of (host, commit) is saved: ``<results>/validation/<host>-<commit>``."""
    return Path(results_dir) / "validation" / f"{host}-{commit[:12]}.json"


def latest_validation(results_dir: str | Path, host: str, commit: str) -> dict | None:
    """The newest saved validation of this host at this commit, or None.

    Reads every ``<results_dir>/validation/*.json`` (unreadable ones are passed over) and keeps
    those whose ``machine.hostname`` is ``host`` and whose commit is ``commit`` (either may be
    abbreviated); newest by ``finished``.
    """
    folder = Path(results_dir) / "validation"
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text())
            same = (data["machine"]["hostname"] == host
                    and _same_commit(data.get("commit") or "", commit or ""))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if same:
            found.append(data)
    return max(found, key=lambda d: d.get("finished") or "") if found else None


def _same_commit(a: str, b: str) -> bool:
    n = min(len(a), len(b))
    return n >= 7 and a[:n] == b[:n]


def validation_status_line(validation: dict | None) -> str:
    """One line for a report: how far its attribution was checked on this machine and commit.

    >>> validation_status_line(None)
    'not validated here: run swinkit validate'
    """
    if not validation:
        return NOT_VALIDATED
    t = tally(validation["cells"])
    sizes = ", ".join(str(ws) for ws in validation.get("world_sizes", []))
    when = (validation.get("finished") or "")[:10]
    extra = (f", {t['skipped']} skipped" if t["skipped"] else "") + (
        f" ({t['inconclusive']} inconclusive: more --iters)" if t["inconclusive"] else "")
    return (f"validated here at this commit: {t['passed']}/{t['run']} cells pass{extra} "
            f"(preset {validation.get('preset')}, world sizes {sizes}"
            f"{', ' + when if when else ''})")
