"""The predictor's numbers: no launching, no rendering, no torch.

    extrapolate.py      the iteration at a world size not run (held out), from a smaller run
    assumptions.py      what a held-out prediction takes for granted, in words
    rank_profiles.py    a basis's ranks as the per-rank work at N'; the rhythm of its meetings
    order_statistics.py the slowest of n draws from measured samples (median, mean)
    injected_costs.py   injections in a prediction: added at N', taken off the basis
    pooled_targets.py   a launch's timings at N' pooled for its prediction
    scores.py           a held-out prediction scored: accuracy, worst launch, repeatability
    miss_split.py       where a held-out prediction missed, input by input
    scorecard.py        a held-out prediction's scorecard: worst launch, range, naive beside
    links.py            the ring all-reduce from link figures, multi-node, the thesis projection
    device_compute.py   a device's compute per iteration in a precision: FLOPs / (MFU x peak)
"""
