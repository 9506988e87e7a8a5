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
