"""The predictor: world sizes nobody has run, predicted from smaller runs and timings at the
target size made without the model, and scored when the run is made afterwards (held out).

Fenced off from the core: it launches its runs as any user of the core does, through a run
spec (:class:`swinkit.runs.ddp_run.DDPRunSpec`: the paired plan, its components measured
beside the DDP steps) and reads what the core keeps of a run for it (the basis,
:func:`swinkit.runs.component_costs.basis_of`); no core module imports it. Its own launches
(the timings at N') have rank entries of their own. One subpackage per side of the process
boundary, as the core's layers:

    numbers/     torch-free: the model, its parts, its scores, the ring model, the scorecard
    rank/        what the timing launches' ranks run (no model): loaders, collectives, stand-ins
    supervisor/  the launches: held-out series, timings at N', stored reports, simulated nodes
    report/      rendering only: the prediction's and the scorecard's text
"""
