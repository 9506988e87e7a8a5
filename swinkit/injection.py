"""The injection spec: known costs to inject, parsed once, with no torch or MMCV to import
(the supervisor validates and formats it before any rank starts; :mod:`swinkit.rank.inject`
puts it into a rank).

Spec (CLI ``--inject``): comma-separated
``data_ms=F,compute_ms=F,backward_ms=F,optimizer_ms=F,comm_ms=F,comm_scale=K,ranks=R1+R2,every=N``.
Each behaves like the real thing it stands for, on CPU and GPU alike:

* ``data_ms``: every loaded sample takes F ms longer, inside the MMSeg pipeline (in the loader
  workers when there are any): a slow disk or decoder. A sleep is right here: I/O frees the core.
* ``compute_ms``: every forward pass occupies the compute device for F ms more (a forward
  pre-hook on the backbone: on CPU a spin until F ms of wall time have passed, never yielding
  the core; on GPU a sleep kernel of F ms on the current stream). A host sleep would free the
  core for the loader and gloo's threads, so slower compute would cost less than its F ms.
  The forward only: ``backward_ms`` and ``optimizer_ms`` are the other compute phases.
* ``backward_ms``: every backward pass occupies the compute device for F ms more, half way
  through: a hook on the gradient of the backbone's middle stage output, so the gradient
  buckets of the head and the later stages are launched on time and the earlier stages' late
  (the same spin or sleep kernel, the latter on the autograd stream). With ``ranks`` this is the
  straggler inside backward that DDP's bucket all-reduces hide from per-rank phase times.
* ``optimizer_ms``: every optimizer step occupies the compute device for F ms more (a step
  pre-hook on the torch optimizer; the same spin or sleep kernel). With ``ranks`` the other
  ranks wait for it at the next iteration's first collective.
* ``comm_ms``: every gradient bucket's all-reduce starts F ms after the bucket is ready, for
  every rank of the collective (link latency). The delay runs off the autograd thread: on CPU a
  FIFO launcher thread per rank keeps the collectives in order; on GPU a sleep kernel on a side
  stream per bucket (made once, high priority: never a communicator's) that the collective
  waits for. With ``ranks``, only those ranks launch late, and everyone else waits for them in
  the collective.
* ``comm_scale``: every bucket's collective moves K times its bytes (the bucket plus (K-1) x
  its size of zeros, in one all-reduce): a link K times slower. The added time is what the
  isolated all-reduce benchmark measures for the extra bytes. A collective runs at the pace of
  its slowest link, so with ``ranks`` every rank's collective still grows: the cost is transfer
  for all, and no rank arrives late (a timeline cannot name a slow link's rank; the isolated
  all-reduce benchmark per world size is where a slow link shows).
* ``ranks``: only these ranks get the injection (a straggler); default all ranks. A sweep over
  world sizes applies a one-rank injection only where that rank exists.
* ``every``: inject on every N-th iteration only (default 1: all). With ``every=2`` one run
  holds injected and clean iterations side by side, so the added cost is read from pairs of
  neighbouring iterations and slow drifts of a busy machine cancel (the run's ``paired``
  figures). ``data_ms`` with ``every`` needs loader workers 0: workers load ahead, out of step;
  ``optimizer_ms`` with ``every`` needs no gradient accumulation (the step is every k-th
  iteration's, and an ``every`` of the same parity would never meet it).

Several specs (``--inject`` given more than once) each keep their own ranks: ``--inject
data_ms=60,ranks=0 --inject backward_ms=50,ranks=1`` is two stragglers, late in different
phases (:func:`combine`). Two specs that give one kind to a rank both name, two slower links,
or two values of ``every`` conflict and are refused by name, never one silently dropped.

Off by default and nothing is inserted unless a value is positive (``comm_scale`` above 1).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

DELAY_FIELDS = ("data_ms", "compute_ms", "backward_ms", "optimizer_ms", "comm_ms")


@dataclass(frozen=True)
class Injection:
    """Known costs of one run. One spec (``parts`` empty), or several combined by
    :func:`combine`: then the fields above ``parts`` summarise them (each kind's largest
    amount, every rank any spec names) for checks such as "is there a data_ms at all", and
    what a given rank receives is :meth:`for_rank`'s."""
    data_ms: float = 0.0
    compute_ms: float = 0.0     # the forward
    backward_ms: float = 0.0
    optimizer_ms: float = 0.0
    comm_ms: float = 0.0
    comm_scale: float = 1.0
    ranks: tuple[int, ...] | None = None   # None = every rank
    every: int = 1                         # inject on iterations it % every == 0
    parts: tuple["Injection", ...] = ()    # the specs combined, each with its own ranks

    def on_iteration(self, it: int) -> bool:
        return it % self.every == 0

    def applies_to(self, rank: int) -> bool:
        """Whether ``rank`` receives any of it (a spec of several: any spec naming it)."""
        if self.parts:
            return any(p.applies_to(rank) for p in self.parts)
        return self.ranks is None or rank in self.ranks

    @property
    def active(self) -> bool:
        return any(getattr(self, f) > 0 for f in DELAY_FIELDS) or self.comm_scale > 1

    def for_rank(self, rank: int) -> "Injection":
        """What ``rank`` receives, as one spec on every rank (``ranks`` None): the kinds of
        the specs that name it. A slower link is every rank's (a collective runs at its
        slowest link's pace), whatever its spec's ranks."""
        amounts = {f: getattr(p, f) for p in self.parts or (self,) if p.applies_to(rank)
                   for f in DELAY_FIELDS if getattr(p, f) > 0}
        return Injection(**amounts, comm_scale=self.comm_scale, every=self.every)

    def named_ranks(self) -> tuple[int, ...]:
        """Every rank a spec names (none for specs on every rank)."""
        return tuple(sorted({r for p in self.parts or (self,) for r in p.ranks or ()}))

    def for_world_size(self, world_size: int) -> "Injection":
        """This injection where its ranks exist at ``world_size``; a one-rank injection whose
        ranks all lie beyond it becomes no injection (the world-size-1 baseline of a sweep)."""
        if self.parts:
            kept = [p.for_world_size(world_size) for p in self.parts]
            return combine([p for p in kept if p.active] or kept[:1])
        if self.ranks is None:
            return self
        kept = tuple(r for r in self.ranks if r < world_size)
        return Injection(ranks=kept) if not kept else Injection(**{**self._fields(), "ranks": kept})

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> "Injection":
        """The injection a :meth:`to_dict` (or a result's stored ``injection``) holds; one
        stored before ``parts`` existed reads as one spec."""
        data = dict(data or {})
        parts = tuple(cls.from_dict(p) for p in data.pop("parts", None) or ())
        ranks = data.pop("ranks", None)
        return cls(**data, ranks=None if ranks is None else tuple(ranks), parts=parts)

    def describe(self) -> str:
        if self.parts:
            return "; ".join(p.describe() for p in self.parts)
        parts = [f"{f}={getattr(self, f):g}" for f in DELAY_FIELDS if getattr(self, f) > 0]
        if self.comm_scale > 1:
            parts.append(f"comm_scale={self.comm_scale:g}")
        if parts and self.ranks is not None:
            parts.append("ranks=" + "+".join(map(str, self.ranks)))
        if parts and self.every > 1:
            parts.append(f"every={self.every}")
        return ",".join(parts) or "none"

    def _fields(self) -> dict:
        """This spec's own fields (no ``parts``)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "parts"}


def combine(specs: list[Injection]) -> Injection:
    """One run's injection from several specs, each keeping its own ranks; ValueError naming
    ``--inject`` where two conflict: one kind on a rank both name (whether to add or replace
    is not for swinkit to guess), two slower links, or two values of ``every`` (one run gates
    every injection on the same iterations).

    >>> two = combine([parse_injection("data_ms=60,ranks=0"),
    ...                parse_injection("backward_ms=50,ranks=1")])
    >>> two.for_rank(0).describe(), two.for_rank(1).describe(), two.named_ranks()
    ('data_ms=60', 'backward_ms=50', (0, 1))
    """
    specs = list(specs)
    if len(specs) <= 1:
        return specs[0] if specs else Injection()
    if len({s.every for s in specs}) > 1:
        given = "; ".join(s.describe() for s in specs)
        raise ValueError(f"--inject: every differs between specs ({given}): one run injects "
                         "on the same iterations for every spec")
    for i, a in enumerate(specs):
        for b in specs[i + 1:]:
            _check_apart(a, b)
    summary = {f: max(getattr(s, f) for s in specs) for f in DELAY_FIELDS + ("comm_scale",)}
    ranks = (None if any(s.ranks is None for s in specs)
             else tuple(sorted({r for s in specs for r in s.ranks})))
    return Injection(**summary, ranks=ranks, every=specs[0].every, parts=tuple(specs))


def _check_apart(a: Injection, b: Injection) -> None:
    """ValueError where specs ``a`` and ``b`` give one kind to the same rank, or both slow
    the link."""
    if a.comm_scale > 1 and b.comm_scale > 1:
        raise ValueError(f"--inject: two slower links ({a.describe()}; {b.describe()}): a run "
                         "has one link, give comm_scale once")
    both = [f for f in DELAY_FIELDS if getattr(a, f) > 0 and getattr(b, f) > 0]
    shared = (None if a.ranks is None or b.ranks is None else set(a.ranks) & set(b.ranks))
    if both and shared != set():
        where = "every rank" if shared is None else "rank(s) " + "+".join(map(str, sorted(shared)))
        raise ValueError(f"--inject: {both[0]} is given twice for {where} ({a.describe()}; "
                         f"{b.describe()}): give each kind once per rank")


def parse_injections(specs: list[str] | str | None) -> Injection:
    """Several ``--inject`` specs (argparse's ``action="append"``), each parsed by
    :func:`parse_injection` and combined (:func:`combine`); ValueError names the field or
    the conflict."""
    if isinstance(specs, str):
        specs = [specs]
    return combine([parse_injection(s) for s in specs or [] if s])


def parse_injection(spec: str | None) -> Injection:
    """Parse ``data_ms=5,comm_ms=2,ranks=1`` (ranks joined by '+'); ValueError names the field.

    >>> parse_injection("backward_ms=40,ranks=1,every=2").describe()
    'backward_ms=40,ranks=1,every=2'
    """
    if not spec:
        return Injection()
    values: dict = {}
    for item in spec.split(","):
        key, sep, raw = item.strip().partition("=")
        if not sep:
            raise ValueError(f"--inject entries look like key=value, got {item!r}")
        if key in DELAY_FIELDS + ("comm_scale",):
            values[key] = _number(key, raw, minimum=1.0 if key == "comm_scale" else 0.0)
        elif key == "every":
            if not raw.isdigit() or int(raw) < 1:
                raise ValueError(f"--inject every must be an integer >= 1, got {raw!r}")
            values["every"] = int(raw)
        elif key == "ranks":
            parts = raw.replace(";", "+").split("+")
            if not all(p.strip().isdigit() for p in parts):
                raise ValueError(f"--inject ranks must be rank numbers joined by '+', got {raw!r}")
            values["ranks"] = tuple(sorted({int(p) for p in parts}))
        else:
            raise ValueError(f"--inject has no field {key!r} "
                             f"(use {', '.join(DELAY_FIELDS)}, comm_scale, ranks, every)")
    return Injection(**values)


def _number(key: str, raw: str, minimum: float) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"--inject {key} must be a number, got {raw!r}") from None
    if not value >= minimum:
        raise ValueError(f"--inject {key} must be >= {minimum:g}, got {raw!r}")
    return value
