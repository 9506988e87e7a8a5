"""The same workload under other data-parallel engines, beside DDP, in the same vocabulary.

    spec.py            EngineSpec (ddp, deepspeed + ZeRO stage, dp, dp-vanilla; grad_accum),
                       validated before any process starts; engine keys for the comparison
    traffic.py         bytes moved per iteration (message and ring wire bytes per rank): DDP
                       buckets, ZeRO stages, DataParallel's copies; torch-free arithmetic
    collectives.py     every collective of an engine's comm backend on the rank's timeline
    deepspeed_rank.py  the DeepSpeed (ZeRO 0/1/2) rank loop: same phases, DeepSpeed's timers
                       and comms logger beside them
    dp.py              torch.nn.DataParallel (one process, N GPUs): the loop
    dp_parts.py        DataParallel's pure parts: batch split, loss gather, copy bytes
    dp_vanilla.py      the same from torch.nn.parallel primitives, each one timed
    compare.py         engines side by side: one table, one figure

Dispatch and aggregation: :mod:`swinkit.workloads.engine_run`; the command line:
:mod:`swinkit.cli.engines`.
"""
