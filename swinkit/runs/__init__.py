"""The supervisor's side of a run: what to launch (specs checked before any process starts),
launching it on N ranks, and aggregating what the ranks measured; sweeps over world sizes.

    ddp_run.py       the DDP iteration on N ranks: phases, blame, straggler, DDP's timers
    paired_parts.py  a paired launch's local steps read as a run; step times
    ddp_sweep.py     the DDP iteration across world sizes
    engine_records.py every engine, one record each (entry, launch shape, options, traffic
                     model, instruments): the one place engines are named
    engine_spec.py   which engine runs the workload, checked against its record
    engine_run.py    the same workload under each engine as its record says, and sweeps
    engine_result.py what engines differ in, read from a result
    component_costs.py the component costs of a local/paired run; the oracle's prediction
    sweep.py         world-size sweeps: what can run here, and what each gave
    describe.py      the workload as data: what a preset trains, what a step costs
"""
