"""Instruments that know nothing of the workload: timers, statistics, samplers, atomic files."""
