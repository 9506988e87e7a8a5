"""Which engine runs the workload, and with what: :class:`EngineSpec`, validated before any
process starts (ValueError naming the field) against the engine's record
(:mod:`swinkit.runs.engine_records`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from swinkit.input_checks import check_int
from swinkit.rank.devices import EngineUnavailable
from swinkit.runs.engine_records import ENGINES, KEYS, OPTIONS, RUN_FEATURES, Engine, record

__all__ = ["ENGINES", "EngineSpec", "EngineUnavailable", "spec_for_key"]

ZERO_STAGES = (0, 1, 2)
DEFAULTS = {"zero": None, "ds_timers": None, "comm_pass_iters": 2}  # of OPTIONS: "not set"


@dataclass(frozen=True)
class EngineSpec:
    """An engine and its knobs around the common run settings.

    Attributes:
        engine: a name of :data:`~swinkit.runs.engine_records.ENGINES` (``ddp``, ``deepspeed``,
            ``fsdp2``, ``dp``, ``dp-vanilla``).
        zero: DeepSpeed's ZeRO stage, 0, 1 or 2 (engines taking ``zero``; default 1).
        grad_accum: micro-batches per optimizer step (each of the preset's images per device).
        run: preset, world size, iterations, loader, launch: the DDP run's settings. For an
            engine of one process (DataParallel) the world size is the number of GPUs it drives.
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
    def record(self) -> Engine:
        return record(self.engine)

    @property
    def zero_stage(self) -> int | None:
        """The ZeRO stage of an engine that takes one (1 by default), else None."""
        if "zero" not in self.record.options:
            return None
        return 1 if self.zero is None else self.zero

    def options(self) -> dict:
        """The engine's own options as its rank takes them (``zero`` resolved)."""
        out = {name: getattr(self, name) for name in self.record.options}
        if "zero" in out:
            out["zero"] = self.zero_stage
        return out

    @property
    def key(self) -> str:
        """``ddp``, ``zero1``, ``dp_vanilla``, ... (the comparison's and asv's name)."""
        return self.record.key_of(self.options())

    def validate(self) -> "EngineSpec":
        """Field checks, then whether this machine can run it (:class:`EngineUnavailable`)."""
        rec = record(self.engine)   # ValueError naming the known engines
        for name in OPTIONS:
            if name not in rec.options and getattr(self, name) != DEFAULTS[name]:
                takers = [e.name for e in ENGINES.values() if name in e.options]
                raise ValueError(f"{name} applies to engine {', '.join(takers)} only; got "
                                 f"{name}={getattr(self, name)!r} with engine {self.engine!r}")
        if self.zero_stage is not None and self.zero_stage not in ZERO_STAGES:
            raise ValueError(f"zero must be 0, 1 or 2, got {self.zero!r} (ZeRO-3 partitions the "
                             "parameters themselves: not measured here)")
        check_int("grad_accum", self.grad_accum)
        check_int("comm_pass_iters", self.comm_pass_iters, 0)
        if self.run is None:
            raise ValueError("run (the preset, world size and iterations) is required")
        self._check_run_features(rec)
        why = rec.unavailable(self)
        if why:
            raise EngineUnavailable(why)
        return self

    def _check_run_features(self, rec: Engine) -> None:
        """The run's features and precision this engine cannot take, refused by name."""
        asked = {"inject": self.run.injection.active, "bare": self.run.bare,
                 "trace": bool(self.run.trace_dir)}
        unsupported = [name for name in RUN_FEATURES if asked[name] and name not in rec.run_features]
        if unsupported:
            takers = sorted({e.name for e in ENGINES.values()
                             if set(unsupported) <= set(e.run_features)})
            detail = (f"; --inject {self.run.injection.describe()}"
                      if "inject" in unsupported else "")  # the field(s) refused
            raise ValueError(f"{', '.join(unsupported)} supported with engine "
                             f"{', '.join(takers)} only (engine {self.engine!r}{detail})")
        overrides = dict(self.run.overrides)
        precision = self.run.precision or overrides.get("precision", "fp32")
        if precision not in rec.precisions:
            # EngineUnavailable (a ValueError): refused for this engine alone, skipped with the
            # reason in a comparison (--engine all in fp16 runs DDP and DataParallel)
            raise EngineUnavailable(f"precision {precision!r}: engine {self.engine!r} runs "
                                    f"{', '.join(rec.precisions)} only (docs/precision.md)")
        for knob, why in rec.knobs_refused.items():
            if overrides.get(knob):
                raise EngineUnavailable(f"{knob}: engine {self.engine!r} cannot run with it "
                                        f"({why})")
        # cudnn_benchmark is set with the precision (swinkit.model.precision): an engine whose
        # rank applies fp32 alone never sets it
        if overrides.get("cudnn_benchmark") and rec.precisions == ("fp32",):
            raise ValueError(f"cudnn_benchmark: engine {self.engine!r} does not apply it (its "
                             "rank applies no precision; docs/precision.md)")

    def ddp_spec(self):
        """The DDP run spec. With ``grad_accum`` K, DDP's loop counts micro-batches as
        iterations (``DDPOptions.grad_accum``: all but the last under ``no_sync``), so it runs
        K x the iterations and warm-up: the same optimizer steps as the other engines."""
        if self.grad_accum == 1:
            return self.run
        options = dataclasses.replace(self.run.ddp, grad_accum=self.grad_accum)
        return dataclasses.replace(self.run, ddp=options, iters=self.run.iters * self.grad_accum,
                                   warmup=self.run.warmup * self.grad_accum)


def spec_for_key(key: str, run, grad_accum: int = 1, **kw) -> EngineSpec:
    """The EngineSpec an engine key (``ddp``, ``zero1``, ``dp_vanilla``, ...) names; options
    in ``kw`` the engine does not take are dropped (a comparison passes DeepSpeed's timers to
    every engine)."""
    if key not in KEYS:
        raise ValueError(f"engine key must be one of {', '.join(KEYS)}; got {key!r}")
    rec, fixed = KEYS[key]
    taken = {k: v for k, v in kw.items() if k in rec.options or k not in OPTIONS}
    return EngineSpec(engine=rec.name, grad_accum=grad_accum, run=run, **fixed, **taken)
