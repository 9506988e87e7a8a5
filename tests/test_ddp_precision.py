"""The DDP loop in a training precision: autocast around forward and loss (a backbone linear
computes in bf16), the gradients DDP all-reduces in fp32, fp16's GradScaler through its CPU
seam, the result and table naming the precision, and a bad precision refused before any launch
naming the field. A real two-rank bf16 run checks that its phases still add up; the CUDA
branches of each precision are in tests/test_gpu.py."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from rank_stand_ins import OneRank, switches_as_they_were  # noqa: F401 (autouse)
from swinkit.cli import main
from swinkit.measure.phases import PHASES
from swinkit.model import precision as mp
from swinkit.precision import check_precision
from swinkit.run_spec import RunSpec






def _rank_run(data_root, precision):
    from swinkit.rank.ddp_setup import setup_rank
    spec = RunSpec(preset="test", iters=1, warmup=0, workers=0, data_root=str(data_root),
                   precision=precision)
    return setup_rank(OneRank(), spec)


def _seen_in_one_step(run):
    """One DDP step: the dtype a backbone attention projection (an nn.Linear) outputs in
    forward, the dtype of every gradient tensor DDP's comm hook hands the all-reduce (a
    compression hook would show there), and the parameters' dtypes after the step."""
    from swinkit.measure import ddp_hooks
    from swinkit.rank.ddp import _step
    linear = next(m for name, m in run.model.backbone.named_modules()
                  if isinstance(m, nn.Linear) and name.endswith("attn.proj"))
    forward, buckets = [], []
    hook = linear.register_forward_hook(lambda m, i, out: forward.append(out.dtype))
    all_reduce = ddp_hooks.dist.all_reduce

    def on_the_wire(tensor, *args, **kwargs):  # what the comm hook hands the collective
        buckets.append(tensor.dtype)
        return all_reduce(tensor, *args, **kwargs)
    ddp_hooks.dist.all_reduce = on_the_wire
    try:
        _step(run, 0)
    finally:
        hook.remove()
        ddp_hooks.dist.all_reduce = all_reduce
    return forward, buckets, {p.dtype for p in run.model.parameters()}


@pytest.mark.parametrize("precision, forward_dtype", [("bf16", torch.bfloat16),
                                                      ("fp32", torch.float32)])
def test_the_rank_step_autocasts_forward_and_all_reduces_fp32(data_root, one_rank_group,
                                                              precision, forward_dtype):
    """bf16: the backbone's linears compute in bf16 (fails if forward ran in fp32); the
    buckets DDP all-reduces and the weights stay fp32 in both precisions."""
    run = _rank_run(data_root, precision)
    assert run.amp.plan.precision.name == precision
    forward, buckets, params = _seen_in_one_step(run)
    assert forward and set(forward) == {forward_dtype}
    assert buckets and set(buckets) == {torch.float32}
    assert params == {torch.float32}
    assert torch.isfinite(run.losses[-1])


def _scaled_and_stepped(run, steps=2):
    """``steps`` DDP steps: per step, the norm of the gradient buckets handed to the
    all-reduce, and the norm of the gradients the optimizer (under MMEngine's wrapper) steps
    with."""
    from swinkit.rank.ddp import _step
    bucket_sq, at_step = [0.0], []
    inner, torch_step = run.buckets.launcher, run.optim.optimizer.step

    def launcher(bucket, group, record, clock):
        bucket_sq[-1] += float(bucket.buffer().double().norm()) ** 2
        return inner(bucket, group, record, clock)

    def step(*args, **kwargs):
        grads = [p.grad.double().norm() for g in run.optim.param_groups for p in g["params"]
                 if p.grad is not None]
        at_step.append(float(torch.stack(grads).norm()))
        return torch_step(*args, **kwargs)
    run.buckets.launcher, run.optim.optimizer.step = launcher, step
    for it in range(steps):
        _step(run, it)
        bucket_sq.append(0.0)
    return [q ** 0.5 for q in bucket_sq[:steps]], at_step


def test_fp16s_loss_scaling_steps_the_rank_through_its_cpu_seam(data_root, one_rank_group):
    """fp16's GPU branch on the CPU (autocast and GradScaler exist there; swinkit refuses only
    to measure fp16 on a CPU), against an fp32 rank of the same seed and batch: forward in
    fp16; the buckets DDP all-reduces fp32 and scaled, 2**16 times fp32's (fails if the loss
    is not scaled); the optimizer stepping with gradients unscaled, fp32's within fp16's
    rounding (fails if the step does not unscale); a second step taken (GradScaler refuses a
    step before the last one's update)."""
    fp32 = _rank_run(data_root, "fp32")
    buckets32, stepped32 = _scaled_and_stepped(fp32, steps=1)
    run = _rank_run(data_root, "fp32")
    run.amp = mp.TrainingPrecision(check_precision("fp16", "cuda"), "cpu",
                                   mp.LossScaling("cpu"), {})
    assert run.amp.scaling.scaler.get_scale() == 2.0 ** 16
    forward, buckets, params = _seen_in_one_step(run)
    assert set(forward) == {torch.float16}
    assert set(buckets) == {torch.float32} and params == {torch.float32}
    run = _rank_run(data_root, "fp32")
    run.amp = mp.TrainingPrecision(check_precision("fp16", "cuda"), "cpu",
                                   mp.LossScaling("cpu"), {})
    buckets16, stepped16 = _scaled_and_stepped(run, steps=2)
    assert buckets16[0] / buckets32[0] == pytest.approx(2.0 ** 16, rel=0.1)
    assert stepped16[0] / stepped32[0] == pytest.approx(1.0, rel=0.1)
    assert len(stepped16) == 2 and run.amp.scaling.scaler.get_scale() == 2.0 ** 16


def test_ddp_bf16_at_two_ranks_names_it_and_its_phases_add_up(data_root, tmp_path, capsys,
                                                              no_orphans):
    out = tmp_path / "r.json"
    assert main(["ddp", "--preset", "test", "--world-size", "2", "--iters", "3", "--warmup", "1",
                 "--workers", "0", "--data-root", str(data_root), "--precision", "bf16",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "; precision bf16" in text.splitlines()[0]
    r = json.loads(out.read_text())
    assert r["precision"]["precision"] == "bf16" and r["precision"]["autocast"] == "bfloat16"
    for rank in r["ranks"]:
        assert rank["precision"]["precision"] == "bf16"
        assert len(rank["iteration"]) == len(rank["loop_iteration"]) == 3
        for i, iteration in enumerate(rank["iteration"]):
            # the phases tile the iteration, and the timeline's iteration is the loop clock's
            assert sum(rank["phases"][p][i] for p in PHASES) == pytest.approx(iteration)
            assert iteration == pytest.approx(rank["loop_iteration"][i], abs=0.003, rel=0.02)
        assert rank["phases"]["forward"][0] > 0 and rank["phases"]["backward"][0] > 0


@pytest.mark.parametrize("argv, message", [
    (["--precision", "fp16"], "--precision fp16 is refused on CPU"),
    (["--cfg-options", "precision=amp"], "precision must be one of fp32, tf32, bf16, fp16"),
    (["--cfg-options", "precision=fp16"], "precision fp16 is refused on CPU"),
    # the engine's refusal comes before the device's (tests/test_engine_precision.py: an
    # engine applying no precision refuses cudnn_benchmark too)
    (["--engine", "fsdp2", "--cfg-options", "precision=fp16"],
     "precision 'fp16': engine 'fsdp2' runs fp32, tf32, bf16 only"),
    (["--engine", "deepspeed", "--cfg-options", "precision=fp16"],
     "precision 'fp16': engine 'deepspeed' runs fp32, tf32, bf16 only"),
])
def test_a_bad_or_unapplied_precision_is_refused_before_launch(capsys, tmp_path, argv, message):
    if torch.cuda.is_available() and "fp16 is refused on CPU" in message:
        pytest.skip("fp16 runs on CUDA")
    assert main(["ddp", "--preset", "test", *argv, "--json", str(tmp_path / "r.json")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_an_unknown_precision_option_is_refused_naming_it(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["ddp", "--preset", "test", "--precision", "amp"])
    assert exc.value.code == 2
    assert "--precision: invalid choice: 'amp'" in capsys.readouterr().err


def test_the_table_header_names_the_precision():
    from swinkit.report.ddp_table import ddp_table
    result = {"preset": "test", "world_size": 2, "backend": "gloo", "device": "cpu",
              "iterations": 3, "warmup": 1, "iter_s": 1.0, "skew_s": dict.fromkeys(PHASES, 0.0),
              "phases_s": dict.fromkeys(PHASES, 0.2),
              "precision": {"label": "tf32 (a no-op on CPU: fp32)"}}
    assert "; precision tf32 (a no-op on CPU: fp32)" in ddp_table(result).splitlines()[0]
    del result["precision"]   # a result from before precisions were applied ran fp32
    assert "; precision fp32" in ddp_table(result).splitlines()[0]


# ------------------------------------------------- what-ifs: each remedy reaches the rank

def _remedy_run(data_root, name):
    """setup_rank for the spec a what-if hands its ranks (remedy applied, validated, resolved
    as the supervisor resolves it), in this process."""
    from swinkit.experiments.remedies import CATALOGUE
    from swinkit.experiments.whatif_run import BASELINE, base_spec
    from swinkit.rank.ddp_setup import setup_rank
    remedy = BASELINE if name == "baseline" else CATALOGUE[name]
    spec = remedy.apply(base_spec("test", 1, 1, 0), preset_workers=0)
    cfg, _ = spec.validate()
    crossing = dict(spec.for_ranks(cfg), data_root=str(data_root), workers=0)
    return setup_rank(OneRank(), RunSpec.from_dict(crossing))


def test_each_precision_and_gpu_remedy_reaches_the_rank(data_root, one_rank_group):
    from swinkit.rank.ddp_readout import applied_remedies
    base = _remedy_run(data_root, "baseline")
    assert base.amp.plan.precision.name == "fp32" and not base.amp.switches["cudnn_benchmark"]
    plain = applied_remedies(base)
    assert plain["optimizer_param_groups"] > 10   # MMEngine: one group per parameter
    assert not plain["optimizer_fused"] and not plain["heads_channels_last"]

    assert _remedy_run(data_root, "amp_bf16").amp.dtype == torch.bfloat16
    tf32 = _remedy_run(data_root, "tf32").amp
    assert tf32.plan.precision.name == "tf32" and tf32.dtype is None
    assert tf32.plan.label == "tf32 (a no-op on CPU: fp32)" and tf32.switches["matmul"]
    assert _remedy_run(data_root, "cudnn_benchmark").amp.switches["cudnn_benchmark"]
    fused = applied_remedies(_remedy_run(data_root, "fused_adamw"))
    # the test preset's two kinds of group: with and without weight decay
    assert fused["optimizer_param_groups"] == 2 and fused["optimizer_fused"]
    assert applied_remedies(_remedy_run(data_root, "channels_last"))["heads_channels_last"]


def test_a_cpu_no_op_remedy_says_so_beside_its_score():
    from swinkit.experiments.remedies import CATALOGUE, device_note
    from swinkit.experiments.whatif_run import _note
    assert "tf32 is a no-op on CPU" in device_note(CATALOGUE["tf32"], "cpu")
    assert "cudnn_benchmark is a no-op on CPU" in device_note(CATALOGUE["cudnn_benchmark"], "cpu")
    assert device_note(CATALOGUE["tf32"], "cuda") is None
    assert device_note(CATALOGUE["amp_bf16"], "cpu") is None
    assert "no-op" in _note(CATALOGUE["tf32"], {"device": "cpu", "precision": {"note": "x"}})
    slow = {"device": "cpu", "precision": {"note": "bf16 on this CPU is slow"}}
    assert _note(CATALOGUE["amp_bf16"], slow) == "bf16 on this CPU is slow"
    assert _note(CATALOGUE["tf32"], {"device": "cuda:0"}) is None


def test_the_what_if_table_prints_a_rows_note():
    from swinkit.report.text import _what_if
    row = {"name": "tf32", "world_size": 2, "predicted_iter_s": 0.5, "measured_iter_s": 0.5,
           "prediction_error": 0.0, "efficiency_before": 0.9, "efficiency_after": 0.9,
           "holds": None, "noise_floor_s": 0.01, "note": "tf32 is a no-op on CPU (...)"}
    lines = _what_if({"what_if": [row, dict(row, name="amp_bf16", note=None)]})
    assert "  note: tf32 at N=2: tf32 is a no-op on CPU (...)" in lines
    assert not any("amp_bf16 at N=2" in line for line in lines)


def test_the_lost_time_split_in_two_precisions_side_by_side():
    """Baseline fp32: forward +0.05 s, exposed_comm +0.15 s from N=1 to 2 (shares 25 %, 75 %);
    bf16: +0.02 and +0.18 s (10 %, 90 %). The loader must supply 2 images per iteration:
    2 / 0.70 s = 2.9 images/s in fp32, 2 / 0.45 s = 4.4 in bf16. A non-precision what-if and
    world size 1 get no entry."""
    from swinkit.attribution.precision_shift import precision_shift
    from swinkit.experiments.remedies import CATALOGUE
    from swinkit.experiments.whatif_run import BASELINE
    from swinkit.report.precision_lines import shift_lines

    def run(forward, comm, label):
        return {"phases_s": {"forward": forward, "exposed_comm": comm, "other": 0.1},
                "per_batch_s": forward + comm + 0.1, "images_per_rank": 2,
                "precision": {"label": label}}
    measured = {("baseline", 1): run(0.40, 0.0, "fp32"), ("baseline", 2): run(0.45, 0.15, "fp32"),
                ("amp_bf16", 1): run(0.15, 0.0, "bf16"), ("amp_bf16", 2): run(0.17, 0.18, "bf16"),
                ("bucket_1mb", 1): run(0.4, 0.0, "fp32"), ("bucket_1mb", 2): run(0.4, 0.1, "fp32")}
    plans = [BASELINE, CATALOGUE["amp_bf16"], CATALOGUE["bucket_1mb"]]
    [shift] = precision_shift(plans, [1, 2], measured)
    assert (shift["name"], shift["world_size"], shift["precision"]) == ("amp_bf16", 2, "bf16")
    assert shift["baseline"]["share"]["exposed_comm"] == pytest.approx(0.75)
    assert shift["remedy"]["share"]["exposed_comm"] == pytest.approx(0.90)
    assert shift["remedy"]["lost_s"]["forward"] == pytest.approx(0.02)
    demand = shift["loader_demand_images_per_s"]
    assert demand["baseline"] == pytest.approx(2 / 0.70) and demand["remedy"] == pytest.approx(2 / 0.45)
    text = "\n".join(shift_lines([shift]))
    assert "fp32 vs bf16 (amp_bf16)" in text
    assert "  exposed_comm      +0.1500 (+75%)            +0.1800 (+90%)" in text.splitlines()
    assert "  total                    +0.2000                   +0.2000" in text.splitlines()
    assert "loader demand per rank: 2.9 images/s in fp32, 4.4 in bf16" in text
    # the report's page holds the same table
    from swinkit.report.html_advice import what_if
    row = {"name": "amp_bf16", "world_size": 2, "predicted_iter_s": 0.4, "measured_iter_s": 0.45,
           "prediction_error": -0.11}
    page = what_if({"what_if": [row], "what_if_precision_shift": [shift]})
    assert "fp32 beside bf16 (amp_bf16)" in page and '<th scope="col">bf16</th>' in page
    assert "+0.1500 (+75%)" in page and "+0.1800 (+90%)" in page
    assert "2.9 images/s in fp32, 4.4 in bf16" in page


def test_a_paired_runs_local_steps_carry_its_precision():
    """The components a paired launch measures beside its DDP steps ran in the run's precision;
    the local run the oracle predicts from says so (it was None)."""
    from swinkit.runs.paired_parts import local_run
    out = {"world_size": 2, "bucket_sizes_bytes": [4], "loader_workers": 0,
           "images_per_rank": 2, "precision": {"name": "bf16"}}
    ranks = [{"rank": 0, "local": {"iteration": [0.1, 0.2]}}]
    assert local_run(out, ranks, 1)["precision"] == {"name": "bf16"}


def test_tf32_on_a_cpu_is_labelled_before_any_launch(capsys, tmp_path):
    """tf32 on gloo ranks (CPU) is fp32 math: said before the run starts (here the run is then
    refused for another field, so nothing launches), not only in the result."""
    if torch.cuda.is_available():
        pytest.skip("tf32 is real on a GPU")
    assert main(["ddp", "--preset", "test", "--precision", "tf32", "--iters", "0",
                 "--json", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert "tf32 is a no-op on CPU" in err and "iters must be" in err
