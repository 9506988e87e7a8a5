"""Instruments that know nothing of the workload: clocks, timelines, timers, statistics,
samplers, and the hooks that put DDP's and SyncBN's collectives on a timeline.

    phases.py      the words an iteration is measured in: phases and blame keys (torch-free)
    clocks.py      host, CUDA-event and null clocks; the hosts' offsets and their drift
    timeline.py    one rank's iterations: phase marks and collectives, read as host seconds
    timing.py      the one timing loop of the isolated benchmarks; device-event timing
    ddp_hooks.py   DDP's gradient buckets, buffer broadcast and reducer timers on a timeline
    bucket_spans.py  each bucket's all-reduce as the run had it, from the ranks' timelines
    sync_bn.py     SyncBN's collectives on a timeline (not its compute)
    contention.py  backward and the all-reduces slowing each other; side streams on GPU
    samplers.py    CPU utilisation (psutil) and GPU utilisation (NVML, by UUID)
    memory.py      peak memory per rank and the model-state bytes ZeRO shards
    aggregate.py   phases across ranks: medians, skew
    stats.py       summaries of repeated measurements with their spread
"""
