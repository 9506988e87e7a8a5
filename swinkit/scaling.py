"""Kept importable for asv history: ``benchmarks/bench_ddp.py`` (run from the working tree
against older commits too) imports ``swinkit.scaling``; the arithmetic lives in
:mod:`swinkit.attribution.scaling`."""
from swinkit.attribution.scaling import efficiency, karp_flatt, speedup  # noqa: F401
