"""The isolated components of a DDP iteration, measured under the co-location they run in.

An oracle that predicts the DDP iteration from components measured one process at a time
misses what N ranks, their loader workers and gloo's threads on the same cores do to each
other. Here every component is measured with the run it predicts laid out the same way: N
processes at once, the same thread policy, the same loader workers, the same DDP options:

1. **Compute without communication.** Each rank runs the real training loop with DDP over a
   process group of one whose comm hook sends nothing (a compression hook still runs its casts,
   PowerSGD its matrix products): data loading, the preprocessor, forward, backward, the
   optimizer and what is left over (``other``), and when each gradient bucket became ready.
   At N > 1 the ranks meet where DDP would hold them (:mod:`swinkit.rank.meet`), so their
   forwards and optimizer steps contend with each other as in DDP; the waits are left out of
   the costs, as the oracle replays them.
2. **The two beside each other.** A few more iterations of that loop with a thread
   all-reducing the run's own bucket payloads beside it: how much slower backward runs with
   an all-reduce in flight, and the all-reduces with backward running
   (:mod:`swinkit.measure.contention`; at N > 1 only).
3. **Communication without compute.** Then the same N processes all-reduce tensors of the run's
   own bucket sizes (in the hook's dtype, or PowerSGD's factors), one bucket at a time, and
   broadcast the module buffers as DDP does, over the N ranks and over each rank alone (the
   loop of step 1 already ran the latter; the oracle adds the difference); the slowest rank's
   time per bucket.

:mod:`swinkit.attribution.oracle` combines the two into a predicted iteration (the costs read
from the result: :mod:`swinkit.runs.component_costs`).
"""
from __future__ import annotations


import torch
import torch.distributed as dist

from swinkit.measure.contention import MIN_ROUNDS, CommLoad, rates
from swinkit.measure.ddp_hooks import bucket_sizes_bytes
from swinkit.measure.timeline import phase_durations
from swinkit.rank.collective_timing import time_collectives
from swinkit.rank.ddp import ddp_rank
from swinkit.rank.delays import GATE
from swinkit.rank.devices import rank_device
from swinkit.rank.plan import StepPlan
from swinkit.rank.rank_clocks import all_agree
from swinkit.run_spec import RunSpec

POWERSGD_MIN_COMPRESSION_RATE = 2  # torch's PowerSGDState default, which swinkit keeps


def component_rank(rank, spec: RunSpec | dict) -> dict:
    """Rank entry of a local or paired ``spec``: its DDP loop (:func:`ddp_rank`: local steps,
    or DDP and local steps alternating), at N > 1 a few more iterations of it with the
    collectives it left out running beside it (how much the two slow each other, the plan's
    :class:`ContentionTail`), then the collectives alone, timed on the real N-rank group. An
    injected slower link (``comm_scale``) times each collective with that many times its
    bytes."""
    spec = RunSpec.of(spec)
    options = spec.ddp
    device = rank_device(dist.get_backend(), rank.local_rank)

    def payloads(bucket_sizes_bytes, shapes):
        sizes, dtype = bucket_payloads(bucket_sizes_bytes, shapes, options.comm_hook,
                                       options.powersgd_rank)
        scale = spec.injection.comm_scale
        return [[int(n * scale) for n in bucket] for bucket in sizes], dtype

    def comm_load(run):
        shapes = getattr(run.buckets and run.buckets.launcher, "shapes", None)
        return CommLoad(*payloads(bucket_sizes_bytes(run.ddp), shapes), device)

    # one rank: the 'all-reduce' is a copy, nothing to contend with
    tail = ContentionTail(comm_load) if rank.world_size > 1 else None
    result = ddp_rank(rank, spec, StepPlan.for_spec(spec, tail))
    sizes, dtype = payloads(result["bucket_sizes_bytes"], result.get("bucket_shapes"))
    broadcast = options.broadcast_buffers and result["buffer_bytes"]
    same_host = result["clock"]["same_host"]  # the run already asked every rank's host
    result["comm"] = {
        # cold: as DDP meets them, right after compute (the replay's durations); hot: back
        # to back (the reference of the contention rate, whose load runs back to back)
        "bucket_s": time_collectives(sizes, dtype, device, "all_reduce", cold=True,
                                     same_host=same_host),
        "bucket_hot_s": time_collectives(sizes, dtype, device, "all_reduce"),
        **(buffer_broadcast(result, device, rank, same_host) if broadcast
           else {"broadcast_s": 0.0, "buffer_sync": False}),
        "sync_bn_s": sync_bn_collectives(result.get("sync_bn_channels") or [], device,
                                         rank.world_size),
        "elements": sizes, "dtype": str(dtype).replace("torch.", ""),
    }
    if "contention" in result:
        loaded = result["contention"]
        alone = ([phase_durations(it)["backward"] for it in result["local"]["timeline"]]
                 if "local" in result else result["phases"]["backward"])  # paired: its local steps
        result["contention"] = rates(alone, loaded["backward_loaded_s"],
                                     sum(result["comm"]["bucket_hot_s"]), loaded["rounds_loaded_s"])
    return result


class ContentionTail:
    """A component run's tail (:class:`~swinkit.rank.plan.Tail`): training iterations,
    communicating nothing, while a :class:`~swinkit.measure.contention.CommLoad` (``make_load``
    of the run) all-reduces the run's own bucket payloads beside them, until it has timed
    enough rounds (at least 3 iterations, at most ``max_iters``). No meetings beside the load:
    the ranks may run different numbers of these iterations (each stops when its own thread
    has timed enough rounds and every rank agrees)."""

    def __init__(self, make_load, max_iters: int = 20):
        self.make_load, self.max_iters = make_load, max_iters
        self.load: CommLoad | None = None

    def run(self, run, rank, step, first: int) -> None:
        self.load = load = self.make_load(run)
        run.switch and run.switch.use(local=True)
        run.meet = None
        dist.barrier()  # every rank's load starts together
        GATE.iteration = None  # no measured iteration's: not filed as one
        load.start()
        it = first
        while True:
            rank.heartbeat(it)
            step(it)
            it += 1
            enough = not load.is_alive() or (it - first >= 3 and len(load.rounds) >= MIN_ROUNDS + 2)
            if all_agree(enough or it - first >= self.max_iters, run.control):
                break
        load.finish()
        load.join_or_raise(timeout_s=600)
        run.timeline.enabled and run.timeline.end()

    def read(self, iterations: list[dict]) -> dict:
        """Backward's seconds in each loaded iteration, and the load's rounds."""
        return {"contention": {"backward_loaded_s": [phase_durations(it)["backward"]
                                                     for it in iterations],
                               "rounds_loaded_s": self.load.rounds}}


def buffer_broadcast(result: dict, device, rank, same_host: bool) -> dict:
    """What DDP's buffer broadcast over the N ranks adds to the local steps' forward.

    The local steps already run DDP's buffer sync over this rank's group of one (packing the
    buffers into one message, unpacking it:
    :meth:`swinkit.rank.step_switch.Switch.route_buffer_broadcast`),
    so the oracle adds the broadcast over the N ranks less the same broadcast over one:
    ``broadcast_s``, 0 at N=1, where the two are the same call. ``buffer_sync``: there is a
    broadcast, so the ranks meet before every forward, whatever it costs."""
    tensors = [module_buffers(result, device)]
    world = time_collectives([], None, device, "broadcast_coalesced", cold=True,
                             tensors=tensors, same_host=same_host)[0]
    if rank.world_size == 1:
        return {"broadcast_s": 0.0, "broadcast_world_s": world, "broadcast_alone_s": world,
                "buffer_sync": True}
    # new_group is collective: every rank makes every singleton group, each keeps its own
    alone_group = [dist.new_group([r]) for r in range(rank.world_size)][rank.rank]
    alone = time_collectives([], None, device, "broadcast_coalesced", cold=True,
                             tensors=tensors, group=alone_group)[0]
    # clamped: the difference of two noisy times, and N ranks cannot broadcast faster than one
    return {"broadcast_s": max(world - alone, 0.0), "broadcast_world_s": world,
            "broadcast_alone_s": alone, "buffer_sync": True}


def sync_bn_collectives(channels: list[int], device, world_size: int) -> dict:
    """What SyncBN's collectives take per iteration at this world size, over every rank: in
    forward each SyncBN all-gathers its (2C + 1) statistics (mean, invstd, count), in backward
    it all-reduces 2C gradient sums (torch's SyncBatchNorm). The local steps ran SyncBN as
    plain batch norm over a group of one (no collective), so the oracle adds these back.
    Nothing at one rank, where SyncBN is plain batch norm in the DDP run too."""
    if world_size == 1 or not channels:
        return {"forward": 0.0, "backward": 0.0, "layers": len(channels)}
    forward = time_collectives([[2 * c + 1 for c in channels]], torch.float32, device, "all_gather")
    backward = time_collectives([[2 * c for c in channels]], torch.float32, device, "all_reduce")
    return {"forward": forward[0], "backward": backward[0], "layers": len(channels)}


def module_buffers(result: dict, device) -> list[torch.Tensor]:
    """Zeros shaped as the module's buffers (BN statistics, counters): what DDP broadcasts
    before every forward, many small tensors packed into one message and unpacked after."""
    return [torch.zeros(shape, dtype=getattr(torch, dtype), device=device)
            for shape, dtype in result["buffer_shapes"]]


def bucket_payloads(bucket_sizes_bytes: list[int], bucket_shapes: dict | None,
                    comm_hook: str | None, powersgd_rank: int):
    """(element counts of the all-reduces per bucket, dtype) that the run's hook sends."""
    elems = [b // 4 for b in bucket_sizes_bytes]  # DDP's buckets hold fp32 gradients
    if comm_hook in ("fp16", "bf16"):
        return [[n] for n in elems], torch.float16 if comm_hook == "fp16" else torch.bfloat16
    if comm_hook == "powersgd":
        shapes = bucket_shapes or {}
        return [powersgd_payload(shapes.get(i) or shapes.get(str(i)) or [], powersgd_rank)
                for i in range(len(elems))], torch.float32
    return [[n] for n in elems], torch.float32


def powersgd_payload(shapes: list[list[int]], rank: int) -> list[int]:
    """Elements PowerSGD all-reduces for one bucket, in its three collectives: the tensors it
    leaves uncompressed (vectors, and matrices too small to gain), then P (rows x rank), then Q
    (cols x rank). Follows torch's powerSGD_hook: a tensor is viewed as (shape[0], rest)."""
    uncompressed = p = q = 0
    for shape in shapes:
        numel = 1
        for s in shape:
            numel *= s
        if len(shape) <= 1:
            uncompressed += numel
            continue
        rows, cols = shape[0], numel // shape[0]
        r = min(rows, cols, rank)
        if (rows + cols) * r * POWERSGD_MIN_COMPRESSION_RATE < rows * cols:
            p, q = p + rows * r, q + cols * r
        else:
            uncompressed += numel
    return [n for n in (uncompressed, p, q) if n]
