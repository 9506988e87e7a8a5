"""tools/attribute.py --predict: the thesis projection, predicting from a stored prediction, bad
input, and (slow) the held-out run on the test preset."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from swinkit.predict.numbers.links import Link, ring_allreduce_s
from swinkit.predict.report.text import held_out_lines

ROOT = Path(__file__).resolve().parents[1]
PHASES = {"data_wait": 0.0, "forward": 0.4, "backward": 0.5, "exposed_comm": 0.0,
          "optimizer": 0.1, "other": 0.0}


def _attribute(*args, timeout=120, **env):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "attribute.py"), *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **env))


def _stored(link: Link) -> dict:
    """A saved prediction: one launch whose basis is one rank of 1.0 s (0.4 forward, 0.5
    backward, 0.1 optimizer), two buckets of 1 MB and 9 MB ready at the end of backward, the
    buckets' all-reduces at N' = 2 timed as ``link``'s ring says."""
    buckets = [1_000_000, 9_000_000]
    position = {"phases_s": dict(PHASES), "bucket_ready_s": [0.5, 0.5],
                "samples": [{"phases_s": dict(PHASES), "bucket_ready_s": [0.5, 0.5]}] * 3}
    costs = {"world_size": 1, "grad_accum": 1, "contention": {}, "buffer_sync": False,
             "ranks": [{"rank": 0, "positions": [position]}], "bucket_comm_s": [0.0, 0.0],
             "broadcast_s": 0.0}
    timed = [ring_allreduce_s(b, 2, link) for b in buckets]
    return {"preset": "test", "from": [1], "targets": [2], "summary": {}, "launches": [{
        "launch": 1, "t1_s": 1.0,
        "basis": {"costs": costs, "host": {"cores": 64, "threads_per_rank": 1,
                                           "loader_workers": 0, "images_per_rank": 2},
                  "bucket_bytes": buckets},
        "targets": {"2": {"comm_source": "timed at N'", "bucket_comm_s": timed}}}]}


def test_thesis_projection_is_labelled_with_its_inputs(tmp_path):
    out = _attribute("--preset", "thesis", "--predict", "1,2,4,8", "--link", "10,10",
                     "--json", str(tmp_path / "p.json"))
    assert out.returncode == 0, out.stderr
    assert "PROJECTION (predicted from stated device and link figures" in out.stdout
    assert "thesis measured 1.43" in out.stdout and "N=8" in out.stdout
    assert "link 10 GB/s, 10 us" in out.stdout
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["predicted"] is True
    v100 = data["projection"]["CRC V100 (PCIe)"]["rows"]
    # the ring at 10 GB/s, 10 us: 2 x 1/2 x 485.72 MB / 10 GB/s + 2 x 10 us at N = 2
    assert v100["2"]["allreduce_s"] == pytest.approx(0.0485721 + 2e-5, rel=1e-5)


def test_predict_from_stored_fits_the_link_and_adds_nodes(tmp_path):
    """Bucket times at 2 made by a 1 GB/s, 100 us ring: the fit recovers it, so at 4 ranks
    the 9 MB bucket takes 2 x 3/4 x 9 ms + 6 x 100 us = 14.1 ms; nodes of one rank over a
    0.5 GB/s link bind every step to that link."""
    path = tmp_path / "stored.json"
    path.write_text(json.dumps(_stored(Link(1.0, 1e-4))))
    out = _attribute("--stored", str(path), "--predict", "4", "--nodes", "2",
                     "--inter-link", "0.5,100", "--json", str(tmp_path / "o.json"))
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "o.json").read_text())
    four = data["launches"][0]["targets"]["4"]
    assert four["bucket_comm_s"][1] == pytest.approx(2 * 3 / 4 * 0.009 + 6e-4, rel=1e-6)
    two_nodes = data["launches"][0]["targets"]["2x1"]  # 2 nodes of the basis's 1 rank
    assert two_nodes["world_size"] == 2
    assert two_nodes["bucket_comm_s"][1] == pytest.approx(2 * 1 / 2 * 0.018 + 2e-4, rel=1e-6)
    assert "inter-node" in two_nodes["comm_source"]
    # both buckets ready at the end of backward: nothing hides, 1.0 + both all-reduces
    assert four["predicted_iter_s"] == pytest.approx(1.0 + sum(four["bucket_comm_s"]), rel=1e-6)
    assert "perfect scaling" not in out.stderr and "predicted" in out.stdout


def test_predict_without_a_run_says_where_it_looked_for_a_kept_report(tmp_path):
    out = _attribute("--preset", "cpu", "--predict", "4", "--results", str(tmp_path / "results"))
    assert out.returncode == 3
    assert f"no held-out prediction kept for any commit in {tmp_path / 'swinkit-held-out'}" in (
        out.stderr) and "tools/suite.py" in out.stderr
    out = _attribute("--preset", "cpu", "--predict-from", "1")
    assert out.returncode == 2 and "--predict-from needs --run" in out.stderr


def _keep(results: Path, machine: str, commit: str, link: Link) -> Path:
    """A held-out report where the suite keeps bench_predict's (asv_names.held_out_path)."""
    from swinkit.attribution.asv_names import held_out_path
    path = held_out_path(results, machine, commit)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**_stored(link), "commit": commit}))
    return path


def test_predict_from_what_asv_kept_for_the_commit(tmp_path):
    """Two commits kept, timed by different rings: --commit picks one, and its ring is the one
    fitted (the 9 MB bucket at 4 ranks as the ring's formula says); without --commit the
    newest."""
    results = tmp_path / "results"
    old = _keep(results, "box", "a" * 40, Link(1.0, 1e-4))
    new = _keep(results, "box", "b" * 40, Link(2.0, 1e-4))
    os.utime(old, (1, 1))
    for args, gbps in ((["--commit", "aaaa"], 1.0), ([], 2.0)):
        out = _attribute("--results", str(results), "--predict", "4", *args,
                         "--json", str(tmp_path / "o.json"))
        assert out.returncode == 0, out.stderr
        data = json.loads((tmp_path / "o.json").read_text())
        four = data["launches"][0]["targets"]["4"]
        assert four["bucket_comm_s"][1] == pytest.approx(2 * 3 / 4 * 0.009 / gbps + 6e-4,
                                                         rel=1e-6)
        assert data["source"] == str(old if gbps == 1.0 else new)
    out = _attribute("--results", str(results), "--predict", "4", "--commit", "cccc")
    assert out.returncode == 3 and "commit cccc" in out.stderr


def test_held_out_refuses_bad_input_before_announcing_or_launching_anything(tmp_path):
    """A missing data root is refused before the first progress line (which says a run is
    starting) and so before any rank is launched."""
    missing = tmp_path / "no-such" / "ADEChallengeData2016"
    out = _attribute("--run", "--preset", "test", "--world-sizes", "1,2", "--predict-from", "1",
                     "--data-root", str(missing))
    assert out.returncode == 2 and f"data root {missing} does not exist" in out.stderr
    assert "[world size" not in out.stdout + out.stderr
    # an injection every 2nd step that the run at 1 has too: its medians cannot say
    out = _attribute("--run", "--preset", "test", "--world-sizes", "1,2", "--predict-from", "1",
                     "--inject", "compute_ms=20,every=2")
    assert out.returncode == 2 and "--inject: every=N with costs" in out.stderr
    assert "[world size" not in out.stdout + out.stderr


def test_the_removed_in_launch_mode_is_refused_with_what_replaced_it():
    """--in-launch (and its old spelling --same-launch) is gone: refused before anything runs,
    however it is combined, with a message naming what a user runs instead."""
    for flag in ("--in-launch", "--same-launch"):
        for args in (("--run", "--world-sizes", "1,2", "--predict-from", "1"), ("--run",),
                     ("--predict", "4")):
            out = _attribute("--preset", "test", flag, *args)
            assert out.returncode == 2, (flag, args)
            assert "was removed" in out.stderr and "--predict-from" in out.stderr
            assert "paired oracle" in out.stderr
            assert "[world size" not in out.stdout + out.stderr


def test_strong_scaling_is_refused_by_a_prediction_not_ignored():
    """The model takes each rank's work from the run it predicts from (weak scaling): asked
    for strong scaling, it must say so rather than predict weak scaling under that name."""
    out = _attribute("--run", "--preset", "test", "--world-sizes", "1,2", "--predict-from", "1",
                     "--scaling", "strong")
    assert out.returncode == 2 and "--scaling strong" in out.stderr
    assert "[world size" not in out.stdout + out.stderr


def test_localhost_inter_link_needs_nodes_and_a_stored_basis(tmp_path):
    """Refused before any process starts: nothing to predict, or no buckets to time."""
    path = tmp_path / "stored.json"
    path.write_text(json.dumps(_stored(Link(1.0, 1e-4))))
    out = _attribute("--stored", str(path), "--predict", "4", "--inter-link", "localhost")
    assert out.returncode == 2 and "give --nodes" in out.stderr
    path.write_text(json.dumps({"preset": "test", "from": [1], "launches": []}))
    out = _attribute("--stored", str(path), "--nodes", "2", "--inter-link", "localhost")
    assert out.returncode == 2 and "bucket_bytes" in out.stderr


def test_sharing_lines_show_the_averaged_slowdown_beside_each_launchs_own_reading():
    """Each launch predicted with the mean of its own two timings' readings (x1.05 of x1.0 and
    x1.1; x1.15 of x1.1 and x1.2), printed beside its latest; a result kept without the
    launches' own timings (a stored one from before), or predicted from more than one rank,
    prints no such line."""
    from swinkit.predict.report.text import sharing_lines

    launches = [{"targets": {2: {"compute_slowdown": 1.05}}, "timed": {2: {"compute_slowdown": 1.1}},
                 "timed_earlier": {2: [{"compute_slowdown": 1.0}]}},
                {"targets": {2: {"compute_slowdown": 1.15}}, "timed": {2: {"compute_slowdown": 1.2}},
                 "timed_earlier": {2: [{"compute_slowdown": 1.1}]}}]
    (line,) = sharing_lines(launches)
    assert ("N=2, per launch: x1.050, x1.150 (the stand-in's own reading at each launch's last "
            "timing: x1.100, x1.200; averaged over the launch's own 2 timings") in line
    assert sharing_lines([{k: v for k, v in row.items() if k != "timed"} for row in launches]) == []
    assert sharing_lines(launches[:1]) == []
    for row in launches:  # predicted from 2 ranks: the stand-in was not used
        row["targets"][2]["from_world_size"] = 2
    assert sharing_lines(launches) == []


@pytest.mark.slow
def test_nodes_predicted_over_a_link_timed_across_two_simulated_nodes(tmp_path):
    """Two elastic agents on localhost stand for two hosts: the stored run's buckets (1 MB,
    9 MB) are all-reduced across them and the ring model fitted to those timings. With two
    sizes and two parameters the fit is exact, so 2 nodes of 1 rank get back what was timed;
    4 nodes get the ring's hand formula at N = 4 with that link."""
    path = tmp_path / "stored.json"
    path.write_text(json.dumps(_stored(Link(1.0, 1e-4))))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = _attribute("--stored", str(path), "--nodes", "2,4", "--inter-link", "localhost",
                     "--json", str(tmp_path / "o.json"), timeout=600, TMPDIR=str(scratch))
    assert out.returncode == 0, out.stderr
    assert list(scratch.iterdir()) == []  # both nodes' run folders removed once read
    assert "simulated nodes on localhost" in out.stdout
    data = json.loads((tmp_path / "o.json").read_text())
    inter = data["inter_link"]
    timed = inter["timed_s"]
    assert len(timed) == 2 and all(t > 0 for t in timed)
    bandwidth, latency = inter["bandwidth_gbps"] * 1e9, inter["latency_s"]
    assert bandwidth > 0 and latency >= 0
    two = data["launches"][0]["targets"]["2x1"]
    if inter["fit"] == "bandwidth and latency":
        assert two["bucket_comm_s"] == pytest.approx(timed, rel=1e-6)
    else:  # the timings' noise hid the latency: bandwidth alone, over both buckets
        assert sum(two["bucket_comm_s"]) == pytest.approx(sum(timed), rel=1e-6)
    four = data["launches"][0]["targets"]["4x1"]
    assert four["world_size"] == 4 and "inter-node" in four["comm_source"]
    for nbytes, t in zip([1_000_000, 9_000_000], four["bucket_comm_s"]):
        assert t == pytest.approx(2 * 3 / 4 * nbytes / bandwidth + 2 * 3 * latency, rel=1e-6)


def test_stored_timings_that_cannot_separate_latency_fit_bandwidth_alone(tmp_path):
    """Two equal 5 MB buckets at 2 ranks (5.2 ms each on a 1 GB/s, 100 us ring): bandwidth
    alone, 2 x 5 MB / 10.4 ms = 0.96154 GB/s, latency 0; no timings at all: ask for --link."""
    stored = _stored(Link(1.0, 1e-4))
    stored["launches"][0]["basis"]["bucket_bytes"] = [5_000_000, 5_000_000]
    stored["launches"][0]["targets"]["2"]["bucket_comm_s"] = [0.0052, 0.0052]
    path = tmp_path / "stored.json"
    path.write_text(json.dumps(stored))
    out = _attribute("--stored", str(path), "--predict", "4", "--json", str(tmp_path / "o.json"))
    assert out.returncode == 0, out.stderr
    four = json.loads((tmp_path / "o.json").read_text())["launches"][0]["targets"]["4"]
    assert four["bucket_comm_s"][0] == pytest.approx(2 * 3 / 4 * 5e6 / 0.961538e9, rel=1e-5)
    stored["launches"][0]["targets"] = {}
    path.write_text(json.dumps(stored))
    out = _attribute("--stored", str(path), "--predict", "4")
    assert out.returncode == 2
    assert "--link GBPS,LATENCY_US" in out.stderr


def test_held_out_text_prints_the_baselines_and_assumptions():
    pred = {"world_size": 2, "t1_s": 1.0, "predicted_iter_s": 1.1, "predicted_efficiency": 1 / 1.1,
            "perfect_scaling_s": 1.0, "plus_allreduce_s": 1.3, "measured_iter_s": 1.12,
            "measured_efficiency": 1 / 1.12, "components_s": {"forward": 0.4},
            "core_slowdown": 1.0, "comm_source": "timed at N'", "assumptions": ["stated"],
            "accuracy": {k: {"accuracy_pct": v} for k, v in
                         (("model", 98.2), ("perfect", 89.3), ("plus_allreduce", 84.0))}}
    lines = held_out_lines({"preset": "cpu", "from": [1], "targets": [2],
                            "launches": [{"launch": 1, "targets": {2: pred}}],
                            "summary": {2: {k: {"per_launch_pct": [v["accuracy_pct"]],
                                                "worst_pct": v["accuracy_pct"]}
                                            for k, v in pred["accuracy"].items()}},
                            "repeatability": {"1": {"per_pair_pct": [97.5, 93.24],
                                                    "worst_pct": 93.24}}})
    text = "\n".join(lines)
    assert "the host's own repeatability" in text
    assert f"  {'world size 1':38s} 97.5, 93.2 % (93.2 %)" in lines  # the predictors' columns
    assert "swinkit (predicted)" in text and "98.2 %" in text
    assert "perfect scaling T(1)" in text and "89.3 %" in text
    assert "T(1) + all-reduce at N'" in text and "  - stated" in text


def _first_timings(data: dict) -> list[dict]:
    """The first launch's timings at 2, in the order made: the earlier ones, then its own."""
    row = data["launches"][0]
    return (row.get("timed_earlier") or {}).get("2", []) + [row["timed"]["2"]]


def _heading(stdout: str) -> str:
    """The report's first line (the launches' progress lines come before it)."""
    return next(line for line in stdout.splitlines()
                if line.startswith(("Predicted world sizes", "IN-LAUNCH")))


def _printed(stdout: str, heading: str) -> dict[str, list[float]]:
    """The per-launch accuracies printed under ``heading``, by predictor label, then the worst
    and the range: ``{label: [launch 1, launch 2, ..., worst, range]}``."""
    lines = stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(heading))
    out = {}
    for line in lines[at + 1:]:
        if not line.startswith("  "):
            break
        label, figures = line[2:40].strip(), line[40:]
        out[label] = [float(x) for x in re.findall(r"-?\d+\.\d", figures)]
    return out


def _recomputed(data: dict, ws: str, key: str, against: str = "measured_iter_s") -> list[float]:
    """Each launch's accuracy of the figure ``key`` against ``against``, from the stored
    numbers alone: 100 x (1 - |predicted - measured| / measured), then the worst and range."""
    pcts = [100 * (1 - abs(p[key] - p[against]) / p[against])
            for p in (row["targets"][ws] for row in data["launches"])]
    return pcts + [min(pcts), max(pcts) - min(pcts)]


def _check_printed_figures(data: dict, stdout: str, kind: str) -> None:
    """Every accuracy printed is the one the stored predicted and measured iterations give
    (printed to 0.1: within 0.051), the naive predictions the stored T(1) plus what a known
    injection adds (none here), the host's spread the stored runs' own."""
    printed = _printed(stdout, f"world size 2, {kind} accuracy per launch")
    for label, key in (("swinkit (predicted)", "predicted_iter_s"),
                       ("perfect scaling T(1)", "perfect_scaling_s"),
                       ("T(1) + all-reduce at N'", "plus_allreduce_s"),
                       ("oracle paired at N' (not held out)", "paired_oracle_s")):
        assert printed[label] == pytest.approx(_recomputed(data, "2", key), abs=0.051), label
    for row in data["launches"]:
        p = row["targets"]["2"]
        assert p["perfect_scaling_s"] == row["measured_from"]["1"]  # the stored T(1), nothing known
        assert p["plus_allreduce_s"] == pytest.approx(p["t1_s"] + sum(p["bucket_comm_s"]))
    times = [row["measured_from"]["1"] for row in data["launches"]]
    host = [100 * (1 - abs(a - b) / b) for a, b in zip(times, times[1:])]
    line = next(x for x in stdout.splitlines() if x.startswith("  world size 1 "))
    assert [float(x) for x in re.findall(r"\d+\.\d", line[40:])][:-1] == pytest.approx(
        host, abs=0.051)


@pytest.mark.slow
def test_held_out_run_on_the_test_preset(tmp_path):
    """2 predicted from 1 (collectives and loaders timed at 2), then run, in two fresh
    launches: every accuracy the command prints is recomputed from the predicted and
    measured iterations it stored, and must agree; no figure is held to a bound (a shared
    machine's timing)."""
    out = _attribute("--run", "--preset", "test", "--world-sizes", "1,2", "--predict-from", "1",
                     "--iters", "5", "--repeats", "2", "--json", str(tmp_path / "h.json"),
                     timeout=900)
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "h.json").read_text())
    assert "HELD OUT" in _heading(out.stdout) and data["in_launch"] is False
    _check_printed_figures(data, out.stdout, "held-out")
    two = data["launches"][0]["targets"]["2"]
    assert two["from_world_size"] == 1 and two["comm_source"] == "timed at N'"
    # the timings at 2 went over the backend the run at 1 used (on a GPU node: NCCL, GPUs)
    assert data["launches"][0]["basis"]["probe"]["backend"] == "gloo"
    # each launch took two timings of its own, and the prediction their mean wait
    for row in data["launches"]:
        waits = [t["iteration_wait_s"] for t in row["timed_earlier"]["2"] + [row["timed"]["2"]]]
        assert len(waits) == 2
        assert row["targets"]["2"]["sync_points_wait_s"] == pytest.approx(sum(waits) / 2)
    # both contention rates read at 2: enough rounds ran beside the stand-in's chunks
    assert set(data["launches"][0]["timed"]["2"]["contention"]) == {"compute_rate", "comm_rate"}
    # one loader alone and both at once timed at 2: the loading took the run's own wait at 1
    # scaled by their ratio (the preset's ranks load themselves)
    assert data["launches"][0]["timed"]["2"]["loader_slowdown"] > 0
    assert any(a.startswith("loading: the run's own data wait") for a in two["assumptions"])
    # the run's own all-reduces, one per bucket the prediction replayed, each read in every
    # measured DDP step (5), printed beside the durations replayed
    spans = two["bucket_spans"]
    assert len(spans) == len(two["bucket_comm_s"])
    assert len(spans) == len(data["launches"][0]["basis"]["probe"]["elements"])
    assert all(s["iterations"] == 5 and s["span_s"] > 0 for s in spans.values())
    # the last bucket is launched where backward ends (its mark): none of it beside backward
    assert min(s["beside_backward_s"] for s in spans.values()) == 0
    assert "the buckets' all-reduces in the run" in out.stdout
    assert "launch 1, N=2: " in out.stdout.split("the buckets' all-reduces in the run")[1]


def test_the_limit_on_cpu_is_said_under_a_cpu_prediction_only():
    """Ranks sharing a host's cores: said where the launches ran over gloo, not over NCCL."""
    from swinkit.predict.numbers.assumptions import CPU_LIMIT
    stored = _stored(Link(1.0, 1e-4))
    stored["launches"][0]["targets"] = {}
    for backend, said in (("gloo", True), ("nccl", False)):
        stored["launches"][0]["basis"]["probe"] = {"backend": backend}
        assert (f"limit: {CPU_LIMIT}" in held_out_lines(stored)) is said, backend


def test_thesis_projection_per_precision(tmp_path, capsys):
    """In bf16 at MFU 0.4 an A100's iteration is 14.4 TFLOP / (0.4 x 312 TFLOP/s) = 115.4 ms
    (0.738 s in fp32 at 0.5 x 19.5); the V100 has no bf16 math and is left out, saying so."""
    from swinkit.cli.commands import main
    out = tmp_path / "p.json"
    assert main(["predict", "--preset", "thesis", "--predict", "1,2", "--precision", "bf16",
                 "--mfu", "0.4", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "thesis projection in bf16 at MFU 0.4 (given;" in text
    assert "CRC V100 (PCIe): left out: a V100 has no bf16 math" in text
    data = json.loads(out.read_text())
    assert set(data["projection"]) == {"CRC A100 (PCIe)", "CRC A100_NVLINK"}
    assert data["projection"]["CRC A100 (PCIe)"]["iter_s"] == pytest.approx(14.4 / (0.4 * 312))
    assert main(["predict", "--preset", "thesis", "--predict", "1", "--json", str(out)]) == 0
    assert "(stated, not measured in this precision;" in capsys.readouterr().out
    fp32 = json.loads(out.read_text())["projection"]
    assert fp32["CRC A100 (PCIe)"]["iter_s"] == pytest.approx(14.4 / (0.5 * 19.5))
    assert fp32["CRC V100 (PCIe)"]["iter_s"] == pytest.approx(14.4 / (0.5 * 15.7))


def _gpu_check_json(path, bf16_mfu):
    """A saved gpu_check.json whose precision table measured bf16 on an H200 at ``bf16_mfu``
    with NCHW heads (0.9 with channels_last, which the projection must not take) and whose
    measure part ran fp32 at 0.2."""
    variant = {"precision": "bf16", "matmul_peak_math": "bf16"}
    path.write_text(json.dumps({"device": "NVIDIA H200", "parts": {
        "precision": {"variants": {"device_name": "NVIDIA H200", "forward_backward": [
            dict(variant, channels_last_heads=True, mfu=0.9),
            dict(variant, channels_last_heads=False, mfu=bf16_mfu)]}},
        "measure": {"forward_backward": {
            "matmul_peak_math": "fp32", "device": "cuda",
            "results": {"segmentor/forward_backward": {"mfu": 0.2}}}}}}))
    return path


def test_the_projection_takes_the_mfu_measured_on_a_gpu_in_its_precision(tmp_path, capsys):
    """bf16 at the H200's measured 0.3: an A100's iteration is 14.4 TFLOP / (0.3 x 312
    TFLOP/s) = 153.8 ms; fp32 from the same file takes the measure part's 0.2: 14.4 / (0.2 x
    19.5) = 3.69 s. tf32 was not measured in it: refused, naming the file."""
    from swinkit.cli.commands import main
    saved, out = _gpu_check_json(tmp_path / "gpu_check.json", 0.3), tmp_path / "p.json"
    assert main(["predict", "--preset", "thesis", "--predict", "1,2", "--precision", "bf16",
                 "--mfu-from", str(saved), "--json", str(out)]) == 0
    assert f"at MFU 0.3 (measured on NVIDIA H200, {saved})" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["projection"]["CRC A100 (PCIe)"]["iter_s"] == pytest.approx(14.4 / (0.3 * 312))
    assert main(["predict", "--preset", "thesis", "--predict", "1", "--mfu-from", str(saved),
                 "--json", str(out)]) == 0
    fp32 = json.loads(out.read_text())["projection"]["CRC A100 (PCIe)"]["iter_s"]
    assert fp32 == pytest.approx(14.4 / (0.2 * 19.5))
    capsys.readouterr()
    assert main(["predict", "--preset", "thesis", "--predict", "2", "--precision", "tf32",
                 "--mfu-from", str(saved)]) == 2
    err = capsys.readouterr().err
    assert f"--mfu-from {saved}: no segmentor forward+backward measured in tf32" in err
    assert "(measured: bf16, fp32)" in err


def test_a_given_mfu_and_a_measured_one_are_not_both_taken(capsys):
    from swinkit.cli.commands import main
    with pytest.raises(SystemExit) as end:
        main(["predict", "--preset", "thesis", "--predict", "2", "--mfu", "0.4", "--mfu-from",
              "x.json"])
    assert end.value.code == 2
    assert "--mfu-from: not allowed with argument --mfu" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--preset", "thesis", "--predict", "2", "--mfu", "1.5"], "--mfu must be in (0, 1]"),
    (["--preset", "thesis", "--predict", "2", "--mfu-from", "/nope.json"],
     "--mfu-from /nope.json: [Errno 2]"),
    (["--stored", "x.json", "--predict", "2", "--precision", "bf16"],
     "--precision and --mfu (--mfu-from) set the thesis projection's device compute"),
    (["--stored", "x.json", "--predict", "2", "--mfu-from", "y.json"],
     "--precision and --mfu (--mfu-from) set the thesis projection's device compute"),
])
def test_projection_precision_options_are_checked(capsys, argv, message):
    from swinkit.cli.commands import main
    assert main(["predict", *argv]) == 2
    assert message in capsys.readouterr().err
