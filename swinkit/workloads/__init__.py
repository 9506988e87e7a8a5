"""The workloads: config, model, data and instruments put together, one per measured
component, and the runs that compose them.

Inside a rank:
    ddp.py               the instrumented DDP iteration (the loop)
    ddp_setup.py         what a DDP rank builds before its loop
    ddp_options.py       how DDP itself is configured (bucket size, hooks, accumulation)
    paired_launch.py     DDP and local steps in one launch (Switch, schedule)
    meet.py              local steps that meet where DDP would hold the ranks
    rank_clocks.py       what the ranks agree on over gloo: clock offsets, when to stop
    inject.py            known costs put into a rank (data, compute, comm)
    delays.py            delays that occupy the device and measure what they took
    components.py        the components of a DDP iteration, measured where they run
    collective_timing.py collectives timed alone over the run's ranks
    allreduce.py         the gradient all-reduce in isolation
    forward_backward.py  SwinV2 forward/backward in one process; MFU
    loader_throughput.py the data loader's throughput, N loaders at once
    selftest.py          a light workload for testing the harness itself
    train.py             a short single-process training run
    errors.py            workload failures named (out of memory with rank and batch)
In the supervisor (launch, aggregate, sweep):
    ddp_run.py           launch the DDP iteration on N ranks and aggregate phases and blame
    ddp_sweep.py         the DDP iteration across world sizes
    engine_run.py        the same workload under DeepSpeed / DataParallel, and their sweeps
    engine_result.py     what engines differ in, read from a result
    sweep.py             world-size sweeps: what can run here, and what each gave
    attribution_run.py   measure what the attribution report needs
    whatif_run.py        predict, then run, each remedy
    remedies.py          the remedy catalogue (what-ifs)
    overhead.py          what the instrumentation costs
    describe.py          the workload as data
"""
