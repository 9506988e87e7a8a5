"""The bucket layout the all-reduce benchmark reduces is DDP's own.

``swinkit.components.allreduce`` reads the sizes of DDP's rebuilt buckets from DDP's logging
data (a string of byte counts). Here DDP itself says what is in each bucket: a comm hook sees
every bucket's parameters in the order DDP reduces them, and the sizes are counted from those
tensors, not from the logging data.
"""
import pytest
import torch


def _bucket_contents(model, iters=3):
    """Per bucket, elements of its parameters, as DDP hands them to a comm hook in the last of
    ``iters`` iterations (after DDP's rebuild by gradient-ready order)."""
    from torch.nn.parallel import DistributedDataParallel

    from swinkit.components.allreduce import tiny_batch
    ddp = DistributedDataParallel(model)
    seen = {}

    def hook(_, bucket):
        seen[bucket.index()] = sum(p.numel() for p in bucket.parameters())
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut
    ddp.register_comm_hook(None, hook)
    inputs, samples = tiny_batch(torch.device("cpu"))
    for _ in range(iters):
        seen.clear()
        model.parse_losses(ddp(inputs, samples, mode="loss"))[0].backward()
    return [seen[i] for i in sorted(seen)]


@pytest.mark.slow
def test_preset_bucket_layout_is_ddps_own(one_rank_group):
    from swinkit.config import load_config
    from swinkit.model.segmentor import build_segmentor
    from swinkit.components.allreduce import _model_layouts

    cpu = torch.device("cpu")
    layouts = _model_layouts(cpu, "test")  # what gradient_layouts gives as preset_buckets
    model = build_segmentor(load_config("test", device="cpu"))
    expected = _bucket_contents(model)
    assert layouts["ddp_buckets"] == expected
    assert len(expected) > 1  # a layout, not one flat tensor: the order and cuts are checked
    total = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert sum(expected) == total == layouts["segmentor_flat"][0]


def _iteration(buckets: dict, backward_end: float) -> dict:
    """A resolved iteration: ``buckets`` {name: (ready, done)}, the backward ending at
    ``backward_end`` (and, under accumulation, once before it with no bucket)."""
    return {"marks": [["start", 0.0], ["forward", 1.0], ["backward", backward_end],
                      ["exposed_comm", backward_end + 1.0]],
            "collectives": [{"name": n, "ready": r, "done": d} for n, (r, d) in buckets.items()]
            + [{"name": "broadcast", "arrive": 0.5, "done": 0.6}]}


def test_bucket_spans_run_from_the_last_ranks_ready_to_the_last_done():
    """Worked by hand. Rank 1 has bucket0 ready 3 s after rank 0, so the all-reduce could not
    start before 13; it ended for the last rank at 20: 7 s, 3 of them (13 to 16, rank 1's
    backward end) beside backward. bucket1, ready at 16, waits for bucket0 (the group runs
    them in turn) and runs 20-22: 2 s, none beside. The warm-up iteration (spans of 100 s),
    a micro-batch without buckets and a bucket that only one rank launched are not read. Of
    three measured iterations (bucket0 7, 9 and 20 s) the median is 9 (the mean would be 12)."""
    from swinkit.measure.bucket_spans import bucket_spans
    warm = _iteration({"bucket0": (0.0, 100.0)}, 50.0)
    rank0 = [warm, _iteration({"bucket0": (10.0, 19.0), "bucket1": (15.0, 21.0)}, 15.0),
             _iteration({}, 8.0),
             _iteration({"bucket0": (10.0, 21.0), "bucket1": (15.0, 23.0),
                         "bucket2": (15.0, 25.0)}, 15.0),
             _iteration({"bucket0": (10.0, 30.0), "bucket1": (15.0, 32.0)}, 15.0)]
    rank1 = [warm, _iteration({"bucket0": (13.0, 20.0), "bucket1": (16.0, 22.0)}, 16.0),
             _iteration({}, 8.0),
             _iteration({"bucket0": (12.0, 20.0), "bucket1": (16.0, 23.0)}, 16.0),
             _iteration({"bucket0": (12.0, 32.0), "bucket1": (16.0, 34.0)}, 16.0)]
    spans = bucket_spans({0: rank0, 1: rank1}, warmup=1)
    assert list(spans) == ["bucket0", "bucket1"]
    # bucket0: 20 - 13 = 7 (3 beside), 21 - 12 = 9 (4 beside), 32 - 12 = 20 (4 beside)
    assert spans["bucket0"] == {"span_s": 9.0, "beside_backward_s": 4.0, "iterations": 3}
    # bucket1: from bucket0's end: 22 - 20 = 2, 23 - 21 = 2, 34 - 32 = 2; none beside
    assert spans["bucket1"] == {"span_s": 2.0, "beside_backward_s": 0.0, "iterations": 3}
    assert bucket_spans({}, warmup=0) == {}


def test_bucket_spans_sort_by_index_not_by_name():
    from swinkit.measure.bucket_spans import bucket_spans
    names = [f"bucket{j}" for j in (10, 2, 9)]
    one = [_iteration({n: (1.0, 2.0) for n in names}, 3.0)]
    assert list(bucket_spans({0: one, 1: one}, warmup=0)) == ["bucket2", "bucket9", "bucket10"]
