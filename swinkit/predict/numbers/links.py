"""Communication where nothing can be timed: the ring all-reduce from a link's bandwidth and
latency (alpha-beta), across nodes, and the thesis's table as a projection.

A ring all-reduce of B bytes over N ranks sends 2(N - 1) messages of B / N per rank, one after
another (reduce-scatter, then all-gather), so with latency a and bandwidth b per link

    t(N) = 2 (N - 1) / N x B / b + 2 (N - 1) x a

(Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication Operations in
MPICH", 2005; nccl-tests' bus bandwidth is the same factor). Across nodes the ring passes
every node's boundary, and each step waits for its slowest hop: with more than one node the
inter-node link's figures bind every step (one ring, so each node's link carries one stream in
each direction and is not shared between the node's ranks). Numbers only: no torch.
"""
from __future__ import annotations

from dataclasses import dataclass

from swinkit.predict.numbers.extrapolate import Target


@dataclass(frozen=True)
class Link:
    """A link's bandwidth (GB/s, 1e9 bytes per second) and latency per message (seconds)."""
    bandwidth_gbps: float
    latency_s: float

    def __post_init__(self):
        if not self.bandwidth_gbps > 0:
            raise ValueError(f"link bandwidth_gbps must be > 0, got {self.bandwidth_gbps!r}")
        if not self.latency_s >= 0:
            raise ValueError(f"link latency_s must be >= 0, got {self.latency_s!r}")


def ring_allreduce_s(nbytes: float, n: int, link: Link) -> float:
    """Seconds of a ring all-reduce of ``nbytes`` over ``n`` ranks (0 for one rank).

    >>> ring_allreduce_s(1e9, 2, Link(bandwidth_gbps=10, latency_s=0.0))  # 1 GB at 10 GB/s
    0.1
    """
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / (link.bandwidth_gbps * 1e9) + 2 * (n - 1) * link.latency_s


def fit_link(points: list[tuple[float, int, float]]) -> Link:
    """The link whose ring model fits measured (bytes, ranks, seconds) best, by least squares
    on t = x / b + y x a with x = 2 (N - 1) / N x bytes, y = 2 (N - 1)."""
    rows = [(2 * (n - 1) / n * b, 2 * (n - 1), t) for b, n, t in points if n > 1]
    if len(rows) < 2:
        raise ValueError("fit_link needs at least 2 measured points at more than one rank")
    sxx = sum(x * x for x, _, _ in rows)
    sxy = sum(x * y for x, y, _ in rows)
    syy = sum(y * y for _, y, _ in rows)
    sxt = sum(x * t for x, _, t in rows)
    syt = sum(y * t for _, y, t in rows)
    det = sxx * syy - sxy * sxy
    if det == 0:
        raise ValueError("fit_link: the points do not separate bandwidth from latency "
                         "(vary the bytes)")
    inv_b = (sxt * syy - syt * sxy) / det
    a = (sxx * syt - sxy * sxt) / det
    if inv_b <= 0 or a < 0:
        raise ValueError("fit_link: the fitted bandwidth or latency is negative (the points' "
                         "noise exceeds what their sizes separate)")
    return Link(1 / inv_b / 1e9, a)


def fit_link_or_bandwidth(points: list[tuple[float, int, float]]) -> tuple[Link, str]:
    """:func:`fit_link`, or where the points cannot separate latency from bandwidth (too few,
    equal sizes, noise) bandwidth alone over all of them, latency 0. Returns the link and
    which fit it is ("bandwidth and latency" or "bandwidth only").

    >>> fit_link_or_bandwidth([(1e9, 2, 0.5), (1e9, 2, 0.5)])  # one size: bandwidth only
    (Link(bandwidth_gbps=2.0, latency_s=0.0), 'bandwidth only')
    """
    try:
        return fit_link(points), "bandwidth and latency"
    except ValueError as exc:
        x = sum(2 * (n - 1) / n * b for b, n, _ in points if n > 1)
        t = sum(s for _, n, s in points if n > 1)
        if x > 0 and t > 0:
            return Link(x / t / 1e9, 0.0), "bandwidth only"
        raise ValueError(f"no link fits these timings: {exc}") from None


def ring_target(bucket_bytes: list[int], ranks_per_node: int, nodes: int, intra: Link,
                inter: Link | None = None, broadcast_bytes: int = 0) -> Target:
    """The buckets' all-reduces (and the buffer broadcast, a ring broadcast: (N - 1) / N x
    bytes pipelined, plus (N - 1) latencies) at ``ranks_per_node`` x ``nodes`` ranks."""
    n = ranks_per_node * nodes
    if nodes > 1 and inter is None:
        raise ValueError(f"{nodes} nodes need the inter-node link's figures (inter)")
    link = inter if nodes > 1 else intra
    comm = [ring_allreduce_s(b, n, link) for b in bucket_bytes]
    bcast = 0.0 if n <= 1 or not broadcast_bytes else (
        (n - 1) / n * broadcast_bytes / (link.bandwidth_gbps * 1e9) + (n - 1) * link.latency_s)
    where = (f"{nodes} node(s) x {ranks_per_node} rank(s), the ring bound by the "
             + ("inter-node" if nodes > 1 else "intra-node")
             + f" link ({link.bandwidth_gbps:g} GB/s, {link.latency_s * 1e6:g} us)")
    return Target(n, comm, bcast, source=f"from the ring model: {where}",
                  ranks_per_node=ranks_per_node)


@dataclass(frozen=True)
class Device:
    """Stated figures of one device for the thesis projection (changeable by the user)."""
    name: str
    iter_s: float           # one iteration at 8 images, 512x512, alone: forward+backward+optimizer
    backward_share: float   # share of iter_s in backward (the all-reduces' overlap window)
    link: Link


def project(device: Device, gradient_bytes: float, world_sizes=(1, 2, 4, 8),
            last_bucket_fraction: float = 0.1) -> dict[int, dict]:
    """Weak-scaling speedups S(N) = N x T(1) / T(N) (the thesis's whole-training ratio with
    160K / N iterations) with T(N) = iter_s + exposed all-reduce, exposed = the ring time less
    the backward window, but never less than the last bucket's share (it cannot hide)."""
    out = {}
    t1 = device.iter_s
    backward = device.iter_s * device.backward_share
    for n in world_sizes:
        comm = ring_allreduce_s(gradient_bytes, n, device.link)
        exposed = max(comm * last_bucket_fraction, comm - backward) if n > 1 else 0.0
        tn = t1 + exposed
        out[n] = {"iter_s": tn, "allreduce_s": comm, "exposed_s": exposed,
                  "speedup": n * t1 / tn, "efficiency": t1 / tn}
    return out


# The thesis projection's stated inputs (no GPU here to measure them; change them with
# tools/attribute.py --device-iter-s / --link). The gradient: UperNet + SwinV2-B's 121,430,308
# fp32 parameters (``python -m swinkit describe --preset thesis``). An iteration (8 images at
# 512x512) is 3 x 2 x 2407.5 GMAC of forward = 14.4 TFLOP, at half each device's fp32 peak
# (PyTorch runs fp32 matmuls without TF32 by default). Links: what NCCL's bus bandwidth reaches
# on PCIe 3.0 x16, PCIe 4.0 x16 and third-generation NVLink, typical latencies. The last
# bucket: DDP's 25 MB bucket of the 486 MB gradient. Every one of these is an assumption.
THESIS_GRADIENT_BYTES = 485_721_232
THESIS_LAST_BUCKET_FRACTION = 25e6 / THESIS_GRADIENT_BYTES
THESIS_DEVICES = {
    "CRC V100 (PCIe)": Device("V100 (PCIe 3.0)", 14.4e12 / 7.85e12, 2 / 3, Link(10.0, 10e-6)),
    "CRC A100 (PCIe)": Device("A100 (PCIe 4.0)", 14.4e12 / 9.75e12, 2 / 3, Link(20.0, 10e-6)),
    "CRC A100_NVLINK": Device("A100 (NVLink 3)", 14.4e12 / 9.75e12, 2 / 3, Link(200.0, 5e-6)),
}


def thesis_projection(devices: dict | None = None, world_sizes=(1, 2, 4, 8)) -> dict:
    """Per thesis system: the projected speedups and the inputs they came from."""
    out = {}
    for key, dev in (devices or THESIS_DEVICES).items():
        out[key] = {"device": dev.name, "iter_s": dev.iter_s, "backward_share": dev.backward_share,
                    "link_gbps": dev.link.bandwidth_gbps, "link_latency_s": dev.link.latency_s,
                    "gradient_bytes": THESIS_GRADIENT_BYTES,
                    "rows": project(dev, THESIS_GRADIENT_BYTES, world_sizes,
                                    THESIS_LAST_BUCKET_FRACTION)}
    return out
