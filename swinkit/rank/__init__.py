"""What runs inside one rank's process: the training loops under each engine and everything
they put on their timeline. Nothing here launches a process or reads another rank's result.

    skeleton.py           the course every rank loop shares: measured window, clock reads,
                          the result fields all engines agree on
    ddp.py                the instrumented DDP iteration (the loop: set up, each step of
                          its plan, read out)
    ddp_setup.py          what a DDP rank builds before its loop, from its run spec
    ddp_readout.py        what a DDP rank returns: its plan's steps read out by kind
    plan.py               the step plan as a value: step kinds, line-ups, switches, read-outs
    step_switch.py        a paired launch's switch: DDP and local steps of one model
    meet.py               local steps that meet where DDP would hold the ranks
    rank_clocks.py        what the ranks agree on over gloo: clock offsets, when to stop
    inject.py             known costs put into a rank: each kind's hook (HOOKS), by the table
    inject_comm.py        the collectives' injections: late launches, a slower link
    delays.py             delays that occupy the device and measure what they took
    components.py         the components of a DDP iteration, measured where they run
    collective_timing.py  collectives timed alone over the run's ranks
    deepspeed.py          the DeepSpeed (ZeRO 0/1/2) rank loop, DeepSpeed's timers beside it
    fsdp2.py              the FSDP2 (torch's fully_shard) rank loop
    dp.py                 torch.nn.DataParallel (one process, N GPUs): the loop
    dp_parts.py           DataParallel's pure parts: batch split, loss gather, copy bytes
    dp_vanilla.py         the same from torch.nn.parallel primitives, each one timed
    engine_collectives.py every collective of an engine's comm backend on the timeline
    devices.py            whether the machine has the devices (torch the parts) an engine needs
    selftest.py           a light workload for testing the harness itself
    errors.py             workload failures named (out of memory with rank and batch)
    converge.py           training to a held-out target (``swinkit converge``'s ranks)
    held_out.py           the held-out loss and mIoU on the validation split, shared out
    grad_noise.py         the gradient norms the noise scale needs, read in DDP's comm hook
"""
