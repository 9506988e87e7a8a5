"""The predictor's launches, in the supervisor.

    held_out.py        predict world sizes not run; run them after and score (held out)
    held_out_parts.py  a prediction's parts: one target predicted, its miss, its run spec
    target_timing.py   what a prediction times at N' without the model: one launch, a Target
    stored.py          predict from a stored held-out report (ring model, nodes)
    internode.py       the inter-node link timed across two simulated nodes on localhost
    scorecard.py       K fresh held-out launches, scored and kept with commit, host, date
"""
