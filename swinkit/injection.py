"""The injection spec: known costs to inject, parsed once, with no torch or MMCV to import
(the supervisor validates and formats it before any rank starts; :mod:`swinkit.rank.inject`
puts it into a rank).

Spec (CLI ``--inject``): comma-separated ``KIND=F`` for each kind of :data:`KINDS` (F in ms),
``comm_scale=K``, ``ranks=R1+R2``, ``every=N``. Each kind behaves like the real thing it stands
for, on CPU and GPU alike: a slower device is occupied (a spin that never yields the core on
CPU, a sleep kernel on the GPU's stream), never a host sleep, which would free the core for the
loader and gloo's threads, so slower compute would cost less than its F ms; a slow loader
sleeps, as I/O frees the core. :data:`KINDS` is the one table of the kinds: parsing, the
rank's hooks (:data:`swinkit.rank.inject.HOOKS`), validate's expectations, the prediction's
costs and the CLI's help all read it.

* ``comm_scale``: every bucket's collective moves K times its bytes (the bucket plus (K-1) x
  its size of zeros, in one all-reduce): a link K times slower. A collective runs at the pace of
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

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """One kind of injected cost, declared once.

    Attributes:
        name: the ``--inject`` field (milliseconds).
        phase: the phase, and blame key, its added time lands in (validate expects it there).
        into: what the rank's hook goes into (:data:`swinkit.rank.inject.HOOKS`):
            ``pipeline`` (the loader's), ``model``, ``optimizer`` or ``launcher`` (the
            gradient buckets' collectives).
        what: what it stands for and how it is applied, in a few words (CLI help, docs).
        per_sample: the amount is per loaded sample (a rank pays it per image, and on its
            own time only where it loads itself: no loader workers).
        launch_delay: its cost is a late start of the collectives, not time of the rank's
            own phases (the prediction's replay delays the all-reduces).
    """
    name: str
    phase: str
    into: str
    what: str
    per_sample: bool = False
    launch_delay: bool = False

    @property
    def measured(self) -> str:
        """The name its measured delays are filed under in a rank's result (``injected_s``)."""
        return self.name.removesuffix("_ms")


KINDS = (
    Kind("data_ms", "data_wait", "pipeline", "every loaded sample F ms longer, in the MMSeg "
         "pipeline (in the loader workers where there are any): a slow disk or decoder",
         per_sample=True),
    Kind("compute_ms", "forward", "model", "every forward occupies the device F ms more (a "
         "pre-hook on the backbone)"),
    Kind("backward_ms", "backward", "model", "every backward occupies the device F ms more, half "
         "way through (a hook on the gradient of the backbone's middle stage: the earlier "
         "stages' buckets are late, the straggler DDP's all-reduces hide from phase times)"),
    Kind("optimizer_ms", "optimizer", "optimizer", "every optimizer step occupies the device F "
         "ms more (a step pre-hook); the other ranks wait at the next collective"),
    Kind("comm_ms", "exposed_comm", "launcher", "every gradient bucket's all-reduce starts F ms "
         "after the bucket is ready, off the autograd thread (link latency); with ranks, the "
         "others wait for them in the collective", launch_delay=True),
)
KIND_BY_NAME = {k.name: k for k in KINDS}
DELAY_FIELDS = tuple(KIND_BY_NAME)  # the kinds' names, in the table's order


def spec_help() -> str:
    """The ``--inject`` syntax and where each kind lands, from the table (CLI help).

    >>> spec_help().split(", compute_ms")[0]
    'KIND=F ms, one of data_ms (lands in data_wait)'
    """
    kinds = ", ".join(f"{k.name} ({'lands in ' if i == 0 else ''}{k.phase})"
                      for i, k in enumerate(KINDS))
    return f"KIND=F ms, one of {kinds}; comm_scale=K (a slower link), ranks=1+2, every=N"


@dataclass(frozen=True, init=False)
class Injection:
    """Known costs of one run. One spec (``parts`` empty), or several combined by
    :func:`combine`: then the summary fields summarise them (each kind's largest amount,
    every rank any spec names) for checks such as "is there a data_ms at all", and what a
    given rank receives is :meth:`for_rank`'s.

    Each kind of :data:`KINDS` is an attribute (``injection.data_ms``, 0.0 where not given)
    and a keyword of the constructor; ``amounts`` holds the positive ones.
    """
    amounts: tuple[tuple[str, float], ...]  # (kind, ms) of each kind given, in table order
    comm_scale: float
    ranks: tuple[int, ...] | None          # None = every rank
    every: int                             # inject on iterations it % every == 0
    parts: tuple["Injection", ...]         # the specs combined, each with its own ranks

    def __init__(self, comm_scale: float = 1.0, ranks: tuple[int, ...] | None = None,
                 every: int = 1, parts: tuple["Injection", ...] = (),
                 amounts: tuple[tuple[str, float], ...] = (), **kinds: float):
        unknown = set(kinds) - set(KIND_BY_NAME)
        if unknown:
            raise TypeError(f"Injection has no kind {sorted(unknown)} (kinds: {DELAY_FIELDS})")
        given = {**dict(amounts), **kinds}
        set_ = object.__setattr__  # frozen: set once, here
        set_(self, "amounts", tuple((k, float(given[k])) for k in DELAY_FIELDS
                                    if given.get(k, 0) > 0))
        set_(self, "comm_scale", comm_scale)
        set_(self, "ranks", ranks)
        set_(self, "every", every)
        set_(self, "parts", tuple(parts))

    def __getattr__(self, name: str) -> float:
        if name in KIND_BY_NAME:  # a kind not given is 0 ms
            return dict(self.__dict__.get("amounts", ())).get(name, 0.0)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

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
        return Injection(ranks=kept) if not kept else Injection(
            amounts=self.amounts, comm_scale=self.comm_scale, ranks=kept, every=self.every)

    def to_dict(self) -> dict:
        """Every kind by name (0.0 where not given), then the rest: the JSON runs store."""
        return {**{k: getattr(self, k) for k in DELAY_FIELDS}, "comm_scale": self.comm_scale,
                "ranks": None if self.ranks is None else list(self.ranks),
                "every": self.every, "parts": [p.to_dict() for p in self.parts]}

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
