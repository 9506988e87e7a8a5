"""Every engine swinkit runs the workload under, one record each: the one place that names them.

An :class:`Engine` record says what the engine's ranks run (``entry``) and how they are
started (``shape``), which options and run features it accepts, what must be installed or
present, how its rank's timeline groups micro-batches, where its bytes moved are read and the
analytic model they are held against, which of its rank's fields the result keeps, and what
instruments it. The code around engines (spec checks, launching, the result's engine block, the
command lines, asv) reads these fields and never tests an engine's name. Adding an engine is one
rank module (on :mod:`swinkit.rank.skeleton`'s loop) and one record here.

Keys are the comparison's and asv's names (``ddp``, ``zero1``, ``dp_vanilla``, ...): each names an
engine with some of its options fixed (``zero1``: DeepSpeed with ``zero=1``).

``precisions`` is what each engine's rank applies, each the DDP loop's way (autocast around
forward and loss, fp32 weights, gradients and reductions; ``cudnn_benchmark`` with it;
docs/precision.md): every precision in DDP's loop and DataParallel's (one process, one
optimizer: fp16's GradScaler fits it as it is); fp32, tf32 and bf16 in DeepSpeed's and FSDP2's,
whose fp16 loss scaling would go through the engine's own backward or sharded gradients and is
refused. A rank reads ``cfg.precision`` from the overrides it receives; a precision or
``cudnn_benchmark`` an engine does not list is refused before launch, naming both.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Callable

from swinkit.attribution import traffic
from swinkit.precision import PRECISIONS
from swinkit.rank.devices import EngineUnavailable, check_dp_devices, find_fully_shard

SHAPES = {
    "ddp_run": "swinkit's DDP run (swinkit.runs.ddp_run: one process per rank, every DDP option)",
    "ranks": "one process per rank, launched as DDP's are (swinkit.launch)",
    "one_process": "one process driving the world size's GPUs",
}
RUN_FEATURES = ("inject", "bare", "trace")   # DDP run-spec features an engine may take
OPTIONS = ("zero", "ds_timers", "comm_pass_iters")  # EngineSpec fields beyond the common ones


@dataclass(frozen=True)
class Engine:
    """One engine (see the module doc).

    Attributes:
        name: the ``--engine`` value and ``EngineSpec.engine``.
        what: one line for help and listings.
        entry: the rank's entry point, ``module:function``.
        shape: how its processes start, a key of :data:`SHAPES`.
        keys: comparison/asv key -> the options it fixes, in listing order.
        compared: the keys ``--engine all`` and asv run.
        options: which of :data:`OPTIONS` it takes (others set are refused, naming the field).
        run_features: which of :data:`RUN_FEATURES` it takes.
        needs: a module that must be importable, and how to install it.
        check: raises EngineUnavailable where this machine cannot run it (spec -> None).
        rank_kwargs: fixed keyword arguments of its entry point.
        env: extra environment of its ranks, from the device (``cpu``/``cuda``).
        micro_batch_iterations: its timeline holds one iteration per micro-batch (else one per
            optimizer step).
        traffic_source: ``collectives`` (timeline records with bytes) or ``copies``
            (bytes copied between devices, counted by the rank).
        traffic_model: the analytic bytes of one optimizer step (:mod:`swinkit.attribution.
            traffic`), from the run's sizes; None where it has none.
        block_fields: rank 0's fields kept in the result's engine block as they are.
        own_timers: the rank reports the engine's own timers (``ds_timers``), checked against
            the timeline.
        instrumentation: what measures phases, collectives, engine timers, comms log.
        precisions: the training precisions its rank applies (the DDP loop's way).
        knobs_refused: preset knob -> why this engine cannot run with it on (refused before
            launch, naming both).
        table_title: how a run's phase table names it (None: by its key, ``zero2``).
    """
    name: str
    what: str
    entry: str
    shape: str
    keys: dict
    compared: tuple
    instrumentation: dict
    traffic_model: Callable[[dict], traffic.Traffic | None] | None = None
    options: tuple = ()
    run_features: tuple = ()
    needs: tuple | None = None
    check: Callable | None = None
    rank_kwargs: dict = field(default_factory=dict)
    env: Callable[[str], dict] = lambda device: {}
    micro_batch_iterations: bool = False
    traffic_source: str = "collectives"
    block_fields: tuple = ()
    own_timers: bool = False
    precisions: tuple = ("fp32",)
    knobs_refused: dict = field(default_factory=dict)
    table_title: str | None = None

    def key_of(self, fixed: dict) -> str:
        """The key whose fixed options are ``fixed`` (the spec's resolved options)."""
        for key, values in self.keys.items():
            if all(fixed.get(k) == v for k, v in values.items()):
                return key
        raise ValueError(f"engine {self.name}: no key for options {fixed!r}; keys: "
                         f"{', '.join(self.keys)}")

    def unavailable(self, spec) -> str | None:
        """Why this machine cannot run ``spec`` (None: it can)."""
        if self.needs and importlib.util.find_spec(self.needs[0]) is None:
            return f"engine {self.name} needs {self.needs[0]}: {self.needs[1]}"
        try:
            self.check and self.check(spec)
        except EngineUnavailable as exc:
            return str(exc)
        return None


def _ddp_model(sizes: dict) -> traffic.Traffic | None:
    """DDP: a ring all-reduce of every gradient bucket per optimizer step, 2(N-1)/N x its
    bytes (accumulating micro-batches under no_sync do not communicate)."""
    buckets = sizes.get("bucket_bytes")
    return None if not buckets else traffic.ddp_traffic(buckets, sizes["world_size"])


def _zero_model(sizes: dict) -> traffic.Traffic | None:
    """ZeRO-0: the gradients all-reduced; ZeRO-1/2: the gradients reduced (an all-reduce of
    each bucket, DeepSpeed's default) and the updated parameters all-gathered; ZeRO-2 reduces
    at every micro-batch."""
    grads, params = sizes.get("grad_bytes"), sizes.get("param_bytes")
    if grads is None or params is None:
        return None
    return traffic.zero_traffic(grads, params, sizes["world_size"], sizes["zero"],
                                sizes["grad_accum"], reduce_with_all_reduce=True)


def _dp_model(sizes: dict) -> traffic.Traffic | None:
    """DataParallel: the batch scattered, parameters and buffers replicated to N-1 devices,
    gradients reduce-added back, per micro-batch (the gathered outputs, a loss dict, not
    counted)."""
    if sizes.get("param_bytes") is None or sizes.get("input_bytes") is None:
        return None
    copies = traffic.dp_traffic(sizes["input_bytes"], sizes["param_bytes"],
                                sizes.get("buffer_bytes") or 0, 0, sizes["grad_bytes"],
                                sizes["world_size"])   # outputs: the loss dict, a few scalars
    k = sizes["grad_accum"]
    return traffic.Traffic(copies["total"] * k, copies["total"] * k, 4 * k)


def _fsdp_model(sizes: dict) -> traffic.Traffic | None:
    """FSDP2: the parameters all-gathered in forward and in backward per micro-batch, the
    gradients reduce-scattered once per optimizer step, (N-1)/N each."""
    grads, params = sizes.get("grad_bytes"), sizes.get("param_bytes")
    if grads is None or params is None:
        return None
    return traffic.fsdp_traffic(params, grads, sizes["world_size"], sizes["grad_accum"])


def _check_dp(spec) -> None:
    check_dp_devices(spec.run.nproc_per_node)


def _check_fully_shard(spec) -> None:
    find_fully_shard()


_RING = "the timeline's collectives with their bytes"
# autocast without loss scaling: fp16 would need DeepSpeed's engine.backward or FSDP's sharded
# gradients to take the DDP loop's GradScaler, which they do not cleanly
AUTOCAST_ONLY = tuple(p for p in PRECISIONS if p != "fp16")
ENGINES: dict[str, Engine] = {e.name: e for e in (
    Engine(
        name="ddp", what="torch DistributedDataParallel, swinkit's instrumented loop",
        entry="swinkit.rank.ddp:ddp_rank", shape="ddp_run", keys={"ddp": {}},
        compared=("ddp",), run_features=RUN_FEATURES, micro_batch_iterations=True,
        table_title="DDP", precisions=tuple(PRECISIONS),
        traffic_model=_ddp_model,
        instrumentation={
            "phases": "swinkit timeline (DDP comm hook marks the last bucket ready)",
            "collectives": "DDP comm hook: every gradient bucket's all-reduce, its bytes",
            "engine_timers": "DDP reducer timers (ddp_cross_check; CPU by default)",
            "comms_log": None}),
    Engine(
        name="deepspeed", what="DeepSpeed ZeRO stage 0, 1 or 2 (--zero; default 1)",
        entry="swinkit.rank.deepspeed:deepspeed_rank", shape="ranks",
        keys={"zero0": {"zero": 0}, "zero1": {"zero": 1}, "zero2": {"zero": 2}},
        compared=("zero1", "zero2"), options=("zero", "ds_timers", "comm_pass_iters"),
        needs=("deepspeed", "pip install 'deepspeed==0.19.8' (tools/setup.sh installs it "
                            "with DS_BUILD_OPS=0)"),
        env=lambda device: {"DS_ACCELERATOR": "cuda" if device == "cuda" else "cpu"},
        traffic_model=_zero_model, block_fields=("comms_logger", "ds_config", "deepspeed"),
        own_timers=True, precisions=AUTOCAST_ONLY,
        instrumentation={
            "phases": "swinkit timeline marks around engine(), engine.backward(), "
                      "engine.step()",
            "collectives": "wrappers on DeepSpeed's comm backend (deepspeed.comm cdb): every "
                           "ZeRO collective, arrival/done, message bytes",
            "engine_timers": "DeepSpeed wall_clock_breakdown timers (fwd, bwd, bwd_inner, "
                             "bwd_allreduce, step; optimizer_gradients/step/allgather), per "
                             "step (CPU by default; they synchronise on GPU)",
            "comms_log": "DeepSpeed comms_logger (prof_all) in a separate pass after the "
                         "measured steps (it synchronises after every collective)"}),
    Engine(
        name="fsdp2", what="torch FSDP2 (fully_shard): parameters, gradients and optimizer "
                           "states sharded, gathered per unit",
        entry="swinkit.rank.fsdp2:fsdp2_rank", shape="ranks", keys={"fsdp2": {}},
        compared=("fsdp2",), check=_check_fully_shard, traffic_model=_fsdp_model,
        block_fields=("fsdp_units",), precisions=AUTOCAST_ONLY,
        # fully_shard refuses a parameter that is not contiguous in the default memory format
        # (torch's _fsdp_param.py: "FSDP does not support non-contiguous parameters yet"),
        # which a channels_last 3x3 convolution weight is not
        knobs_refused={"channels_last_heads": "FSDP2 shards only contiguous parameters, and "
                                              "channels_last convolution weights are not"},
        instrumentation={
            "phases": "swinkit timeline marks around forward, backward, optimizer step",
            "collectives": "wrappers on torch.distributed's all-gather and reduce-scatter: "
                           "every FSDP2 collective, arrival/done, message bytes",
            "engine_timers": None, "comms_log": None}),
    Engine(
        name="dp", what="torch.nn.DataParallel (one process, N GPUs)",
        entry="swinkit.rank.dp:dp_rank", shape="one_process", keys={"dp": {}},
        compared=("dp",), check=_check_dp, rank_kwargs={"vanilla": False},
        traffic_source="copies", traffic_model=_dp_model, precisions=tuple(PRECISIONS),
        instrumentation={
            "phases": "swinkit timeline around the DataParallel call (copies inside forward)",
            "collectives": "bytes of scatter / replicate / gather counted in DataParallel's "
                           "methods; gradient reduce-add bytes from the parameter list",
            "engine_timers": None, "comms_log": None}),
    Engine(
        name="dp-vanilla", what="DataParallel from torch.nn.parallel's primitives, each timed",
        entry="swinkit.rank.dp:dp_rank", shape="one_process", keys={"dp_vanilla": {}},
        compared=("dp_vanilla",), check=_check_dp, rank_kwargs={"vanilla": True},
        traffic_source="copies", traffic_model=_dp_model, precisions=tuple(PRECISIONS),
        instrumentation={
            "phases": "swinkit timeline; scatter, replicate and gather each a span "
                      "(exposed_comm), parallel_apply forward",
            "collectives": "scatter / replicate / gather as blocking records with bytes; "
                           "gradient reduce-add inside backward (bytes only)",
            "engine_timers": None, "comms_log": None}),
)}

DEFAULT_ENGINE = "ddp"   # what ``swinkit ddp`` runs without --engine
# key -> (engine record, the options the key fixes), in listing order
KEYS = {key: (e, fixed) for e in ENGINES.values() for key, fixed in e.keys.items()}
COMPARED = tuple(key for e in ENGINES.values() for key in e.compared)


def record(name: str) -> Engine:
    """The record of engine ``name`` (``dp_vanilla``, the key's spelling, is ``dp-vanilla``);
    ValueError naming the known ones."""
    name = name.replace("_", "-")
    if name not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)} (or 'all' on the "
                         f"command line); got {name!r}")
    return ENGINES[name]


def keys_named(text: str) -> list[str]:
    """Comparison keys from ``all`` or comma-separated names (``dp-vanilla`` = ``dp_vanilla``);
    ValueError naming the unknown ones."""
    if text == "all":
        return list(COMPARED)
    keys = [k.strip().replace("-", "_") for k in text.split(",") if k.strip()]
    unknown = [k for k in keys if k not in KEYS]
    if unknown or not keys:
        raise ValueError(f"--engine: unknown {unknown}; known: {list(KEYS)} or all")
    return keys
