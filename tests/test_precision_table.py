"""The precision measurement table (tools/gpu_check.py --parts precision): its markdown from a
hand-worked table, the gpu_check rows that judge whether each variant ran as asked (a planted
variant that did not fails), and the real variants on CPU."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import tool_module

from swinkit.report.precision_table import markdown

ROOT = Path(__file__).resolve().parents[1]


def _variant(precision, channels_last, ms, math, achieved=1e12, mfu=0.5, memory=None):
    """A measured variant whose median is ``ms`` (its mean is higher: one slow sample)."""
    return {"precision": precision, "channels_last_heads": channels_last, "label": precision,
            "seconds": [ms / 2e3, ms / 1e3, 3 * ms / 1e3], "achieved_flops": achieved, "mfu": mfu,
            "matmul_peak_math": math, "matmul_peak_flops": 2e12, "peak_memory_mib": memory,
            "heads_are_channels_last": channels_last, "note": None,
            "tf32_after": {"matmul": precision != "fp32", "cudnn_conv": precision != "fp32"}}


def _phases(data, fwd, bwd, comm, opt, other):
    return {"data_wait": data, "forward": fwd, "backward": bwd, "exposed_comm": comm,
            "optimizer": opt, "other": other}


def _ddp(iter_s, medians, iter_mean_s, means, label):
    return {"iter_s": iter_s, "phases_s": medians, "iter_mean_s": iter_mean_s,
            "phases_mean_s": means, "precision": {"label": label}, "images_per_rank": 8,
            "remedies": {"heads_channels_last": False, "optimizer_param_groups": 300}}


@pytest.fixture
def table():
    """Worked by hand: fp32 NCHW 300 ms is the speed-ups' base (300/250 = 1.20x for its
    channels_last, 300/100 = 3.00x for bf16); the merged fused step 20/4 = 5.00x over the
    per-parameter one. The share outside forward and backward is of the means, which add up:
    fp32's 0.06+0.05+0.04+0.01 = 0.16 of a 0.5 s mean (32 %; its medians would give 30 %),
    bf16's 0.15 of 0.3 s (50 %)."""
    variants = {"device_name": "NVIDIA H200", "torch": "2.13.0", "preset": "thesis",
                "batch": 8, "samples": 3, "skipped": {},
                "forward_backward": [_variant("fp32", True, 250.0, "fp32"),
                                     _variant("fp32", False, 300.0, "fp32", memory=20480.0),
                                     _variant("bf16", False, 100.0, "bf16")],
                "optimizer": {"per_parameter": {"groups": 300, "kernel": "torch's default",
                                                "kernel_ran": "foreach", "seconds": [0.020]},
                              "merged_fused": {"groups": 2, "kernel": "fused",
                                               "kernel_ran": "fused", "seconds": [0.004]}}}
    fp32 = _phases(0.05, 0.15, 0.20, 0.05, 0.04, 0.01)
    bf16 = _phases(0.05, 0.05, 0.10, 0.05, 0.04, 0.01)
    ddp = {"fp32": _ddp(0.5, fp32, 0.5, dict(fp32, data_wait=0.06, backward=0.19), "fp32"),
           "bf16": _ddp(0.3, bf16, 0.3, bf16, "bf16"),
           "tf32": {"skipped": "not measured here: a V100 has no TF32"}}
    return {"variants": variants, "ddp": ddp}


def test_the_markdown_table_has_the_hand_worked_speed_ups_and_shares(table):
    text = markdown(table)
    assert ("| fp32 | NCHW | 300.0 | 1.00x | 1.0 TFLOP/s | 50.0 % | fp32 (2.0 TFLOP/s) | "
            "20,480 MiB |") in text
    assert "| fp32 | channels_last | 250.0 | 1.20x |" in text
    assert "| bf16 | NCHW | 100.0 | 3.00x |" in text and "| bf16 (2.0 TFLOP/s) | - |" in text
    assert "| merged fused | 2 | fused | 4.00 | 5.00x |" in text
    assert "| per parameter | 300 | foreach | 20.00 | 1.00x |" in text   # the kernel torch ran
    assert "| fp32 | 500.0 | 50.0 | 150.0 | 200.0 | 50.0 | 40.0 | 10.0 | 32 % |" in text
    assert "| bf16 | 300.0 | 50.0 | 50.0 | 100.0 | 50.0 | 40.0 | 10.0 | 50 % |" in text
    assert "- tf32: not measured here: a V100 has no TF32" in text
    assert text.startswith("Measured on NVIDIA H200 (torch 2.13.0), preset thesis, 8 images")
    assert "DDP iteration at the preset's 8 images, heads NCHW, 300 optimizer groups" in text


def test_without_an_fp32_baseline_no_speed_up_is_made_up(table):
    table["variants"]["forward_backward"] = [
        v for v in table["variants"]["forward_backward"] if v["precision"] == "bf16"]
    del table["variants"]["optimizer"]["per_parameter"]
    text = markdown(table)
    assert "| bf16 | NCHW | 100.0 | - |" in text and "| fused | 4.00 | - |" in text


@pytest.fixture(scope="module")
def gpu_check():
    return tool_module("gpu_check")


def _rows(gpu_check, table, monkeypatch, tmp_path):
    import swinkit.experiments.precision_table as experiment
    monkeypatch.setattr(experiment, "precision_table", lambda *a, **k: table)
    return {r["check"]: r for r in gpu_check.run_precision_table("thesis", 8, 10, tmp_path)[0]}


def test_a_variant_that_did_not_run_as_asked_fails_its_row(gpu_check, table, monkeypatch,
                                                            tmp_path):
    fb = table["variants"]["forward_backward"]
    rows = _rows(gpu_check, table, monkeypatch, tmp_path)
    assert [r["pass"] for r in list(rows.values())[:3]] == [True, True, True]
    assert rows["AdamW step, merged fused"]["pass"] is True
    assert rows["AdamW step, per parameter"]["pass"] is None   # torch's default: a figure
    assert rows["DDP iteration at 1 rank, tf32"]["figure"].startswith("skipped: ")
    assert "| bf16 | NCHW | 100.0 | 3.00x |" in (tmp_path / "precision_table.md").read_text()

    fb[1]["tf32_after"]["matmul"] = True                   # fp32 timed with TF32 on
    fb[0]["heads_are_channels_last"] = False               # the knob did not reach the heads
    fb[2]["matmul_peak_math"] = "fp32"                     # bf16 held to the fp32 peak
    table["variants"]["optimizer"]["merged_fused"]["kernel_ran"] = "per tensor"
    rows = _rows(gpu_check, table, monkeypatch, tmp_path)
    assert [r["pass"] for r in list(rows.values())[:3]] == [False, False, False]
    assert rows["AdamW step, merged fused"]["pass"] is False


def test_what_failed_is_a_failed_row_and_a_line_of_the_table(gpu_check, table, monkeypatch,
                                                            tmp_path):
    table["variants"]["failed"] = {"forward+backward bf16, heads channels_last":
                                   "RuntimeError: CUDA out of memory"}
    table["ddp"]["bf16"] = {"failed": "rank 0 failed: exit 1"}
    rows = _rows(gpu_check, table, monkeypatch, tmp_path)
    assert rows["forward+backward bf16, heads channels_last"]["pass"] is False
    assert rows["DDP iteration at 1 rank, bf16"]["pass"] is False
    text = (tmp_path / "precision_table.md").read_text()
    assert "- **failed**, forward+backward bf16, heads channels_last: RuntimeError: CUDA" in text
    assert "- **failed**, DDP iteration bf16: rank 0 failed" in text
    assert "| bf16 | 300.0 |" not in text and "| fp32 | 500.0 |" in text


def test_the_experiment_passes_its_precisions_and_keeps_skips_and_failures(monkeypatch):
    """precision_table with its launches recorded: the precisions reach the variants, each
    measurable one gets a DDP launch in that precision (tf32 on this CPU: skipped), a launch
    that fails is kept as failed, and the share's means come from the run's means."""
    import swinkit.experiments.precision_table as experiment
    from swinkit.launch import LaunchError

    asked = {}
    monkeypatch.setattr(experiment, "measure_variants_isolated",
                        lambda preset, batch, samples, precisions, timeout_s, keep_at=None:
                        asked.setdefault("variants", (preset, batch, precisions)) and {})

    def run_ddp(spec, progress):
        asked.setdefault("ddp", []).append(spec.precision)
        if spec.precision == "bf16":
            error = LaunchError.__new__(LaunchError)
            RuntimeError.__init__(error, "rank 0 failed: exit 1")
            raise error
        return {"iter_s": 0.5, "phases_s": {"forward": 0.2}, "iter_mean_s": 0.6,
                "phases_mean_s": {"forward": 0.3}, "images_per_rank": 2, "device": "cpu",
                "precision": {"label": spec.precision}, "ranks": [{"remedies": {}}]}
    monkeypatch.setattr(experiment, "run_ddp", run_ddp)
    monkeypatch.setattr(experiment, "precision_skip_reason",
                        lambda p, device, cuda_capability=None: "a no-op" if p == "tf32" else None)
    out = experiment.precision_table("test", 2, iters=3, precisions=("fp32", "tf32", "bf16"),
                                     progress=lambda s: None)
    assert asked == {"variants": ("test", 2, ("fp32", "tf32", "bf16")), "ddp": ["fp32", "bf16"]}
    assert out["ddp"]["tf32"] == {"skipped": "a no-op"}
    assert out["ddp"]["bf16"] == {"failed": "LaunchError: rank 0 failed: exit 1"}
    assert (out["ddp"]["fp32"]["iter_mean_s"], out["ddp"]["fp32"]["phases_mean_s"]) == (
        0.6, {"forward": 0.3})


def test_the_launches_run_when_the_variants_process_fails_and_any_launch_error_is_kept(
        monkeypatch):
    """A variants process that finished nothing (RuntimeError) is a failed line, not the end
    of the table: every precision's launch still runs; a launch failing with something other
    than a LaunchError (a refused spec, a timeout's OSError) is kept too."""
    import swinkit.experiments.precision_table as experiment

    def variants(*a, **k):
        raise RuntimeError("precision variants of preset test at batch 2 failed before any "
                           "variant finished (exit -9: )")
    launched = []

    def run_ddp(spec, progress):
        launched.append(spec.precision)
        raise ValueError("iters must be a positive integer")
    monkeypatch.setattr(experiment, "measure_variants_isolated", variants)
    monkeypatch.setattr(experiment, "run_ddp", run_ddp)
    monkeypatch.setattr(experiment, "precision_skip_reason", lambda *a, **k: None)
    out = experiment.precision_table("test", 2, precisions=("fp32", "bf16"),
                                     progress=lambda s: None)
    assert launched == ["fp32", "bf16"]
    assert out["variants"]["failed"]["process"].startswith("RuntimeError: precision variants")
    assert out["variants"]["forward_backward"] == [] and out["variants"]["optimizer"] == {}
    assert out["ddp"]["bf16"] == {"failed": "ValueError: iters must be a positive integer"}
    from swinkit.report.precision_table import markdown
    assert "- **failed**, process: RuntimeError: precision variants" in markdown(out)


@pytest.mark.parametrize("ending, said", [
    ("killed", "the variants' process stopped: exit -9: Killed"),
    ("timeout", "the variants' process stopped: timed out after 60 s: NCCL hang")])
def test_a_variants_process_that_dies_gives_the_variants_it_wrote(monkeypatch, ending, said):
    """The process's last checkpoint is read back when it dies or runs out of time; where
    it wrote none, a RuntimeError says it finished nothing."""
    import subprocess
    import swinkit.components.precision_variants as pv
    written = {"forward_backward": [{"precision": "fp32"}], "failed": {}, "skipped": {}}

    def run(cmd, timeout, **kw):
        Path(cmd[6]).write_text(json.dumps(written))   # python -m module preset batch samples OUT
        if ending == "timeout":
            raise subprocess.TimeoutExpired(cmd, timeout, stderr=b"NCCL hang")
        return subprocess.CompletedProcess(cmd, -9, stderr="Killed")
    monkeypatch.setattr(pv.subprocess, "run", run)
    out = pv.measure_variants_isolated("test", 2, precisions=("fp32",), timeout_s=60)
    assert out["forward_backward"] == [{"precision": "fp32"}]
    assert out["failed"] == {"process": said}
    monkeypatch.setattr(pv.subprocess, "run", lambda cmd, timeout, **kw:
                        subprocess.CompletedProcess(cmd, 1, stderr="ImportError: mmseg"))
    with pytest.raises(RuntimeError, match="before any variant finished .exit 1: ImportError"):
        pv.measure_variants_isolated("test", 2, precisions=("fp32",))



def test_the_variants_file_kept_is_this_runs(monkeypatch, tmp_path):
    """With ``keep_at`` the file stays where asked (a caller killed too keeps the variants);
    one an earlier run left there is removed first, never read as this run's."""
    import subprocess
    import swinkit.components.precision_variants as pv
    kept = tmp_path / "precision_variants.json"
    kept.write_text(json.dumps({"forward_backward": [{"precision": "old"}], "failed": {}}))
    monkeypatch.setattr(pv.subprocess, "run", lambda cmd, timeout, **kw:
                        subprocess.CompletedProcess(cmd, -9, stderr="Killed"))
    with pytest.raises(RuntimeError, match="before any variant finished"):
        pv.measure_variants_isolated("test", 2, precisions=("fp32",), keep_at=kept)

    def run(cmd, timeout, **kw):
        Path(cmd[6]).write_text(json.dumps({"forward_backward": [{"precision": "fp32"}]}))
        return subprocess.CompletedProcess(cmd, 0, stderr="")
    monkeypatch.setattr(pv.subprocess, "run", run)
    assert pv.measure_variants_isolated("test", 2, keep_at=kept)["forward_backward"] == [
        {"precision": "fp32"}]
    assert kept.is_file()


def test_the_variants_process_writes_after_every_variant(in_process, monkeypatch, tmp_path):
    """The process's own entry point, in this process: killed during its third variant (an
    exception no handler takes, as a signal is), its file holds the first two."""
    pv = in_process
    calls = []

    def variant(preset, batch, precision, channels_last, *rest):
        calls.append((precision, channels_last))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return {"precision": precision, "channels_last_heads": channels_last}
    monkeypatch.setattr(pv, "_forward_backward", variant)
    monkeypatch.setattr(pv, "precision_skip_reason", lambda *a, **k: None)
    out = tmp_path / "result.json"
    with pytest.raises(KeyboardInterrupt):
        pv._main(["test", "2", "1", str(out), "fp32,bf16"])
    partial = json.loads(out.read_text())
    assert [(v["precision"], v["channels_last_heads"]) for v in partial["forward_backward"]] == [
        ("fp32", False), ("fp32", True)]
    # a whole result so far: the table renders it (no optimizer step was reached)
    monkeypatch.setattr("swinkit.report.precision_table.forward_backward_rows", lambda v: [])
    assert partial["optimizer"] == {} and "AdamW" in markdown({"variants": partial, "ddp": {}})


@pytest.fixture
def in_process(monkeypatch):
    """measure_variants run in this process: its one-thread setting put back after."""
    import torch
    threads = torch.get_num_threads()
    yield __import__("swinkit.components.precision_variants", fromlist=["_"])
    torch.set_num_threads(threads)


def test_a_failing_variant_or_optimizer_is_kept_and_the_rest_still_run(in_process,
                                                                       monkeypatch):
    pv = in_process

    def variant(preset, batch, precision, channels_last, *rest):
        if channels_last:
            raise RuntimeError("CUDA out of memory")
        return {"precision": precision, "channels_last_heads": channels_last}

    def optimizer(*args):
        raise RuntimeError("no fused kernel")
    monkeypatch.setattr(pv, "_forward_backward", variant)
    monkeypatch.setattr(pv, "_optimizer_steps", optimizer)
    out = pv.measure_variants("test", 2, samples=1, precisions=("fp32",),
                              progress=lambda s: None)
    assert out["forward_backward"] == [{"precision": "fp32", "channels_last_heads": False}]
    assert out["failed"] == {"forward+backward fp32, heads channels_last":
                             "RuntimeError: CUDA out of memory",
                             "AdamW step": "RuntimeError: no fused kernel"}
    assert out["optimizer"] == {}


def test_each_variant_is_measured_on_a_model_of_its_own_with_the_last_one_freed(
        in_process, monkeypatch):
    """With the garbage collector off (the segmentor holds reference cycles), every model an
    earlier variant built is dead when the next is built; the achieved FLOP/s is over the
    median of the samples (1 s of 1, 1 and 4 s), not their mean (2 s)."""
    import gc
    import weakref

    import swinkit.model.segmentor as segmentor
    pv = in_process
    built, build = [], segmentor.build_segmentor

    def recorded(cfg):
        assert all(ref() is None for ref in built), "an earlier variant's model is alive"
        model = build(cfg)
        built.append(weakref.ref(model))
        return model
    monkeypatch.setattr(segmentor, "build_segmentor", recorded)
    monkeypatch.setattr(pv, "timed", lambda fn, samples, warmup=0, sync=None: [1.0, 1.0, 4.0])
    monkeypatch.setattr(pv, "_optimizer_steps", lambda *a: {})
    gc.disable()
    try:
        out = pv.measure_variants("test", 2, samples=3, precisions=("fp32",),
                                  progress=lambda s: None)
    finally:
        gc.enable()
    assert len(built) == 2 and not out["failed"]
    assert all(v["achieved_flops"] == v["flops"] / 1.0 for v in out["forward_backward"])


@pytest.mark.slow
def test_the_variants_and_a_ddp_iteration_run_on_cpu_each_as_asked():
    """The test preset's variants on this CPU: fp32 in both head layouts (and bf16 where the
    CPU has bf16 instructions), tf32 left out as a no-op; one AdamW group per trainable
    parameter as MMEngine builds it, fewer merged, each on the kernel asked as torch ran it;
    and one rank's DDP iteration read into the table's fields (gpu_check's part around them is
    driven above on a planted table)."""
    from swinkit.components.precision_variants import measure_variants_isolated
    from swinkit.config import load_config
    from swinkit.experiments.precision_table import ddp_iteration
    from swinkit.model.segmentor import build_segmentor
    from swinkit.precision import cpu_has_bf16
    from swinkit.report.precision_table import ddp_rows

    v = measure_variants_isolated("test", 2, samples=1)
    measured = {(x["precision"], x["channels_last_heads"]) for x in v["forward_backward"]}
    expected = {"fp32", "bf16"} if cpu_has_bf16() else {"fp32"}
    assert measured == {(p, cl) for p in expected for cl in (False, True)} and not v["failed"]
    assert "no-op on CPU" in v["skipped"]["tf32"]
    assert all(x["heads_are_channels_last"] == x["channels_last_heads"]
               and x["tf32_after"]["matmul"] == (x["precision"] != "fp32")
               and x["matmul_peak_math"] == x["precision"]    # bf16 against the bf16 peak
               for x in v["forward_backward"])
    trainable = sum(p.requires_grad for p in build_segmentor(load_config("test")).parameters())
    assert v["optimizer"]["per_parameter"]["groups"] == trainable
    assert v["optimizer"]["merged_fused"]["groups"] < trainable
    # what torch ran, read off the dispatched ops: on a CPU torch's default is a loop
    assert [v["optimizer"][g]["kernel_ran"] for g in ("per_parameter", "merged_foreach",
                                                      "merged_fused")] == [
        "per tensor", "foreach", "fused"]
    run = ddp_iteration("test", "fp32", 3, progress=lambda s: None)
    assert run["remedies"]["optimizer_param_groups"] == trainable
    assert run["images_per_rank"] == load_config("test").images_per_rank
    assert ddp_rows({"fp32": run})[0][0] == "fp32"
