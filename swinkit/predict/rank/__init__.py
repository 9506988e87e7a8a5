"""What the predictor's timing launches run inside a rank (no model is built).

    probes.py            the timings at N': loaders, the buckets' all-reduces, the buffer
                         broadcast, the waits; the inter-node link across simulated nodes
    contention_probe.py  the backward/all-reduce contention rates at N', a stand-in for backward
    stand_in.py          a Swin block's kinds of work standing in for the model's compute
"""
