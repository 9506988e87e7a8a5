"""The timings a prediction takes at N' without the model, on the device the run used.

The GPU branch (NCCL ranks timing their buckets on their own GPU) is driven here through its
decisions; tests/test_gpu.py::test_a_world_size_is_predicted_from_timings_on_the_gpus runs it
on a GPU for real. Before, every timing launch ran on CPU tensors whatever the backend: on a GPU
node (auto backend: NCCL) its first collective failed.
"""
from __future__ import annotations

import pytest
import torch

from swinkit.predict.supervisor import internode, target_timing
from swinkit.predict.rank.contention_probe import STAND_IN_SIDE, backward_stand_in
from swinkit.rank.devices import rank_device


def test_the_device_follows_the_backend_as_the_run_at_1s_did():
    assert rank_device("nccl", 3) == torch.device("cuda", 3)  # local rank 3: its own GPU
    assert rank_device("gloo", 3) == torch.device("cpu")  # gloo ranks train on CPU


def test_backwards_stand_in_on_a_gpu_waits_for_its_own_stream_only(monkeypatch):
    """GPU kernels are queued: a chunk timed without waiting for the device would time the
    launches; waiting for the whole device (torch.cuda.synchronize) would also wait for the
    load thread's all-reduces beside it. The matrix is the GPU's size, on the rank's device."""
    made, waited = [], []

    def randn(*shape, device):
        made.append((shape, device))
        return "matrix"

    class Stream:
        def __init__(self, device):
            self.device = device

        def synchronize(self):
            waited.append(self.device)

    monkeypatch.setattr(torch.cuda, "current_stream", Stream)
    monkeypatch.setattr(torch.cuda, "synchronize",
                        lambda *a: pytest.fail("waited for every stream of the device"))
    gpu = torch.device("cuda", 1)
    a, wait = backward_stand_in(gpu, randn=randn)
    wait()
    assert a == "matrix" and made == [((2048, 2048), gpu)] and waited == [gpu]
    cpu = torch.device("cpu")
    a, wait = backward_stand_in(cpu)
    wait()
    assert tuple(a.shape) == (STAND_IN_SIDE["cpu"],) * 2 and a.device == cpu
    assert waited == [gpu]  # nothing queued on CPU: no wait


def _basis(backend=None):
    probe = {"elements": [[10], [20]], "dtype": "float32", "buffer_shapes": []}
    if backend:
        probe["backend"] = backend
    phases = {"data_wait": 0.01, "forward": 0.02, "backward": 0.03, "optimizer": 0.01}
    costs = {"grad_accum": 1, "buffer_sync": True,
             "ranks": [{"positions": [{"phases_s": phases, "bucket_ready_s": []}]}]}
    return {"probe": probe, "host": {"loader_workers": 0}, "costs": costs}


def test_timings_at_n_go_over_the_backend_the_basis_ran_on(monkeypatch):
    launched = []

    class Done:
        result = {"ranks": [{"rank": 0, "images_per_s": 5.0, "bucket_comm_s": [1e-3, 2e-3],
                             "broadcast_s": 0.0, "sync_wait_s": 0.0, "compute_slowdown": 1.0,
                             "contention": {}}]}

    def launch(entry, kwargs, lc, quiet):
        launched.append(lc.backend)
        # the model's rhythm goes with them: forward + backward, then the rest and loading
        assert kwargs["segments_s"] == pytest.approx([0.05, 0.02])
        return Done()

    monkeypatch.setattr(target_timing, "launch", launch)
    target = target_timing.measure_target("test", 2, _basis("nccl"), progress=lambda s: None)
    assert target.bucket_comm_s == [1e-3, 2e-3]
    target_timing.measure_target("test", 2, _basis("gloo"), progress=lambda s: None)
    target_timing.measure_target("test", 2, _basis(), progress=lambda s: None)  # kept before
    assert launched == ["nccl", "gloo", "auto"]


def test_a_slower_link_known_at_n_is_timed_with_its_bytes(monkeypatch):
    """``--inject comm_scale=4`` makes every bucket's all-reduce move 4 times its bytes in
    the run at N': the timings at N' move them too (buckets of 10 and 20 elements: 40 and
    80), and say so; without it, the buckets as they are."""
    sent = []

    class Done:
        result = {"ranks": [{"rank": 0, "images_per_s": 5.0, "bucket_comm_s": [1e-3, 2e-3],
                             "broadcast_s": 0.0, "compute_slowdown": 1.0, "contention": {}}]}

    def launch(entry, kwargs, lc, quiet):
        sent.append(kwargs["elements"])
        return Done()

    monkeypatch.setattr(target_timing, "launch", launch)
    slow = target_timing.measure_target("test", 2, _basis(), progress=lambda s: None,
                                      comm_scale=4)
    target_timing.measure_target("test", 2, _basis(), progress=lambda s: None)
    assert sent == [[[40], [80]], [[10], [20]]]
    assert any("4 times slower" in note for note in slow.notes)


def test_the_simulated_nodes_talk_gloo_on_a_gpu_machine_too(monkeypatch):
    """Two "nodes" of one rank on one host would both take GPU 0 under NCCL, which NCCL
    refuses; what they time is the loopback link's plumbing, which gloo carries anywhere."""
    backends = []

    class Done:
        result = {"ranks": [{"rank": 0, "bucket_comm_s": [1e-3, 2e-3]}]}

    def launch(entry, kwargs, cfg, run_dir, quiet):
        backends.append(cfg.backend)
        return Done()

    monkeypatch.setattr(internode, "launch", launch)
    assert internode.time_across_nodes([4000, 8000], progress=lambda s: None) == [1e-3, 2e-3]
    assert backends == ["gloo", "gloo"]


def test_the_models_rhythm_splits_a_step_at_its_meetings():
    """Two micro-batches a step (each: data 5, forward 20, backward 30 ms; the second also
    exposed comm 1, optimizer 4, the rest 1 ms): a step of 116 ms. The ranks meet at the
    next forward's buffer broadcast, after the last micro-batch's exposed comm, optimizer and
    rest and the next batch's loading (1 + 4 + 1 + 5 = 11 ms), and at the last bucket, after
    the other 105 ms; without a buffer sync, once a step: 116 ms."""
    from swinkit.predict.numbers.rank_profiles import meeting_segments

    first = {"data_wait": 0.005, "forward": 0.02, "backward": 0.03}
    last = {**first, "exposed_comm": 0.001, "optimizer": 0.004, "other": 0.001}
    costs = {"grad_accum": 2, "buffer_sync": True,
             "ranks": [{"positions": [{"phases_s": first, "bucket_ready_s": []},
                                      {"phases_s": last, "bucket_ready_s": []}]}]}
    assert meeting_segments(costs) == pytest.approx([0.105, 0.011])
    assert meeting_segments({**costs, "buffer_sync": False}) == pytest.approx([0.116])


def test_the_rhythm_is_not_timed_on_gpus_or_alone():
    """On a GPU the model's segments are device time and the stand-in is host work: no
    reading (the lockstep's stands); at one rank nobody waits. Neither touches a collective."""
    from swinkit.predict.rank.probes import rhythm_wait

    assert rhythm_wait(2, torch.device("cuda", 0), [0.06, 0.017]) is None
    assert rhythm_wait(1, torch.device("cpu"), [0.06, 0.017]) is None
