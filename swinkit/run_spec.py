"""What a DDP run measures, as one torch-free value that crosses the process hop.

The supervisor checks a :class:`RunSpec` (:meth:`RunSpec.check`, then the launch-dependent
checks of :class:`swinkit.runs.ddp_run.DDPRunSpec`, which adds how to launch), fills in what it
resolved (the data root it wrote, the precision), and writes it into the run folder once, as the
rank entry point's ``spec`` (``job.json``, :func:`swinkit.launch.launch`). Each rank reads it back
(:meth:`RunSpec.of`) and builds its run from it: :func:`swinkit.rank.ddp.ddp_rank` and
:func:`swinkit.rank.components.component_rank`. One value on both sides, so a field added
here reaches the rank without a second list of keyword arguments to keep in step.

The device is not in it: the backend decides it, in the rank as in the supervisor (gloo ranks
run on CPU whatever the preset says).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from swinkit.ddp_options import DDPOptions
from swinkit.injection import Injection
from swinkit.input_checks import check_int
from swinkit.precision import parse_precision


@dataclass(frozen=True)
class RunSpec:
    """One DDP run's workload and measurement, whatever launches it.

    Attributes:
        preset: the workload preset (``thesis``, ``cpu``, ``test``).
        iters: measured iterations (micro-batches: ``grad_accum`` of them make an optimizer
            step); of each kind in a paired run.
        warmup: iterations before the measured ones, dropped.
        workers: loader workers per rank (None: the preset's).
        injection: known costs put into the ranks (each spec with its own ranks).
        data_root: the ADEChallengeData2016 folder (None: the synthetic set's); the copy that
            crosses to the ranks holds the folder the supervisor resolved and wrote.
        overrides: ``--cfg-options``-style dotted keys for the preset.
        trace_dir: torch.profiler traces here, one file per rank.
        bare: no instrumentation, one clock read per iteration (what instrumenting costs).
        ddp_timers: DDP's reducer timers (None: on CPU only; they synchronise on GPU).
        ddp: how DDP itself is configured (buckets, hook, accumulation).
        local: communicate nothing: the component measurement (DDP over each rank alone).
        paired: DDP and local optimizer steps alternating in one launch: the run and its
            components measured together (:class:`swinkit.rank.plan.StepPlan`).
        precision: the training precision (None: the preset's; checked against the device
            before launch). The DDP loop applies it (autocast around forward and loss,
            fp16's loss scaling; weights, gradients and all-reduce in fp32).
        seed: the weights' and the loader's seed (each rank's augmentation adds its rank).
    """
    preset: str = "test"
    iters: int = 10
    warmup: int = 3
    workers: int | None = None
    injection: Injection = field(default_factory=Injection)
    data_root: str | None = None
    overrides: dict = field(default_factory=dict)
    trace_dir: str | None = None
    bare: bool = False
    ddp_timers: bool | None = None
    ddp: DDPOptions = field(default_factory=DDPOptions)
    local: bool = False
    paired: bool = False
    precision: str | None = None
    seed: int = 0

    def check(self) -> "RunSpec":
        """The checks that need nothing but the spec (no preset read, no launch): ValueError
        naming the field and the value."""
        check_int("iters", self.iters, 1)
        check_int("warmup", self.warmup, 0)
        check_int("seed", self.seed, 0)
        if self.local and self.paired:
            raise ValueError("local and paired exclude each other (paired runs local "
                             "iterations beside the DDP ones)")
        if self.paired and self.bare:
            raise ValueError("paired needs the timeline (it is the components' measurement); "
                             "bare has none")
        if self.workers is not None:
            check_int("workers", self.workers, 0)
        if self.precision is not None:  # the name here; against the device before launch
            parse_precision(self.precision)
        self.ddp.validate()
        self._check_steps()
        self._check_injection()
        return self

    def _check_steps(self) -> None:
        """Whole optimizer steps, and PowerSGD compressing in every measured one."""
        k = self.ddp.grad_accum
        if self.iters % k or self.warmup % k:
            raise ValueError(f"iters ({self.iters}) and warmup ({self.warmup}) must be multiples "
                             f"of grad_accum ({k}): measured iterations are whole optimizer steps")
        if self.ddp.comm_hook == "powersgd" and self.warmup < 2 * k:
            # PowerSGD compresses from its 2nd synchronising step on (torch needs DDP's bucket
            # rebuild behind it): earlier measured steps would send the uncompressed gradients
            raise ValueError(f"warmup ({self.warmup}) must be at least 2 x grad_accum ({2 * k}) "
                             "with comm_hook powersgd: PowerSGD starts compressing at its "
                             "second optimizer step, which must lie in the warm-up")

    def _check_injection(self) -> None:
        """The injections this run's loop cannot apply as asked."""
        k, inj = self.ddp.grad_accum, self.injection
        if self.ddp.comm_hook and (inj.comm_ms > 0 or inj.comm_scale > 1):
            raise ValueError(f"comm_hook {self.ddp.comm_hook} cannot be combined with a comm "
                             "injection (both replace the bucket's collective)")
        if inj.optimizer_ms > 0 and inj.every > 1 and k > 1:
            raise ValueError(f"--inject optimizer_ms with every={inj.every} needs "
                             f"grad_accum 1 (got {k}): the optimizer steps every {k}-th "
                             "iteration, out of step with the injected ones")

    def to_dict(self) -> dict:
        """The spec as JSON (what crosses to the ranks): this class's fields only, so a
        subclass's supervisor-side fields (how to launch) stay behind."""
        out = {f.name: getattr(self, f.name) for f in fields(RunSpec)}
        out.update(injection=self.injection.to_dict(), ddp=self.ddp.to_dict(),
                   overrides=dict(self.overrides))
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "RunSpec":
        """The spec a :meth:`to_dict` holds; ValueError naming an unknown field."""
        data = dict(data)
        unknown = set(data) - {f.name for f in fields(RunSpec)}
        if unknown:
            raise ValueError(f"unknown run spec field(s) {sorted(unknown)}")
        return RunSpec(**{**data, "injection": Injection.from_dict(data.get("injection")),
                          "ddp": DDPOptions.from_dict(data.get("ddp"))})

    @classmethod
    def of(cls, spec: "RunSpec | dict") -> "RunSpec":
        """``spec`` as a RunSpec: as it crossed the hop (a dict from ``job.json``) or as given
        (a direct call)."""
        return spec if isinstance(spec, RunSpec) else cls.from_dict(spec)
