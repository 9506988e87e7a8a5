"""The isolated components, one module each: its rank-side function and its sweep side by side
(each configuration runs in a fresh process, so a reader finds all of one measurement here).

    allreduce.py          the gradient all-reduce in isolation, flat and as DDP buckets
    forward_backward.py   SwinV2 forward/backward in one process, per precision; MFU
    peaks.py              MFU's denominator: the GEMM peak of the precision used
    precision_variants.py forward+backward per precision and heads layout, the optimizer
                          grouped three ways, in one process (the precision table)
    loader_throughput.py  the data loader's throughput, N loaders at once
    train.py              a short single-process training run
"""
