"""The training precision: what ``fp32``, ``tf32``, ``bf16`` and ``fp16`` mean in swinkit, and
whether a device can be measured in it (torch-free, so the supervisor checks it, with the rest
of a run's configuration, before any process starts; :mod:`swinkit.model.precision` applies it
inside a rank or a component's process).

Each precision is applied the way users train in it: the weights, the gradients and DDP's
gradient all-reduce stay fp32 (DDP's default; compressing the gradients for the wire is the
separate ``fp16_hook`` / ``bf16_hook`` what-if), and only the forward pass and the loss run
under autocast:

    name  autocast   TF32 (matmul, cuDNN)  loss scaling  MFU divides by the peak of
    fp32  none       off                   none          fp32 GEMM
    tf32  none       on                    none          TF32 GEMM (fp32 on CPU)
    bf16  bfloat16   on                    none          bf16 GEMM
    fp16  float16    off                   GradScaler    fp16 GEMM

``fp32`` switches TF32 off for cuDNN's convolutions too (torch's default leaves them on), so
that the name is the math: an fp32 measurement is IEEE fp32 throughout. ``bf16`` turns TF32 on
as users run it beside autocast: the ops autocast leaves in fp32 then run as TF32.

On CPU (:func:`check_precision`): ``fp16`` is refused; ``tf32`` runs and is labelled a no-op
(CPUs have no TF32: it is fp32 math, and is never reported as a TF32 measurement); ``bf16``
runs and is labelled slow where the CPU has no bf16 instructions (avx512_bf16, amx_bf16 or
Arm's bf16), since autocast then emulates it.

Example:
    >>> plan = check_precision("tf32", "cpu")
    >>> plan.measured, plan.note
    ('fp32', 'tf32 is a no-op on CPU (CPUs have no TF32): measured as fp32 math')
    >>> check_precision("fp16", "cpu")
    Traceback (most recent call last):
    ...
    ValueError: precision fp16 is refused on CPU: fp16 exists for GPU tensor cores (with loss scaling); a CPU has no fp16 matmul units to measure, so its times would stand for nothing a GPU user runs (use bf16 or fp32 on CPU)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

CPUINFO = "/proc/cpuinfo"
# x86 (avx512_bf16, amx_bf16) and Arm (bf16) flags of native bf16 arithmetic
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


@dataclass(frozen=True)
class Precision:
    """One training precision, as plain values.

    Attributes:
        name: ``fp32``, ``tf32``, ``bf16`` or ``fp16``.
        autocast: the autocast dtype's torch name (``bfloat16``, ``float16``) or None.
        tf32: TF32 allowed for fp32 matmuls (cuBLAS) and convolutions (cuDNN).
        loss_scaling: a GradScaler scales the loss (fp16's narrow exponent needs it).
        peak: the GEMM whose peak MFU divides by on a GPU (``fp32``, ``tf32``, ``bf16``,
            ``fp16``).
    """
    name: str
    autocast: str | None
    tf32: bool
    loss_scaling: bool
    peak: str

    def to_dict(self) -> dict:
        return asdict(self)


PRECISIONS = {p.name: p for p in (
    Precision("fp32", autocast=None, tf32=False, loss_scaling=False, peak="fp32"),
    Precision("tf32", autocast=None, tf32=True, loss_scaling=False, peak="tf32"),
    Precision("bf16", autocast="bfloat16", tf32=True, loss_scaling=False, peak="bf16"),
    Precision("fp16", autocast="float16", tf32=False, loss_scaling=True, peak="fp16"),
)}
DEFAULT = "fp32"
AMPERE = (8, 0)   # the first compute capability with TF32 and bf16 tensor cores


def parse_precision(name, field: str = "precision") -> Precision:
    """The :class:`Precision` called ``name``; ValueError naming ``field`` otherwise.

    >>> parse_precision("bf16").autocast
    'bfloat16'
    >>> parse_precision("amp", field="--precision")
    Traceback (most recent call last):
    ...
    ValueError: --precision must be one of fp32, tf32, bf16, fp16; got 'amp'
    """
    if not isinstance(name, str) or name not in PRECISIONS:
        raise ValueError(f"{field} must be one of {', '.join(PRECISIONS)}; got {name!r}")
    return PRECISIONS[name]


@dataclass(frozen=True)
class PrecisionPlan:
    """A precision checked against the device it runs on: what is measured, and how to say it.

    Attributes:
        precision: the precision asked for (what the run applies).
        device_type: ``cpu`` or ``cuda``.
        measured: the math the measurement stands for (``fp32`` for tf32 on CPU), and the
            name of the GEMM peak MFU divides by.
        note: why ``measured`` differs or the speed is not representative; None if neither.
        tag: the same in a few words, for the label.
    """
    precision: Precision
    device_type: str
    measured: str
    note: str | None = None
    tag: str | None = None

    @property
    def label(self) -> str:
        """The precision as outputs name it, e.g. ``bf16`` or ``tf32 (a no-op on CPU: fp32)``."""
        return self.precision.name + (f" ({self.tag})" if self.tag else "")

    def to_dict(self) -> dict:
        return {"precision": self.precision.name, "measured": self.measured,
                "label": self.label, "note": self.note, **{
                    k: v for k, v in self.precision.to_dict().items() if k != "name"}}


def cpu_has_bf16(cpuinfo: str | None = None) -> bool | None:
    """Whether the CPU does bf16 arithmetic natively (from ``/proc/cpuinfo``'s flags); None
    where that file cannot be read (not Linux).

    Args:
        cpuinfo: the file's text (a seam for tests); default: read it.

    >>> cpu_has_bf16("flags\\t: fpu sse avx512f avx512_bf16\\n"), cpu_has_bf16("flags : avx2\\n")
    (True, False)
    """
    if cpuinfo is None:
        try:
            with open(CPUINFO) as f:
                cpuinfo = f.read()
        except OSError:
            return None
    flags = set()
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):  # x86, Arm
            flags |= set(value.split())
    return any(f in flags for f in BF16_CPU_FLAGS)


def check_precision(name, device_type: str, bf16_native: bool | None = None,
                    field: str = "precision",
                    cuda_capability: tuple[int, int] | None = None) -> PrecisionPlan:
    """``name`` checked for ``device_type``: refused (ValueError naming ``field``) where it
    cannot be measured there, labelled where what is measured differs from what was asked.

    Args:
        device_type: ``cpu`` or ``cuda``.
        bf16_native: whether the CPU has bf16 instructions (default: :func:`cpu_has_bf16`);
            a seam for tests.
        cuda_capability: the GPU's compute capability where known (a rank knows it; the
            supervisor may not): before Ampere (8.0) a GPU has no TF32 and no bf16 tensor cores.
    """
    precision = parse_precision(name, field)
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device_type!r}")
    if device_type == "cuda":
        return _on_gpu(precision, cuda_capability)
    if precision.name == "fp16":
        raise ValueError(
            f"{field} fp16 is refused on CPU: fp16 exists for GPU tensor cores (with loss "
            "scaling); a CPU has no fp16 matmul units to measure, so its times would stand for "
            "nothing a GPU user runs (use bf16 or fp32 on CPU)")
    if precision.name == "tf32":
        return PrecisionPlan(precision, device_type, "fp32",
                             "tf32 is a no-op on CPU (CPUs have no TF32): measured as fp32 math",
                             "a no-op on CPU: fp32")
    if precision.name == "bf16":
        native = cpu_has_bf16() if bf16_native is None else bf16_native
        if not native:
            why = ("this CPU has no bf16 instructions (no avx512_bf16, amx_bf16 or bf16 flag)"
                   if native is False else f"{CPUINFO} could not be read to check for bf16 "
                   "instructions")
            return PrecisionPlan(precision, device_type, "bf16",
                                 f"bf16 on this CPU is slow: {why}, so autocast emulates it; "
                                 "its times are no guide to bf16 on hardware that has it",
                                 "slow: no bf16 instructions")
    return PrecisionPlan(precision, device_type, precision.peak)


def _on_gpu(precision: Precision, capability: tuple[int, int] | None) -> PrecisionPlan:
    """A GPU before Ampere (a V100: 7.0) runs tf32 as fp32 and bf16 without tensor cores."""
    old = capability is not None and tuple(capability) < AMPERE
    where = f"compute capability {capability[0]}.{capability[1]}" if old else ""
    if old and precision.name == "tf32":
        return PrecisionPlan(precision, "cuda", "fp32", f"tf32 is a no-op on a GPU of {where} "
                             "(TF32 came with Ampere, 8.0): measured as fp32 math",
                             "a no-op on this GPU: fp32")
    if old and precision.name == "bf16":
        return PrecisionPlan(precision, "cuda", "bf16", f"bf16 on a GPU of {where} is slow: "
                             "no bf16 tensor cores before Ampere (8.0)",
                             "slow: no bf16 tensor cores")
    return PrecisionPlan(precision, "cuda", precision.peak)


def bf16_fast_on_cpu(bf16_native: bool | None = None) -> tuple[bool, str | None]:
    """Whether bf16 belongs in a default CPU benchmark run, and why not if it does not."""
    plan = check_precision("bf16", "cpu", bf16_native)
    return plan.note is None, plan.note
