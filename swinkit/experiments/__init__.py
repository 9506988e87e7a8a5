"""Experiments: runs composed into the numbers a report shows.

    attribution_run.py  measure what the attribution report needs (tools/attribute.py --run)
    whatif_run.py       predict, then run, each remedy
    remedies.py         the remedy catalogue (what-ifs); torch-free
    overhead.py         what the instrumentation costs
    validate.py         the ground-truth matrix's runs (``swinkit validate``)
"""
