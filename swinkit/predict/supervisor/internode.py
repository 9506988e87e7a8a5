"""The inter-node link, timed across two elastic "nodes" on this host (``--inter-link localhost``).

Predicting k nodes (:func:`swinkit.predict.numbers.links.ring_target`) needs the link between
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

import os
import shutil
import signal
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from swinkit.predict.numbers.links import fit_link_or_bandwidth
from swinkit.launch import LaunchConfig, launch
from swinkit.launch.supervisor import free_port
from swinkit.launch.terminate import sigterm_raises

# one rank per simulated node: the link alone, as a point-to-point benchmark measures it
RANKS_PER_NODE = 1
INTERNODE_ENTRY = "swinkit.predict.rank.probes:internode_rank"


def time_across_nodes(bucket_bytes: list[int], nodes: int = 2, progress=print,
                      timeout_s: float = 300.0) -> list[float]:
    """Seconds per bucket's all-reduce over ``nodes`` simulated nodes of one rank each.

    Each node's launch runs in a thread (two supervisors, as two hosts would have), so a
    signal reaches neither's own clean-up: on Ctrl-C, SIGTERM or one node's failure the nodes
    still running are stopped here (their agents' process groups, from each run directory's
    ``agent.pid``), and the rendezvous and the watchdog are bounded by ``timeout_s``, not the
    launch's defaults of minutes."""
    if nodes < 2:
        raise ValueError(f"--inter-link localhost: needs 2 or more nodes, got {nodes}")
    if not bucket_bytes:
        raise ValueError("--inter-link localhost: the prediction has no buckets to time")
    endpoint = f"127.0.0.1:{free_port()}"
    progress(f"inter-node link: the {len(bucket_bytes)} buckets' all-reduces across {nodes} "
             "simulated nodes on this host (two elastic agents, one endpoint)")
    run_dirs = [Path(tempfile.mkdtemp(prefix=f"swinkit-node{k}-")) for k in range(nodes)]

    def node(k: int):
        # gloo on any machine: under NCCL both one-rank "nodes" would take GPU 0 (NCCL
        # refuses two ranks on one GPU), and what is timed is loopback's plumbing anyway
        cfg = LaunchConfig(nproc_per_node=RANKS_PER_NODE, nnodes=nodes, node_rank=k, backend="gloo",
                           rdzv_endpoint=endpoint, allow_oversubscribe=True,
                           join_timeout_s=timeout_s, wall_timeout_s=timeout_s)
        return launch(INTERNODE_ENTRY, {"bucket_bytes": list(bucket_bytes)}, cfg,
                      run_dir=run_dirs[k], quiet=True)

    pool, futures = ThreadPoolExecutor(nodes), []
    try:
        with sigterm_raises():
            futures = [pool.submit(node, k) for k in range(nodes)]
            runs = [f.result() for f in futures]
    except BaseException:  # Ctrl-C, SIGTERM, one node's failure: stop the nodes still up
        for run_dir, future in zip(run_dirs, futures):
            if not future.done():  # a finished launch has stopped its own agent already
                _stop_agent(run_dir)
        raise
    finally:
        pool.shutdown(wait=True)  # the launches return once their agents are gone
    for run_dir in run_dirs:  # read: the launches named them, so they are ours to remove
        shutil.rmtree(run_dir, ignore_errors=True)
    # rank 0 gathers every rank's result; the rendezvous decides on which node it runs
    reports = [r.result for r in runs if r.result is not None]
    if not reports:
        raise ValueError("--inter-link localhost: neither simulated node returned the timings")
    return list(reports[0]["ranks"][0]["bucket_comm_s"])


def _stop_agent(run_dir: Path) -> None:
    """SIGKILL what is left of the agent's process group (its ranks with it), if anything."""
    try:
        pgid = int((run_dir / "agent.pid").read_text())
        os.killpg(pgid, signal.SIGKILL)
    except (OSError, ValueError):
        pass  # never started, or already gone


def localhost_inter_link(bucket_bytes: list[int], progress=print) -> dict:
    """Time the buckets across two simulated nodes and fit the inter-node link to them.
    Returns the ``link``, which ``fit``
    (:func:`~swinkit.predict.numbers.links.fit_link_or_bandwidth`) and the ``timed_s`` it
    came from."""
    timed = time_across_nodes(bucket_bytes, nodes=2, progress=progress)
    ranks = 2 * RANKS_PER_NODE
    try:
        link, fit = fit_link_or_bandwidth([(b, ranks, t) for b, t in zip(bucket_bytes, timed)])
    except ValueError as exc:
        raise ValueError(f"--inter-link localhost: {exc}") from None
    progress(f"inter-node link (simulated, localhost): {link.bandwidth_gbps:.3g} GB/s, "
             f"{link.latency_s * 1e6:.3g} us ({fit})")
    return {"link": link, "fit": fit, "timed_s": timed}
