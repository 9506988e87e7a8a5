"""The ground-truth matrix's runs (``swinkit validate``): one launch per (world size, injection,
placement), each with the injection on every 2nd iteration, scored by
:mod:`swinkit.attribution.validation`; the cells that tell charging rules apart (two
stragglers: the pair and each delay alone; a small delay, with more iterations) by
:mod:`swinkit.attribution.validation_cells`.

Every spec is built and checked before the first process starts (a bad world size, case or
threshold is a ValueError naming the field). A case whose field the injection spec does not
know, and a cell that cannot mean anything at its world size, is recorded as skipped with the
reason; a failed launch is recorded as a failed cell and the matrix goes on.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from swinkit.attribution import validation as scoring
from swinkit.attribution import validation_cells as cells_
from swinkit.config import load_config
from swinkit.injection import KIND_BY_NAME, Injection, combine
from swinkit.input_checks import check_int
from swinkit.launch import LaunchConfig, LaunchError
from swinkit.experiments.provenance import foreign_load, git_commit, machine, now_utc
from swinkit.runs.ddp_run import DDPRunSpec, run_ddp

# Per injected iteration: well above the test preset's iteration-to-iteration noise on 2 CPU
# cores (tests/test_ddp.py's 120 ms; the iteration itself is ~50 ms there).
DEFAULT_AMOUNT_MS = 120.0


@dataclass(frozen=True)
class ValidateSpec:
    preset: str = "test"
    world_sizes: tuple[int, ...] = (1, 2)
    cases: tuple[str, ...] = scoring.CASES
    placements: tuple[str, ...] = scoring.PLACEMENTS
    amount_ms: float = DEFAULT_AMOUNT_MS     # per injected iteration
    small_ms: float = cells_.SMALL_MS        # the small-delay cell's
    pair_data_ms: float = cells_.PAIR_DATA_MS  # the two stragglers' loading delay
    iters: int = 10                          # measured: 5 injected, 5 clean
    warmup: int = 2
    oversubscribe: bool = False
    thresholds: scoring.Thresholds = field(default_factory=scoring.Thresholds)
    data_root: str | None = None
    wall_timeout_s: float = 600.0

    def validate(self) -> None:
        """Everything checkable before a process starts; ValueError names the field."""
        if not self.world_sizes:
            raise ValueError("world_sizes: give at least one world size")
        for ws in self.world_sizes:
            check_int("world_sizes", ws, 1)
        unknown = [c for c in self.cases if c not in scoring.CASES]
        if unknown or not self.cases:
            raise ValueError(f"cases: unknown {unknown or 'none given'}; choose from "
                             f"{', '.join(scoring.CASES)}")
        bad = [p for p in self.placements if p not in scoring.PLACEMENTS]
        if bad or not self.placements:
            raise ValueError(f"placements: unknown {bad or 'none given'}; choose from "
                             f"{', '.join(scoring.PLACEMENTS)}")
        for name in ("amount_ms", "small_ms", "pair_data_ms"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        check_int("iters", self.iters, 2)
        self.thresholds.validate()
        load_config(self.preset, self.data_root)  # its errors name the preset or the root
        for ws in self.world_sizes:  # cores or GPUs enough, unless oversubscribed
            try:
                self.run_spec(ws, "compute_ms", "all").validate()
            except ValueError as exc:
                raise ValueError(f"world_sizes: {ws}: {exc}") from None

    def pair_amount_ms(self, kind: str) -> float:
        """A delay of the two stragglers, per injected iteration: the loading one small enough
        that loading stays shorter than forward (see :data:`~swinkit.attribution.
        validation_cells.PAIR_DATA_MS`), the other the matrix's amount (its run alone is
        then the one-rank cell's)."""
        return self.pair_data_ms if kind == "data_ms" else self.amount_ms

    def injection(self, case: str, placement: str, world_size: int, images_per_rank: int,
                  amount_ms: float | None = None) -> Injection:
        """The case's injection (``amount_ms``: instead of the matrix's); a kind per sample
        (``data_ms``) has the amount split over them. The two stragglers: both delays
        (:func:`~swinkit.attribution.validation_cells.pair_ranks`), each on its own rank; the
        small delay: ``small_ms`` on the last rank."""
        if case == scoring.TWO_STRAGGLERS:
            return combine([self.injection(kind, str(rank), world_size, images_per_rank,
                                           self.pair_amount_ms(kind))
                            for kind, rank in cells_.pair_ranks(world_size)])
        if case == scoring.SMALL_DELAY:
            return Injection(**{cells_.SMALL_KIND: self.small_ms}, ranks=(world_size - 1,),
                             every=2)
        amount = self.amount_ms if amount_ms is None else amount_ms
        value = amount / (images_per_rank if KIND_BY_NAME[case].per_sample else 1)
        ranks = (None if placement == "all" else (world_size - 1,) if placement == "one"
                 else (int(placement),))
        return Injection(**{case: value}, ranks=ranks, every=2)

    def run_spec(self, world_size: int, case: str, placement: str,
                 images_per_rank: int = 1, amount_ms: float | None = None,
                 scale: int = 1) -> DDPRunSpec:
        """The run of one cell (``placement``: all, one, or a rank's number; ``scale``: times
        the matrix's iterations, as the two stragglers' delays alone run)."""
        launch = LaunchConfig(allow_oversubscribe=self.oversubscribe,
                              wall_timeout_s=self.wall_timeout_s)
        scale = {scoring.SMALL_DELAY: cells_.SMALL_ITERS,
                 scoring.TWO_STRAGGLERS: cells_.PAIR_ITERS}.get(case, scale)
        iters = self.iters * scale
        # workers 0: data_ms with every=2 needs the loading in step with the iterations
        return DDPRunSpec(preset=self.preset, nproc_per_node=world_size, iters=iters,
                          warmup=self.warmup, workers=0, data_root=self.data_root,
                          injection=self.injection(case, placement, world_size, images_per_rank,
                                                   amount_ms),
                          launch=launch)


def skip_reason(case: str, placement: str, world_size: int) -> str | None:
    """Why a cell is not run, or None."""
    if world_size == 1 and case == "comm_ms":
        # measured: the delay does land in exposed_comm there (recovery 1.0), but a group of
        # one moves nothing and nobody waits: it would check the delay, not blame
        return ("world size 1 has no communication: one rank's all-reduce moves nothing and "
                "makes nobody wait, so there is no attribution of communication to check")
    if world_size == 1 and case in (scoring.TWO_STRAGGLERS, scoring.SMALL_DELAY):
        return "at world size 1 no rank waits for another: no charging of waits to check"
    if world_size == 1 and placement == "one":
        return "at world size 1 the last rank is every rank: the 'all' cell is this one"
    return None


def shares_cores(world_size: int) -> bool:
    """Whether ``world_size`` single-threaded CPU ranks outnumber this process's cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return world_size > (cores or 1)


def run_validation(spec: ValidateSpec, progress=print) -> dict:
    """Every cell of the matrix; returns the validation record (see :func:`record`)."""
    spec.validate()
    started = now_utc()
    plan = [(ws, case, placement) for ws in spec.world_sizes for case in spec.cases
            for placement in _placements(spec, case)]
    return record(spec, run_cells(spec, plan, progress), started)


def _placements(spec: ValidateSpec, case: str) -> tuple[str, ...]:
    """The placements a case runs in: the two stragglers and the small delay place their own
    delays (one row each)."""
    return {scoring.TWO_STRAGGLERS: ("pair",), scoring.SMALL_DELAY: ("one",)}.get(
        case, spec.placements)


def run_cells(spec: ValidateSpec, plan: list[tuple[int, str, str]], progress=print) -> list[dict]:
    """The cells of ``plan`` ((world size, case, placement) each), run or skipped in order. A
    run two cells need (the two stragglers' delay alone, a one-rank cell) is made once."""
    images = load_config(spec.preset, spec.data_root).images_per_rank
    cells, runs = [], {}
    for n, (ws, case, placement) in enumerate(plan, 1):
        head = f"[{n}/{len(plan)}] N={ws} {case} on {_where(case, placement, ws)}"
        reason = skip_reason(case, placement, ws)
        if reason:
            cells.append(scoring.skipped_cell(ws, case, placement, reason))
            progress(f"{head}: skipped ({reason})")
            continue
        cells.append(_run_cell(spec, ws, case, placement, images, head, progress, runs))
    return cells


def bench_cells(preset: str, world_size: int, names: list[str], oversubscribe: bool,
                progress=print) -> dict[str, dict]:
    """For ``benchmarks/bench_validate.py``: the cells named ``case/placement`` (e.g.
    ``compute_ms/one``) at one world size, by name, with the default amounts and thresholds."""
    plan = [(world_size, *name.split("/")) for name in names]
    spec = ValidateSpec(preset=preset, world_sizes=(world_size,),
                        cases=tuple(dict.fromkeys(c for _, c, _ in plan)),
                        placements=tuple(dict.fromkeys(p for _, _, p in plan
                                                       if p in scoring.PLACEMENTS)) or ("one",),
                        oversubscribe=oversubscribe)
    spec.validate()
    return dict(zip(names, run_cells(spec, plan, progress)))


def _run_cell(spec, ws, case, placement, images, head, progress, runs: dict) -> dict:
    t0 = time.perf_counter()
    load = foreign_load()

    def run(case_, placement_, amount_ms=None, scale=1):
        key = (ws, case_, placement_, amount_ms, scale)  # the same spec: made once per matrix
        if key not in runs:
            runs[key] = run_ddp(spec.run_spec(ws, case_, placement_, images, amount_ms, scale),
                                progress=lambda s: None)
        return runs[key]
    try:
        cell = _score(spec, ws, case, placement, run)
    except LaunchError as exc:
        cell = scoring.failed_cell(ws, case, placement, f"run failed: {exc.diagnosis.summary}")
    else:
        cell["oversubscribed"] = shares_cores(ws)
    cell["foreign_cores"] = load()
    busy = (f"; another process took {cell['foreign_cores']:.1f} cores meanwhile"
            if cell["foreign_cores"] > scoring.BUSY_CORES else "")
    progress(f"{head}: {_summary(cell)} ({time.perf_counter() - t0:.0f} s{busy})")
    return cell



def _score(spec: ValidateSpec, ws: int, case: str, placement: str, run) -> dict:
    """One cell scored from its run(s) (``run(case, placement)`` makes or reuses one)."""
    t = spec.thresholds
    if case == scoring.TWO_STRAGGLERS:
        # each delay alone, over as many iterations as the pair's run
        alone = {kind: run(kind, "one" if rank == ws - 1 else str(rank),
                           None if spec.pair_amount_ms(kind) == spec.amount_ms
                           else spec.pair_amount_ms(kind), cells_.PAIR_ITERS)
                 for kind, rank in cells_.pair_ranks(ws)}
        return cells_.score_pair(run(case, placement), alone, t)
    if case == scoring.SMALL_DELAY:
        return cells_.score_small(run(case, placement), spec.small_ms / 1e3, t)
    return scoring.score_cell(run(case, placement), case, placement, spec.amount_ms / 1e3, t)





def _where(case: str, placement: str, ws: int) -> str:
    if case == scoring.TWO_STRAGGLERS:
        return " and ".join(f"rank {rank}" for _, rank in cells_.pair_ranks(max(ws, 2)))
    return "all ranks" if placement == "all" else f"rank {ws - 1}"


def _summary(cell: dict) -> str:
    if "skipped" in cell:   # no verdict (shown with its figures where it has them)
        return f"skipped: {cell['skipped']}"
    if "share" not in cell:
        return "FAIL: " + "; ".join(cell["failures"])
    if "late" in cell:  # the two stragglers
        named = ", ".join(f"{r}/{p}" for r, p in cell["late"].items())
        text = (f"{cell['share']:.0%} on {cell['expected']}, late {named}, grew "
                f"{1e3 * cell['added_s']:.0f} ms (alone: sum {1e3 * cell['sum_alone_s']:.0f}, "
                f"max {1e3 * cell['max_alone_s']:.0f})")
    else:
        s = cell["straggler"]
        named = "no straggler" if s["rank"] is None else f"straggler {s['rank']}/{s['phase']}"
        text = (f"{cell['share']:.0%} on {cell['expected']}, recovery {cell['recovery']:.2f}, "
                f"{named}")
    return f"{text}: PASS" if cell["passed"] else f"{text}: FAIL ({'; '.join(cell['failures'])})"


def record(spec: ValidateSpec, cells: list[dict], started: str) -> dict:
    """The saved validation: the cells with what they ran on (machine, commit, settings)."""
    return {"kind": "swinkit-validation", "preset": spec.preset,
            "world_sizes": list(spec.world_sizes), "cases": list(spec.cases),
            "amount_ms": spec.amount_ms, "small_ms": spec.small_ms,
            "pair_data_ms": spec.pair_data_ms, "iters": spec.iters,
            "warmup": spec.warmup,
            "thresholds": spec.thresholds.to_dict(), "oversubscribe": spec.oversubscribe,
            "shared_cores": [ws for ws in spec.world_sizes if shares_cores(ws)],
            "machine": machine(), **git_commit(), "started": started, "finished": now_utc(),
            "cells": cells, "tally": scoring.tally(cells)}
