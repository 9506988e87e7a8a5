"""The precision measurement table as markdown (numbers from
:func:`swinkit.experiments.precision_table.precision_table`), ready for docs/precision.md:
forward+backward per precision and heads layout, the optimizer step grouped three ways, one
rank's DDP iteration per precision."""
from __future__ import annotations

import statistics

from swinkit.measure.phases import PHASES

BASELINE = ("fp32", False)   # what the speed-ups divide: fp32 with the heads in NCHW
OUTSIDE_COMPUTE = ("data_wait", "exposed_comm", "optimizer", "other")


def _md(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows)]


def flops_text(flops_per_s: float) -> str:
    """``42.4 TFLOP/s`` on a GPU, ``9.8 GFLOP/s`` on a CPU core.

    >>> flops_text(42.4e12), flops_text(9.8e9)
    ('42.4 TFLOP/s', '9.8 GFLOP/s')
    """
    return (f"{flops_per_s / 1e12:.1f} TFLOP/s" if flops_per_s >= 1e12
            else f"{flops_per_s / 1e9:.1f} GFLOP/s")


def _ms(seconds: list[float] | float) -> float:
    return 1e3 * (statistics.median(seconds) if isinstance(seconds, list) else seconds)


def forward_backward_rows(variants: dict) -> list[list[str]]:
    """One row per (precision, heads layout); the speed-up is over fp32 with NCHW heads
    ('-' where that was not measured)."""
    base = next((_ms(v["seconds"]) for v in variants["forward_backward"]
                 if (v["precision"], v["channels_last_heads"]) == BASELINE), None)
    rows = []
    for v in variants["forward_backward"]:
        ms = _ms(v["seconds"])
        memory = v.get("peak_memory_mib")
        rows.append([v["label"], "channels_last" if v["channels_last_heads"] else "NCHW",
                     f"{ms:.1f}", f"{base / ms:.2f}x" if base else "-",
                     flops_text(v["achieved_flops"]), f"{100 * v['mfu']:.1f} %",
                     f"{v['matmul_peak_math']} ({flops_text(v['matmul_peak_flops'])})",
                     f"{memory:,.0f} MiB" if memory is not None else "-"])
    return rows


def optimizer_rows(variants: dict) -> list[list[str]]:
    """One row per grouping; the speed-up is over the per-parameter grouping."""
    steps = variants["optimizer"]
    base = _ms(steps["per_parameter"]["seconds"]) if "per_parameter" in steps else None
    return [[name.replace("_", " "), str(s["groups"]), s["kernel_ran"], f"{_ms(s['seconds']):.2f}",
             f"{base / _ms(s['seconds']):.2f}x" if base else "-"]
            for name, s in steps.items()]


def ddp_rows(ddp: dict) -> list[list[str]]:
    """One row per measured precision: the iteration's median, each phase's median, and the
    share of the iteration outside forward and backward (loading, exposed communication,
    optimizer, the tail), the part a faster precision does not shrink. The share is of the
    means, which add up to the mean iteration; medians need not add up to the median."""
    rows = []
    for precision, run in ddp.items():
        if "skipped" in run or "failed" in run:
            continue
        phases = run["phases_s"]
        outside = sum(run["phases_mean_s"][p] for p in OUTSIDE_COMPUTE) / run["iter_mean_s"]
        rows.append([run["precision"]["label"] if run.get("precision") else precision,
                     f"{_ms(run['iter_s']):.1f}", *(f"{_ms(phases[p]):.1f}" for p in PHASES),
                     f"{100 * outside:.0f} %"])
    return rows


def _ddp_setting(ddp: dict) -> str:
    """How the DDP iterations trained (the preset's setting, not the variants')."""
    run = next((r for r in ddp.values() if "iter_s" in r), None)
    if run is None:
        return ""
    remedies = run.get("remedies") or {}
    heads = "channels_last" if remedies.get("heads_channels_last") else "NCHW"
    groups = remedies.get("optimizer_param_groups", "?")
    return (f" at the preset's {run['images_per_rank']} images, heads {heads}, "
            f"{groups} optimizer groups")


def markdown(table: dict) -> str:
    v = table["variants"]
    skipped = {**v["skipped"], **{p: r["skipped"] for p, r in table["ddp"].items()
                                  if "skipped" in r}}
    failed = {**v.get("failed", {}), **{f"DDP iteration {p}": r["failed"]
                                        for p, r in table["ddp"].items() if "failed" in r}}
    lines = [f"Measured on {v['device_name']} (torch {v['torch']}), preset {v['preset']}, "
             f"{v['batch']} images; medians of {v['samples']} samples.", "",
             "Forward+backward of the segmentor (ms); MFU against the GEMM peak of the "
             "precision it ran in, measured in the same process:", "",
             *_md(["precision", "heads", "ms", "speed-up over fp32 NCHW", "achieved", "MFU",
                   "peak (measured)", "peak memory"], forward_backward_rows(v)), "",
             "AdamW's step (the weights and their state are fp32 in every precision; the "
             "kernel is the one torch ran):", "",
             *_md(["grouping", "groups", "kernel", "ms", "speed-up over per parameter"],
                  optimizer_rows(v)), "",
             f"One rank's instrumented DDP iteration{_ddp_setting(table['ddp'])} (ms, medians "
             "over the iterations; the share outside forward and backward is of the means):",
             "",
             *_md(["precision", "iteration", *PHASES, "outside forward and backward"],
                  ddp_rows(table["ddp"]))]
    if skipped:
        lines += ["", *(f"- {p}: {reason}" for p, reason in skipped.items())]
    if failed:
        lines += ["", *(f"- **failed**, {what}: {why}" for what, why in failed.items())]
    return "\n".join(lines) + "\n"
