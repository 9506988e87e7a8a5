"""Bytes moved per iteration, by engine: plain arithmetic (torch-free), testable anywhere.

Two quantities, kept apart:

* **message bytes**: what a collective is handed (the size of the tensor it reduces, or of the
  tensor an all-gather fills). DeepSpeed's comms logger and the thesis's "data transfer size"
  count this.
* **wire bytes per rank**: what each rank sends (and, symmetrically, receives) under the
  bandwidth-optimal ring algorithms that NCCL and gloo use for large messages. For ``S``
  message bytes on ``N`` ranks:

      all-reduce       2 (N-1)/N x S      (reduce-scatter, then all-gather)
      reduce-scatter     (N-1)/N x S      (S: the full input)
      all-gather         (N-1)/N x S      (S: the full output)
      broadcast / reduce            S      (each non-root rank receives / sends the whole
                                            message once in a pipelined chain)

  At N = 1 every collective moves nothing. This is the factor NCCL's tests turn algorithm
  bandwidth into bus bandwidth with.

ZeRO (*ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*) trades these bytes
against memory: stages 1 and 2 replace the gradient all-reduce (2Ψ(N-1)/N) by a reduce-scatter
of gradients plus an all-gather of updated parameters (also 2Ψ(N-1)/N together) while sharding
optimizer states (stage 1) and gradients (stage 2) N ways; stage 3 shards parameters too and
pays 3Ψ(N-1)/N. :func:`zero_model_state_bytes` is that memory side. FSDP2 (torch's
``fully_shard``) shards as stage 3 does: :func:`fsdp_traffic`.

Each engine record (:mod:`swinkit.runs.engine_records`) names its model here; the engine
comparison holds the bytes it measured against it (``traffic.expected`` in a result).

DataParallel (one process, N devices, device 0 the master) moves per iteration: the scatter of
the batch ((N-1)/N of the input bytes leave device 0), the replicate of parameters and buffers
((N-1) copies), the gather of outputs ((N-1)/N of them come back), and in backward the
reduce-add of every replica's gradients onto device 0 ((N-1) gradient copies).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

# collective name (as torch.distributed / deepspeed.comm call it) -> wire factor kind
_RING_KIND = {
    "all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce",
    "inference_all_reduce": "all_reduce",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_base": "reduce_scatter", "reduce_scatter_single": "reduce_scatter",
    "all_gather": "all_gather", "all_gather_single": "all_gather", "all_gather_into_tensor": "all_gather",
    "all_gather_base": "all_gather", "all_gather_coalesced": "all_gather",
    "broadcast": "broadcast", "reduce": "reduce",
    "all_to_all_single": "all_to_all", "all_to_all": "all_to_all",
}


def reduces(op: str | None) -> bool:
    """Whether collective ``op`` reduces (all-reduce, reduce-scatter, reduce): what gradient
    communication is made of; gathers and broadcasts move values unchanged."""
    return _RING_KIND.get(op) in ("all_reduce", "reduce_scatter", "reduce")


def _check(nbytes, world_size) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")


def wire_factor(op: str, world_size: int) -> float:
    """Wire bytes per rank per message byte for collective ``op`` on ``world_size`` ranks."""
    _check(0, world_size)
    kind = _RING_KIND.get(op)
    if kind is None:
        raise ValueError(f"op must be one of {', '.join(sorted(_RING_KIND))}; got {op!r}")
    n = world_size
    if n == 1:
        return 0.0
    return {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "all_gather": (n - 1) / n, "all_to_all": (n - 1) / n,
            "broadcast": 1.0, "reduce": 1.0}[kind]


def wire_bytes(op: str, nbytes: int, world_size: int) -> float:
    """Bytes each rank sends for one ``op`` on a message of ``nbytes`` (see the module doc)."""
    _check(nbytes, world_size)
    return wire_factor(op, world_size) * nbytes


def ring_allreduce_bytes(nbytes: int, world_size: int) -> float:
    """2 (N-1)/N x nbytes: what one rank sends in a ring all-reduce of ``nbytes``."""
    return wire_bytes("all_reduce", nbytes, world_size)


@dataclass(frozen=True)
class Traffic:
    """Bytes of one optimizer step (one iteration) on one rank."""
    message_bytes: float          # sum of the collectives' message sizes
    wire_bytes_per_rank: float    # ring model, what each rank sends
    collectives: int              # how many collectives (gradient buckets, gathers, ...)

    def to_dict(self) -> dict:
        return asdict(self)


def ddp_traffic(bucket_bytes: list[int], world_size: int) -> Traffic:
    """DDP: one all-reduce per gradient bucket per optimizer step (with ``no_sync`` gradient
    accumulation too: the micro-steps before the last do not communicate)."""
    total = sum(bucket_bytes)
    _check(total, world_size)
    return Traffic(total, ring_allreduce_bytes(total, world_size), len(bucket_bytes))


def zero_traffic(grad_bytes: int, param_bytes: int, world_size: int, stage: int,
                 grad_accum: int = 1, reduce_with_all_reduce: bool = False) -> Traffic:
    """ZeRO stage 0-2, per optimizer step, as the ZeRO paper counts it.

    Stage 0 all-reduces the gradients at the accumulation boundary. Stages 1 and 2 reduce the
    gradients (a reduce-scatter: each rank keeps its 1/N) and all-gather the updated fp32
    parameters after the step. Stage 2 keeps only its gradient partition, so it reduces at every
    micro-step: ``grad_accum`` reductions per optimizer step; stage 1 keeps full gradients and
    reduces once. ``reduce_with_all_reduce``: the reduction is an all-reduce of the whole bucket
    instead of a reduce-scatter (DeepSpeed's default ``use_multi_rank_bucket_allreduce``
    does this), so it moves 2(N-1)/N instead of (N-1)/N.
    """
    _check(grad_bytes, world_size)
    _check(param_bytes, world_size)
    if stage not in (0, 1, 2):
        raise ValueError(f"zero stage must be 0, 1 or 2, got {stage!r}")
    if isinstance(grad_accum, bool) or not isinstance(grad_accum, int) or grad_accum < 1:
        raise ValueError(f"grad_accum must be an integer >= 1, got {grad_accum!r}")
    if stage == 0:
        return Traffic(grad_bytes, ring_allreduce_bytes(grad_bytes, world_size), 1)
    reductions = grad_accum if stage == 2 else 1
    reduce_op = "all_reduce" if reduce_with_all_reduce else "reduce_scatter"
    message = reductions * grad_bytes + param_bytes
    wire = (reductions * wire_bytes(reduce_op, grad_bytes, world_size)
            + wire_bytes("all_gather", param_bytes, world_size))
    return Traffic(message, wire, reductions + 1)


def fsdp_traffic(param_bytes: int, grad_bytes: int, world_size: int,
                 grad_accum: int = 1) -> Traffic:
    """FSDP2 with parameters resharded after forward, per optimizer step (as ZeRO-3 counts it):
    each micro-batch all-gathers the parameters in forward and again in backward, and the last
    one reduce-scatters the gradients (the others accumulate unsharded gradients, without
    synchronising): 2K all-gathers of the parameters and one reduce-scatter, (N-1)/N each.
    (torch keeps the root unit's parameters gathered from forward to backward, so a run
    gathers a little less than this.)"""
    _check(param_bytes, world_size)
    _check(grad_bytes, world_size)
    if isinstance(grad_accum, bool) or not isinstance(grad_accum, int) or grad_accum < 1:
        raise ValueError(f"grad_accum must be an integer >= 1, got {grad_accum!r}")
    gathered = 2 * grad_accum * param_bytes
    wire = (wire_bytes("all_gather", gathered, world_size)
            + wire_bytes("reduce_scatter", grad_bytes, world_size))
    return Traffic(gathered + grad_bytes, wire, 2 * grad_accum + 1)


def zero_model_state_bytes(n_params: int, world_size: int, stage: int,
                           param_bytes: int = 4, grad_bytes: int = 4,
                           optim_bytes: int = 8) -> dict:
    """Model-state memory per rank (bytes) under ZeRO ``stage`` (fp32 training, Adam: two
    moments of 4 bytes each = ``optim_bytes`` per parameter). Stage 1 shards optimizer states,
    stage 2 gradients too, stage 3 parameters too."""
    _check(n_params, world_size)
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"zero stage must be 0, 1, 2 or 3, got {stage!r}")
    n = world_size
    params = n_params * param_bytes / (n if stage >= 3 else 1)
    grads = n_params * grad_bytes / (n if stage >= 2 else 1)
    optim = n_params * optim_bytes / (n if stage >= 1 else 1)
    return {"params": params, "grads": grads, "optimizer_states": optim,
            "total": params + grads + optim}


def dp_traffic(input_bytes: int, param_bytes: int, buffer_bytes: int, output_bytes: int,
               grad_bytes: int, n_devices: int) -> dict:
    """DataParallel's copies per iteration (bytes over device links, device 0 the master).

    Returns ``{"scatter", "replicate", "gather", "grad_reduce", "total"}``: the batch split
    ((N-1)/N of the inputs leave device 0), parameters and buffers broadcast to N-1 replicas,
    the outputs gathered back ((N-1)/N of them) and, in backward, N-1 replicas' gradients
    reduce-added onto device 0 (the backward of the replicate)."""
    for name, value in (("input_bytes", input_bytes), ("param_bytes", param_bytes),
                        ("buffer_bytes", buffer_bytes), ("output_bytes", output_bytes),
                        ("grad_bytes", grad_bytes)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")
    _check(0, n_devices)
    n = n_devices
    out = {"scatter": input_bytes * (n - 1) / n,
           "replicate": (param_bytes + buffer_bytes) * (n - 1),
           "gather": output_bytes * (n - 1) / n,
           "grad_reduce": grad_bytes * (n - 1)}
    out["total"] = sum(out.values())
    return out


def traffic_from_timeline(timeline: list[dict], world_size: int, warmup: int = 0) -> dict:
    """Per measured iteration: collectives, message bytes and wire bytes per rank, read from a
    rank's resolved timeline (each collective's ``bytes``). Records whose name is not a
    collective op (DDP's ``bucketN`` all-reduces, ``grad_sync``, ``buffers``) are read as:
    ``bucket*`` = all-reduce; ``grad_sync`` (a summary of the buckets) and ``buffers`` (DDP's
    buffer broadcast, a broadcast) as named. Only ``op`` keys of :data:`_RING_KIND` and these
    are counted."""
    rows = []
    for it in timeline[warmup:]:
        count, message, wire, by_op = 0, 0.0, 0.0, {}
        for c in it["collectives"]:
            op = collective_op(c["name"])
            if op is None:
                continue
            nbytes = c.get("bytes") or 0
            count += 1
            message += nbytes
            wire += wire_bytes(op, nbytes, world_size)
            entry = by_op.setdefault(op, {"count": 0, "bytes": 0})
            entry["count"] += 1
            entry["bytes"] += nbytes
        rows.append({"collectives": count, "message_bytes": message, "wire_bytes_per_rank": wire,
                     "by_op": by_op})
    return {"per_iteration": rows}


def collective_op(name: str) -> str | None:
    """The op behind a timeline record's name (None: a summary record, not a collective)."""
    if name.startswith("bucket"):
        return "all_reduce"
    if name == "buffers":
        return "broadcast"
    op = name.split("@", 1)[0]
    return op if op in _RING_KIND else None
