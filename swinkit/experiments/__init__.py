"""Experiments: runs composed into the numbers a report shows.

    attribution_run.py  measure what the attribution report needs (tools/attribute.py --run)
    whatif_run.py       predict, then run, each remedy
    predict_run.py      predict world sizes not run; run them after and score (held out)
    held_out_parts.py   a held-out prediction's parts: one target predicted, its miss, its spec
    predict_in_launch.py the in-launch prediction (not held out): the run at 1 inside the launch
    predict_stored.py   predict from a stored held-out report (ring model, nodes)
    injected_costs.py   injections in a held-out prediction (added at N', taken off the basis)
    target_timing.py    what a prediction times at N' without the model: one launch, a Target
    target_probes.py    what a prediction times at N' without the model (the ranks' side)
    contention_probe.py the backward/all-reduce contention rates at N', a stand-in for backward
    internode.py        the inter-node link timed across two simulated nodes on localhost
    remedies.py         the remedy catalogue (what-ifs); torch-free
    overhead.py         what the instrumentation costs
    validate.py         the ground-truth matrix's runs (``swinkit validate``)
    scorecard.py        K fresh held-out launches, scored and kept with commit, host, date
    converge_spec.py    ``swinkit converge``'s grid, target and budget, checked; LR rules
    converge.py         its launches: training to the target, step times; goodput
    provenance.py       what a saved result ran on: commit, machine, time, the host's load
"""
