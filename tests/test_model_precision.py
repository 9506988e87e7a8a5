"""A precision applied inside a training process: the TF32 and cuDNN switches (both of torch's
APIs), autocast in the precision's dtype, fp16's loss scaling and its null twin; each GPU
branch driven here through its CPU seam, and for real under ``pytest -m gpu``."""
from __future__ import annotations

import types

import pytest
import torch

from rank_stand_ins import switches_as_they_were  # noqa: F401 (autouse)
from swinkit.model import precision as mp
from swinkit.precision import check_precision




def _legacy_backends(matmul=False, conv=True, benchmark=False):
    """torch.backends as torch 2.5-2.8 has it: ``allow_tf32`` flags, no ``fp32_precision``."""
    return types.SimpleNamespace(
        cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=matmul)),
        cudnn=types.SimpleNamespace(allow_tf32=conv, benchmark=benchmark))


def test_legacy_flags_are_switched_and_read_where_torch_has_no_fp32_precision():
    """The torch < 2.9 branch: the legacy flags are the only API there."""
    b = _legacy_backends()
    assert not mp.new_tf32_api(b)
    assert mp.tf32_flags(b) == {"matmul": False, "cudnn_conv": True}   # torch's defaults
    before = mp.set_math_switches(True, cudnn_benchmark=True, backends=b)
    assert mp.tf32_flags(b) == {"matmul": True, "cudnn_conv": True} and b.cudnn.benchmark
    with mp.math_switches(False, backends=b):
        assert mp.tf32_flags(b) == {"matmul": False, "cudnn_conv": False}
        assert not b.cudnn.benchmark
    assert mp.tf32_flags(b) == {"matmul": True, "cudnn_conv": True} and b.cudnn.benchmark
    mp._set_switch_state(b, before)
    assert mp.tf32_flags(b) == {"matmul": False, "cudnn_conv": True}


def test_the_new_api_is_used_alone_where_torch_has_it():
    """torch >= 2.9: fp32_precision is set, and the legacy flag is never touched (torch
    refuses to read a flag the two APIs set differently)."""
    if not mp.new_tf32_api():
        pytest.skip(f"torch {torch.__version__} has no fp32_precision")
    mp.set_math_switches(True)
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    assert torch.backends.cudnn.conv.fp32_precision == "tf32"
    assert mp.tf32_flags() == {"matmul": True, "cudnn_conv": True}
    mp.set_math_switches(False)
    assert mp.tf32_flags() == {"matmul": False, "cudnn_conv": False}
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"


@pytest.mark.parametrize("precisions, on", [
    (("tf32", "none"), True), (("none", "tf32"), True), (("ieee", "tf32"), False),
    (("none", "none"), False),
])
def test_tf32_the_most_specific_setting_decides(precisions, on):
    assert mp._tf32(*precisions) is on


@pytest.mark.parametrize("name, dtype, tf32", [
    ("fp32", torch.float32, False), ("tf32", torch.float32, True), ("bf16", torch.bfloat16, True),
])
def test_training_precision_on_cpu(name, dtype, tf32):
    """The matmul inside autocast computes in the precision's dtype; outside it, fp32."""
    amp = mp.training_precision(name, torch.device("cpu"), bf16_native=True)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with amp.autocast():
        assert (a @ b).dtype == dtype
    assert (a @ b).dtype == torch.float32
    assert isinstance(amp.scaling, mp.NoLossScaling)
    assert amp.switches["matmul"] is tf32 and mp.tf32_flags()["matmul"] is tf32
    assert amp.to_dict()["precision"] == name


def test_fp16_is_refused_on_cpu_before_the_switches_are_touched():
    before = mp._switch_state(torch.backends)
    with pytest.raises(ValueError, match="precision fp16 is refused on CPU"):
        mp.training_precision("fp16", torch.device("cpu"))
    assert mp._switch_state(torch.backends) == before


def test_cudnn_benchmark_is_switched_with_the_precision():
    amp = mp.training_precision("fp32", torch.device("cpu"), cudnn_benchmark=True)
    assert torch.backends.cudnn.benchmark and amp.switches["cudnn_benchmark"]


def _fp16_on_cpu() -> mp.TrainingPrecision:
    """fp16's GPU branch on the CPU: the plan as a GPU gets it, autocast and GradScaler on
    the CPU (both exist there; swinkit only refuses to *measure* fp16 on a CPU)."""
    return mp.TrainingPrecision(check_precision("fp16", "cuda"), "cpu", mp.LossScaling("cpu"),
                                {})


def test_fp16_autocasts_to_float16_through_its_cpu_seam():
    amp = _fp16_on_cpu()
    with amp.autocast():
        assert (torch.randn(4, 4) @ torch.randn(4, 4)).dtype == torch.float16


def _one_step(scaling, optimizer_of, x, loss_of=lambda w, x: (w * x).sum()):
    w = torch.nn.Parameter(torch.ones(3))
    optimizer = optimizer_of([w])
    scaling.backward(loss_of(w, x))
    grad = w.grad.clone()
    scaling.step(optimizer)
    scaling.update()
    return w.detach(), grad


@pytest.mark.parametrize("wrapped", [False, True], ids=["torch", "mmengine_wrapper"])
def test_loss_scaling_scales_the_gradient_and_steps_with_it_unscaled(wrapped):
    """By hand: loss = sum(w * x) has gradient x; GradScaler's first scale is 2**16, so the
    gradient after backward is 65536 x; SGD at lr 0.1 then moves w by -0.1 x, unscaled.
    A step without unscaling (the null twin given the scaled loss) would move it by
    -6553.6 x: checked by planting ``optimizer.step()`` for ``scaler.step(optimizer)``."""
    from mmengine.optim import OptimWrapper

    def sgd(params):
        opt = torch.optim.SGD(params, lr=0.1)
        return OptimWrapper(opt) if wrapped else opt
    x = torch.tensor([1.0, -2.0, 0.5])
    w, grad = _one_step(mp.LossScaling("cpu"), sgd, x)
    assert torch.allclose(grad, 65536 * x)
    assert torch.allclose(w, 1 - 0.1 * x)
    w, grad = _one_step(mp.NoLossScaling(), sgd, x)   # its twin: the same step, unscaled
    assert torch.allclose(grad, x) and torch.allclose(w, 1 - 0.1 * x)


def test_loss_scaling_skips_a_step_with_inf_gradients_and_halves_the_scale():
    scaling = mp.LossScaling("cpu")
    x = torch.tensor([1.0, float("inf"), 0.5])
    w, _ = _one_step(scaling, lambda p: torch.optim.SGD(p, lr=0.1), x)
    assert torch.equal(w, torch.ones(3))                        # the step was skipped
    assert scaling.scaler.get_scale() == 2.0 ** 15


def test_the_null_twin_has_the_loss_scalings_interface():
    public = lambda cls: {n for n in vars(cls) if not n.startswith("_")}  # noqa: E731
    assert public(mp.NoLossScaling) == public(mp.LossScaling) == {"scaled", "backward", "step",
                                                                  "update"}


def test_the_gpu_plans_through_the_capability_seam(recwarn):
    """A CUDA device named, its capability given: nothing here touches a GPU (the switches
    are flags; a GradScaler without CUDA disables itself with a warning)."""
    old = mp.training_precision("tf32", torch.device("cuda"), capability=(7, 0))
    assert old.plan.measured == "fp32" and old.plan.label == "tf32 (a no-op on this GPU: fp32)"
    new = mp.training_precision("tf32", torch.device("cuda"), capability=(9, 0))
    assert new.plan.measured == "tf32" and new.switches["matmul"] is True
    fp16 = mp.training_precision("fp16", torch.device("cuda"), capability=(9, 0))
    assert isinstance(fp16.scaling, mp.LossScaling) and fp16.dtype == torch.float16
    assert fp16.switches["matmul"] is False


# ---- on a real GPU (pytest -m gpu) ----

def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch.device("cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("name, dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16),
                                         ("fp32", torch.float32), ("tf32", torch.float32)])
def test_gpu_autocast_dtype_and_switches(name, dtype):
    device = _cuda()
    amp = mp.training_precision(name, device)
    with amp.autocast():
        out = torch.nn.Linear(8, 8).to(device)(torch.randn(4, 8, device=device))
        conv = torch.nn.Conv2d(3, 4, 3).to(device)(torch.randn(1, 3, 8, 8, device=device))
    assert out.dtype == dtype and conv.dtype == dtype
    tf32 = name in ("tf32", "bf16")
    assert mp.tf32_flags() == {"matmul": tf32, "cudnn_conv": tf32}
    assert isinstance(amp.scaling, mp.LossScaling) is (name == "fp16")


@pytest.mark.gpu
def test_gpu_grad_scaler_steps_in_fp16():
    """The same hand-worked step as on CPU, on the GPU: 2**16 x the gradient after backward,
    the unscaled step after it; an inf gradient skips the step and halves the scale."""
    device = _cuda()
    amp = mp.training_precision("fp16", device)
    x = torch.tensor([1.0, -2.0, 0.5], device=device)
    w = torch.nn.Parameter(torch.ones(3, device=device))
    sgd = torch.optim.SGD([w], lr=0.1)
    with amp.autocast():
        loss = (w * x).sum()
    amp.scaling.backward(loss)
    assert torch.allclose(w.grad, 65536 * x)
    amp.scaling.step(sgd)
    amp.scaling.update()
    assert torch.allclose(w.detach(), 1 - 0.1 * x)
    sgd.zero_grad()
    amp.scaling.backward((w * torch.full_like(x, float("inf"))).sum())
    before = w.detach().clone()
    amp.scaling.step(sgd)
    amp.scaling.update()
    assert torch.equal(w.detach(), before) and amp.scaling.scaler.get_scale() == 2.0 ** 15


@pytest.mark.gpu
def test_gpu_cudnn_benchmark_is_on_while_a_convolution_runs():
    device = _cuda()
    mp.training_precision("bf16", device, cudnn_benchmark=True)
    assert torch.backends.cudnn.benchmark
    torch.nn.Conv2d(3, 4, 3).to(device)(torch.randn(2, 3, 16, 16, device=device)).sum().backward()


def _forward_in_a_thread(module, x, outer=None):
    """``module(x)``'s dtype when run in a new thread (as DataParallel runs each replica),
    with ``outer`` (an autocast context) entered in the calling thread around it."""
    import contextlib
    import threading
    seen = {}
    with outer or contextlib.nullcontext():
        thread = threading.Thread(target=lambda: seen.setdefault("dtype", module(x).dtype))
        thread.start()
        thread.join()
    return seen["dtype"]


class _LikeParallelApply(torch.nn.Module):
    """What torch's DataParallel does in each replica's thread (parallel_apply, torch 2.13):
    autocast entered as enabled, without the caller's dtype."""

    def __init__(self, module, enabled: bool):
        super().__init__()
        self.module, self.enabled = module, enabled

    def forward(self, x):
        with torch.amp.autocast("cpu", enabled=self.enabled):
            return self.module(x)


def test_autocast_reaches_a_replicas_thread_in_its_dtype_only_when_the_module_enters_it():
    """Autocast is per thread, its dtype too: under a caller's fp16 autocast (fp16's CPU
    seam) a replica's thread as DataParallel runs it computes in the device's default
    autocast dtype (bf16 on CPU; fp16 on CUDA, where a bf16 run is the one hit). Wrapped in
    AutocastForward, each replica enters the precision's own dtype."""
    amp = _fp16_on_cpu()
    linear, x = torch.nn.Linear(4, 4), torch.randn(2, 4)
    assert _forward_in_a_thread(linear, x, outer=amp.autocast()) == torch.float32
    replica = _LikeParallelApply(linear, enabled=True)
    assert _forward_in_a_thread(replica, x, outer=amp.autocast()) == torch.bfloat16
    wrapped = _LikeParallelApply(mp.AutocastForward(linear, amp), enabled=True)
    assert _forward_in_a_thread(wrapped, x, outer=amp.autocast()) == torch.float16
    fp32 = mp.training_precision("fp32", torch.device("cpu"))
    assert _forward_in_a_thread(mp.AutocastForward(linear, fp32), x) == torch.float32


@pytest.mark.gpu(n=2)
def test_gpu_data_parallel_replicas_compute_in_bf16_when_wrapped():
    """Under DataParallel over 2 GPUs, a caller's bf16 autocast reaches the replicas as fp16
    (torch re-enters autocast there without its dtype); wrapped, they compute in bf16."""
    device = _cuda()
    amp = mp.training_precision("bf16", device)
    seen = []
    linear = torch.nn.Linear(8, 8).to(device)
    linear.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    x = torch.randn(4, 8, device=device)
    with amp.autocast():
        torch.nn.DataParallel(linear)(x)
    naive, seen[:] = list(seen), []
    torch.nn.DataParallel(mp.AutocastForward(linear, amp))(x)
    assert set(seen) == {torch.bfloat16}
    assert naive and set(naive) != {torch.bfloat16}   # what the wrapper is for
