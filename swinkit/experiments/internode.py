"""The inter-node link, timed across two elastic "nodes" on this host (``--inter-link localhost``).

Predicting k nodes (:func:`swinkit.attribution.links.ring_target`) needs the link between
nodes. On a cluster it is stated (``--inter-link GBPS,LATENCY_US``, e.g. from nccl-tests
between two nodes); here it can be timed the way a second host would be used: two agents, one
per "node", meet at one c10d endpoint on localhost (the launch's multi-node path: rendezvous,
node ranks, one process group across both), and the prediction's own buckets are all-reduced
across them, cold, the slowest rank's time, as the target timings at N' are. The ring model is
fitted to those timings: every step of a ring over k nodes waits for the inter-node hop, so the
fitted link is the inter-node one. On one host the "link" is loopback: this checks the method
and its plumbing end to end, not a network.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from swinkit.attribution.links import fit_link_or_bandwidth
from swinkit.launch import LaunchConfig, launch
from swinkit.launch.supervisor import free_port

# one rank per simulated node: the link alone, as a point-to-point benchmark measures it
RANKS_PER_NODE = 1


def internode_rank(rank, bucket_bytes: list[int]) -> dict:
    """Rank entry: each bucket's all-reduce (fp32, its bytes) over every rank of both nodes."""
    import torch

    from swinkit.rank.collective_timing import time_collectives

    elements = [[max(int(b) // 4, 1)] for b in bucket_bytes]
    comm = time_collectives(elements, torch.float32, torch.device("cpu"), "all_reduce",
                            cold=True, same_host=True)  # one host: one clock
    return {"rank": rank.rank, "bucket_comm_s": comm}


def time_across_nodes(bucket_bytes: list[int], nodes: int = 2, progress=print) -> list[float]:
    """Seconds per bucket's all-reduce over ``nodes`` simulated nodes of one rank each."""
    if nodes < 2:
        raise ValueError(f"--inter-link localhost: needs 2 or more nodes, got {nodes}")
    if not bucket_bytes:
        raise ValueError("--inter-link localhost: the prediction has no buckets to time")
    endpoint = f"127.0.0.1:{free_port()}"
    progress(f"inter-node link: the {len(bucket_bytes)} buckets' all-reduces across {nodes} "
             "simulated nodes on this host (two elastic agents, one endpoint)")

    def node(k: int):
        cfg = LaunchConfig(world_size=RANKS_PER_NODE, nnodes=nodes, node_rank=k,
                           rdzv_endpoint=endpoint, allow_oversubscribe=True)
        return launch(f"{__name__}:internode_rank", {"bucket_bytes": list(bucket_bytes)}, cfg,
                      quiet=True)

    with ThreadPoolExecutor(nodes) as pool:
        runs = list(pool.map(node, range(nodes)))
    # rank 0 gathers every rank's result; the rendezvous decides on which node it runs
    report = next(r.result for r in runs if r.result is not None)
    return list(report["ranks"][0]["bucket_comm_s"])


def localhost_inter_link(bucket_bytes: list[int], progress=print) -> dict:
    """Time the buckets across two simulated nodes and fit the inter-node link to them.
    Returns the ``link``, which ``fit`` (:func:`~swinkit.attribution.links.fit_link_or_bandwidth`)
    and the ``timed_s`` it came from."""
    timed = time_across_nodes(bucket_bytes, nodes=2, progress=progress)
    ranks = 2 * RANKS_PER_NODE
    try:
        link, fit = fit_link_or_bandwidth([(b, ranks, t) for b, t in zip(bucket_bytes, timed)])
    except ValueError as exc:
        raise ValueError(f"--inter-link localhost: {exc}") from None
    progress(f"inter-node link (simulated, localhost): {link.bandwidth_gbps:.3g} GB/s, "
             f"{link.latency_s * 1e6:.3g} us ({fit})")
    return {"link": link, "fit": fit, "timed_s": timed}
