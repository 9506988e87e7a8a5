"""Experiments: runs composed into the numbers a report shows.

    attribution_run.py  measure what the attribution report needs (tools/attribute.py --run)
    whatif_run.py       predict, then run, each remedy
    remedies.py         the remedy catalogue (what-ifs); torch-free
    overhead.py         what the instrumentation costs
    precision_table.py  the precision table: the variants and one rank's DDP iteration per
                        precision (tools/gpu_check.py --parts precision)
    validate.py         the ground-truth matrix's runs (``swinkit validate``)
    converge_spec.py    ``swinkit converge``'s grid, target and budget, checked; LR rules
    converge.py         its launches: training to the target, step times; goodput
    provenance.py       what a saved result ran on: commit, machine, time, the host's load
"""
