"""Where the scaling goes, as numbers: no launching, no rendering, no torch.

    scaling.py      speedup, efficiency, Karp-Flatt serial fraction
    loss_split.py   per-world-size rows and the split of lost time over components
    headroom.py     loader supply vs model demand
    prediction.py   the iteration predicted from isolated components (the oracle)
    recommend.py    advice ranked by the efficiency it could recover
    grad_accum.py   communication per image by gradient accumulation K, against the ideal 1/K
    thesis.py       the thesis's published figures and its Table 3 projection
    inputs.py       measurements read from asv's stored results
    asv_names.py    the benchmark ids read here (checked against benchmarks/ by a test)
    blame.py        each wait charged to the rank and phase that caused it
    blame_of_run.py a run's blame figures from its ranks' results (recorded runs read again)
    neighbours.py   an injection's cost from injected and clean neighbouring iterations
    oracle.py       the iteration replayed from its components, rank by rank
    overlap.py      backward and the all-reduces overlapping, with their contention
    whatif.py       a remedy's prediction held to its run
    precision_shift.py  the lost time's split in a precision what-if beside the baseline's
    traffic.py      bytes moved per iteration by engine (DDP buckets, ZeRO, DataParallel)
    analysis.py     the report as data: everything above for one set of inputs
    validation.py   the ground-truth matrix scored: blame against injected causes
    validation_cells.py the cells that tell charging rules apart: two stragglers, a small delay
    noise_scale.py  the gradient noise scale, Pollux's statistical efficiency, goodput
    convergence.py  steps to a held-out target per cell, efficiency in steps and time
"""
