"""Which engine runs the workload, and with what: :class:`EngineSpec`, validated before any
process starts (ValueError naming the field), and the asv-style engine keys."""
from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass

from swinkit.input_checks import check_int
from swinkit.rank.devices import EngineUnavailable, check_dp_devices

ENGINES = ("ddp", "deepspeed", "dp", "dp-vanilla")
ZERO_STAGES = (0, 1, 2)
# The engines the comparison and the asv suite name, as (engine, zero stage).
ENGINE_KEYS = {"ddp": ("ddp", None), "zero0": ("deepspeed", 0), "zero1": ("deepspeed", 1),
               "zero2": ("deepspeed", 2), "dp": ("dp", None), "dp_vanilla": ("dp-vanilla", None)}
COMPARED = ("ddp", "zero1", "zero2", "dp", "dp_vanilla")
DEEPSPEED_PIN = "deepspeed==0.19.8"


@dataclass(frozen=True)
class EngineSpec:
    """An engine and its knobs around the common run settings.

    Attributes:
        engine: ``ddp`` (swinkit's instrumented DDP loop, unchanged), ``deepspeed``,
            ``dp`` (``torch.nn.DataParallel``) or ``dp-vanilla`` (the same with the
            ``torch.nn.parallel`` primitives, each timed).
        zero: DeepSpeed's ZeRO stage, 0, 1 or 2 (deepspeed only; default 1).
        grad_accum: micro-batches per optimizer step (each of the preset's images per device).
        run: preset, world size, iterations, loader, launch: the DDP run's settings. For ``dp``
            and ``dp-vanilla`` the world size is the number of GPUs one process drives.
        ds_timers: DeepSpeed's wall-clock timers (default: CPU only; they synchronise on GPU).
        comm_pass_iters: optimizer steps of DeepSpeed's comms-logger pass after the measured ones.
    """
    engine: str = "ddp"
    zero: int | None = None
    grad_accum: int = 1
    run: object = None            # swinkit.runs.ddp_run.DDPRunSpec
    ds_timers: bool | None = None
    comm_pass_iters: int = 2

    @property
    def key(self) -> str:
        """``ddp``, ``zero1``, ``dp_vanilla``, ... (the comparison's and asv's name)."""
        if self.engine == "deepspeed":
            return f"zero{self.zero if self.zero is not None else 1}"
        return self.engine.replace("-", "_")

    @property
    def zero_stage(self) -> int | None:
        return (1 if self.zero is None else self.zero) if self.engine == "deepspeed" else None

    def validate(self) -> "EngineSpec":
        """Field checks, then whether this machine can run it (:class:`EngineUnavailable`)."""
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)} (or 'all' on the "
                             f"command line); got {self.engine!r}")
        if self.zero is not None and self.engine != "deepspeed":
            raise ValueError(f"zero applies to engine deepspeed only; got zero={self.zero!r} "
                             f"with engine {self.engine!r}")
        if self.engine == "deepspeed" and self.zero_stage not in ZERO_STAGES:
            raise ValueError(f"zero must be 0, 1 or 2, got {self.zero!r} (ZeRO-3 partitions the "
                             "parameters themselves: not measured here)")
        check_int("grad_accum", self.grad_accum)
        check_int("comm_pass_iters", self.comm_pass_iters, 0)
        if self.run is None:
            raise ValueError("run (the preset, world size and iterations) is required")
        if self.engine == "ddp" and self.grad_accum > 1 and not _ddp_has_grad_accum():
            raise ValueError("grad_accum > 1 with engine ddp needs DDPOptions.grad_accum "
                             "(DDP's no_sync accumulation), which this checkout lacks")
        if self.engine != "ddp":
            unsupported = [name for name, on in (
                ("inject", self.run.injection.active), ("bare", self.run.bare),
                ("trace", bool(self.run.trace_dir))) if on]
            if unsupported:
                asked = (f"; --inject {self.run.injection.describe()}"
                         if self.run.injection.active else "")  # the field(s) refused
                raise ValueError(f"{', '.join(unsupported)} supported with engine ddp only "
                                 f"(engine {self.engine!r}{asked})")
        if self.engine == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
            raise EngineUnavailable(f"engine deepspeed needs DeepSpeed: pip install "
                                    f"'{DEEPSPEED_PIN}' (tools/setup.sh installs it with "
                                    "DS_BUILD_OPS=0)")
        if self.engine in ("dp", "dp-vanilla"):
            check_dp_devices(self.run.world_size)
        return self

    def ddp_spec(self):
        """The DDP run spec. With ``grad_accum`` K, DDP's loop counts micro-batches as
        iterations (``DDPOptions.grad_accum``: all but the last under ``no_sync``), so it runs
        K x the iterations and warm-up: the same optimizer steps as the other engines."""
        if self.grad_accum == 1:
            return self.run
        options = dataclasses.replace(self.run.ddp, grad_accum=self.grad_accum)
        return dataclasses.replace(self.run, ddp=options, iters=self.run.iters * self.grad_accum,
                                   warmup=self.run.warmup * self.grad_accum)


def _ddp_has_grad_accum() -> bool:
    from swinkit.runs.ddp_run import DDPRunSpec
    ddp = {f.name: f for f in dataclasses.fields(DDPRunSpec)}.get("ddp")
    return ddp is not None and "grad_accum" in {f.name for f in dataclasses.fields(ddp.default_factory)}


def spec_for_key(key: str, run, grad_accum: int = 1, **kw) -> EngineSpec:
    """The EngineSpec an engine key (``ddp``, ``zero1``, ``dp_vanilla``, ...) names."""
    if key not in ENGINE_KEYS:
        raise ValueError(f"engine key must be one of {', '.join(ENGINE_KEYS)}; got {key!r}")
    engine, zero = ENGINE_KEYS[key]
    return EngineSpec(engine=engine, zero=zero, grad_accum=grad_accum, run=run, **kw)
