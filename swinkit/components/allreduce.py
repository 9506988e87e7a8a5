"""The gradient all-reduce in isolation: the thesis model's gradients, flat and as DDP buckets.

Whatever preset runs, the tensors are the thesis model's (UperNet + SwinV2-B): the backbone's
gradient (86.9M values) and the whole segmentor's as one flat tensor each, and the segmentor's
gradient split the way DDP actually buckets it (sizes and order read from DDP's logging data
after its bucket rebuild). Each is reduced in fp32 and bf16. ``preset_buckets`` is the running
preset's own DDP buckets (what the measured DDP iteration reduces), for the prediction.

Per sample the time is the slowest rank's (a collective is done when its last rank is), after a
barrier. Bandwidths follow nccl-tests: algbw = bytes / t, busbw = algbw * 2 (N - 1) / N. After
timing, a correctness check reduces known values and fails the benchmark with the count of wrong
elements (``$SWINKIT_FAULT=corrupt_allreduce:RANKS`` makes those ranks send corrupted values into
the check's reduction, as a faulty link would, so every rank receives wrong elements).
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from swinkit.faults import current_fault
from swinkit.measure.timing import timed
from swinkit.rank.devices import rank_device

LAYOUTS = ("backbone_flat", "segmentor_flat", "ddp_buckets", "preset_buckets")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class AllReduceMismatch(RuntimeError):
    """The reduced values are wrong; the message has the count of wrong elements."""


def gradient_layouts(device: torch.device, preset: str = "thesis") -> dict[str, list[int]]:
    """Element counts per tensor for each layout: the thesis model's, and ``preset``'s buckets."""
    layouts = _model_layouts(device, "thesis")
    layouts["preset_buckets"] = (layouts["ddp_buckets"] if preset == "thesis"
                                 else _model_layouts(device, preset)["ddp_buckets"])
    return layouts


def _model_layouts(device: torch.device, preset: str) -> dict[str, list[int]]:
    """Flat sizes and DDP's bucket sizes, read from a DDP-wrapped segmentor of ``preset``."""
    from torch.nn.parallel import DistributedDataParallel

    from swinkit.config import load_config
    from swinkit.model.segmentor import build_segmentor

    cfg = load_config(preset, device="cpu" if device.type == "cpu" else "cuda")
    model = build_segmentor(cfg).to(device)
    backbone = sum(p.numel() for p in model.backbone.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters() if p.requires_grad)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    ddp._set_ddp_runtime_logging_sample_rate(1)
    inputs, samples = tiny_batch(device)  # small input: only the gradient order matters
    # DDP starts with one big bucket, rebuilds by gradient-ready order after iteration 1, and
    # its logging data shows the rebuilt sizes one iteration later: hence three iterations.
    for _ in range(3):
        losses = ddp(inputs, samples, mode="loss")
        model.parse_losses(losses)[0].backward()
    data = ddp._get_ddp_logging_data()
    sizes = data.get("rebuilt_bucket_sizes") or data["bucket_sizes"]
    itemsize = next(model.parameters()).element_size()
    buckets = [int(s) // itemsize for s in str(sizes).split(",")]
    del ddp, model
    return {"backbone_flat": [backbone], "segmentor_flat": [total], "ddp_buckets": buckets}


def tiny_batch(device, n: int = 2, size: int = 64):
    """(inputs (n, 3, size, size), SegDataSamples with all-zero labels) for a loss forward."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample

    shape = (size, size)
    samples = []
    for _ in range(n):
        s = SegDataSample(metainfo=dict(img_shape=shape, pad_shape=shape, ori_shape=shape))
        s.gt_sem_seg = PixelData(data=torch.zeros(1, *shape, dtype=torch.long, device=device))
        samples.append(s)
    return torch.randn(n, 3, *shape, device=device), samples


def _timed(tensors: list[torch.Tensor], device, reps: int = 3) -> float:
    """Seconds per round of (launch every tensor's all-reduce, as DDP does; wait for all).

    ``reps`` rounds run back to back after a barrier, so the barrier's exit skew between ranks
    is spread over them (nccl-tests' practice); the slowest rank's mean is the sample."""
    dist.barrier()
    start = time.perf_counter()
    for _ in range(reps):
        works = [dist.all_reduce(t, async_op=True) for t in tensors]
        for w in works:
            w.wait()
    if device.type == "cuda":
        torch.cuda.synchronize()
    local = torch.tensor([(time.perf_counter() - start) / reps], dtype=torch.float64, device=device)
    dist.all_reduce(local, op=dist.ReduceOp.MAX)
    return float(local)


CORRUPT_EVERY = 97  # the corrupt_allreduce fault perturbs every 97th element a rank sends


def check_reduction(tensors: list[torch.Tensor], rank: int, world: int, corrupt: bool = False) -> int:
    """Reduce rank-dependent small integers (exact in bf16 too); return the wrong-element count.

    Rank r sends ``(i % 7) * (r + 1)`` at element i, so the sum is ``(i % 7) * N (N + 1) / 2``,
    computed here without any collective. ``corrupt`` adds 1 to every CORRUPT_EVERY-th element
    this rank sends (the fault switch's stand-in for a link that flips bits)."""
    wrong = 0
    for t in tensors:
        pattern = (torch.arange(t.numel(), device=t.device) % 7).to(t.dtype)
        t.copy_(pattern * (rank + 1))
        if corrupt:
            t[::CORRUPT_EVERY] += 1
        dist.all_reduce(t)
        expected = pattern * (world * (world + 1) // 2)
        wrong += int((t != expected).sum())
    return wrong


def allreduce_rank(rank, samples: int = 7, warmup: int = 2, layouts=LAYOUTS, dtypes=tuple(DTYPES),
                   bare_iters: int = 7, sizes: dict | None = None, preset: str = "thesis") -> dict:
    """Rank entry point: time every (layout, dtype); check correctness; time a bare loop.

    ``sizes`` replaces the thesis model's layouts (element counts per tensor), for tests."""
    device = rank_device(dist.get_backend(), rank.local_rank)
    sizes = sizes or gradient_layouts(device, preset)
    fault = current_fault()
    corrupt = bool(fault and fault.kind == "corrupt_allreduce" and fault.on_rank(rank.rank))
    out = {"rank": rank.rank, "sizes": sizes, "times": {}, "wrong": {}}
    for step, (layout, dname) in enumerate((l, d) for l in layouts for d in dtypes):
        rank.heartbeat(step)
        tensors = [torch.zeros(n, dtype=DTYPES[dname], device=device) for n in sizes[layout]]
        times = [_timed(tensors, device) for _ in range(warmup + samples)][warmup:]
        out["times"][f"{layout}/{dname}"] = times
        out["wrong"][f"{layout}/{dname}"] = check_reduction(tensors, rank.rank, rank.world_size, corrupt)
        del tensors
    flat = torch.zeros(sizes["segmentor_flat"][0], device=device)
    out["bare_times"] = _bare_loop(flat, warmup, bare_iters, device)
    bad = {k: v for k, v in out["wrong"].items() if v}
    if bad:
        raise AllReduceMismatch(f"rank {rank.rank}: all-reduce produced wrong elements: "
                                + ", ".join(f"{k}: {v}" for k, v in bad.items()))
    return out


def _bare_loop(t: torch.Tensor, warmup: int, iters: int, device) -> list[float]:
    """The plainest timing there is: all_reduce in a loop, one clock read per call."""
    return timed(lambda: dist.all_reduce(t), iters, warmup=warmup,
                 sync=torch.cuda.synchronize if device.type == "cuda" else None)


def bandwidths(nbytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s, nccl-tests' convention."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (world - 1) / world


def summarize_rank0(result: dict, world: int) -> dict:
    """Per (layout/dtype): seconds, algbw and busbw samples (GB/s) from rank 0's record (its
    times are already the slowest rank's)."""
    out = {}
    for key, times in result["times"].items():
        layout, dname = key.split("/")
        nbytes = sum(result["sizes"][layout]) * torch.finfo(DTYPES[dname]).bits // 8
        bws = [bandwidths(nbytes, t, world) for t in times]
        out[key] = {"seconds": times, "bytes": nbytes, "algbw_gbps": [b[0] for b in bws],
                    "busbw_gbps": [b[1] for b in bws], "buckets": len(result["sizes"][layout])}
    nbytes = result["sizes"]["segmentor_flat"][0] * 4
    out["bare/fp32"] = {"seconds": result["bare_times"], "bytes": nbytes,
                        "busbw_gbps": [bandwidths(nbytes, t, world)[1] for t in result["bare_times"]]}
    return out


def allreduce_sweep(world_sizes, preset: str = "thesis", samples: int = 4, warmup: int = 1,
                    progress=print):
    """Sweep keyed by world size: :func:`summarize_rank0` of one launch each."""
    from swinkit.launch import launch
    from swinkit.runs.sweep import Sweep, sweep_launch

    # 4 samples after 1 warm-up per (layout, dtype): each is a ~0.5 GB reduction, ~1 s on 2
    # CPU cores; asv keeps the samples' spread, so a noisier median shows as such
    sweep = Sweep(meta={"samples": samples, "warmup": warmup, "preset": preset})
    for ws in sweep.runnable(world_sizes):
        progress(f"  all-reduce of the thesis gradients, world size {ws}")
        cfg = sweep_launch(ws, wall_timeout_s=1800)

        def one(ws=ws, cfg=cfg):
            run = launch(f"{__name__}:allreduce_rank", {"samples": samples, "warmup": warmup,
                                                        "bare_iters": samples, "preset": preset},
                         cfg, quiet=True)
            return summarize_rank0(run.result["ranks"][0], ws)
        sweep.run(ws, one, progress)
    return sweep
