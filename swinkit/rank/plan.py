"""A rank's step plan, as a value: which kind each step is, where the ranks line up between
kinds, what each kind switches, and which steps each read-out keeps.

A plain run is all DDP steps; a component run (``local``) is all local steps (DDP over each
rank alone, nothing communicated, the ranks meeting where DDP would hold them:
:mod:`swinkit.rank.meet`). A *paired* launch alternates optimizer steps of both kinds in one
process per rank, so that the run and its components are measured under the same launch (one
launch of a configuration here ran up to 10 % apart from another): the paired oracle's
decomposition check. Between the kinds the ranks line up at a barrier outside any step (the
ranks leave their local steps at different times, and a DDP step would wait for a skew no DDP
run has; before the local steps too, so that both kinds start from the same state).

The loop (:func:`swinkit.rank.ddp.ddp_rank`) runs ``plan.steps`` in order and reads out
``plan.main``'s steps as the result and each of ``plan.apart`` under its own key; a plan may
end with a ``tail`` that runs after the measured window (the component run's contention
load, :class:`swinkit.rank.components.ContentionTail`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class StepKind:
    """One kind of step and what it switches.

    Attributes:
        name: ``ddp`` (the DDP iteration) or ``local`` (the same model, nothing communicated).
        local: DDP's collectives go over the rank's group of one (a paired launch's
            :class:`~swinkit.rank.step_switch.Switch`).
        meets: the ranks meet where DDP would hold them (:class:`~swinkit.rank.meet.Meet`).
    """
    name: str
    local: bool
    meets: bool


DDP = StepKind("ddp", local=False, meets=False)
LOCAL = StepKind("local", local=True, meets=True)


class Tail(Protocol):
    """What a plan runs after its measured window, and reads back from the iterations it ran."""

    def run(self, run, rank, step, first: int) -> None:
        """Run more iterations (``step(index)`` each, numbered from ``first``)."""

    def read(self, iterations: list[dict]) -> dict:
        """The result's fields from the resolved timeline of the iterations it ran."""


@dataclass(frozen=True)
class StepPlan:
    """The steps of one rank's run, in the order they run.

    Attributes:
        steps: (kind, index) per step; the index counts the steps of its kind (it decides
            which micro-batch synchronises its gradients).
        warmup: steps before the measured window.
        line_up: the steps before which the ranks meet at a barrier, outside any step.
        main: the kind whose steps the result holds.
        apart: kinds read out under their own key (``result[name]``).
        tail: run after the measured window (None: nothing).
    """
    steps: tuple[tuple[StepKind, int], ...]
    warmup: int
    line_up: frozenset[int] = frozenset()
    main: str = "ddp"
    apart: tuple[str, ...] = ()
    tail: Tail | None = field(default=None, compare=False)

    @classmethod
    def plain(cls, warmup: int, iters: int, kind: StepKind = DDP) -> "StepPlan":
        """``warmup + iters`` steps of one kind, nothing switched.

        >>> StepPlan.plain(1, 2).kinds()
        [('ddp', 0), ('ddp', 1), ('ddp', 2)]
        """
        return cls(tuple((kind, i) for i in range(warmup + iters)), warmup, main=kind.name)

    @classmethod
    def paired(cls, warmup: int, iters: int, grad_accum: int) -> "StepPlan":
        """``warmup`` DDP steps, then optimizer steps (``grad_accum`` iterations each)
        alternating between DDP and local, ``iters`` of each kind, the ranks lining up before
        every measured optimizer step of either kind.

        >>> plan = StepPlan.paired(1, 2, 1)
        >>> plan.kinds(), sorted(plan.line_up)
        ([('ddp', 0), ('ddp', 1), ('local', 0), ('ddp', 2), ('local', 1)], [1, 2, 3, 4])
        """
        steps = [(DDP, i) for i in range(warmup)]
        for step in range(iters // grad_accum):
            first = step * grad_accum
            steps += [(DDP, warmup + first + p) for p in range(grad_accum)]
            steps += [(LOCAL, first + p) for p in range(grad_accum)]
        line_up = frozenset(n for n in range(warmup, len(steps))
                            if n == warmup or steps[n - 1][0] != steps[n][0])
        return cls(tuple(steps), warmup, line_up, main=DDP.name, apart=(LOCAL.name,))

    @classmethod
    def for_spec(cls, spec, tail: Tail | None = None) -> "StepPlan":
        """The plan a :class:`~swinkit.run_spec.RunSpec` asks for: paired, local or plain."""
        if spec.paired:
            plan = cls.paired(spec.warmup, spec.iters, spec.ddp.grad_accum)
        else:
            plan = cls.plain(spec.warmup, spec.iters, LOCAL if spec.local else DDP)
        return plan if tail is None else dataclasses.replace(plan, tail=tail)

    def __len__(self) -> int:
        return len(self.steps)

    def kinds(self) -> list[tuple[str, int]]:
        """(kind name, index) of every step."""
        return [(kind.name, i) for kind, i in self.steps]

    def positions(self, kind: str) -> list[int]:
        """The steps of ``kind``, warm-up included, in order."""
        return [n for n, (k, _) in enumerate(self.steps) if k.name == kind]
