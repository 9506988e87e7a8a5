"""The swinkit CLI: describe, train, verify-data, and bad input with exit code 2."""
import json
import subprocess
import sys

import pytest

from swinkit.cli import main


@pytest.mark.slow
def test_describe_thesis_json(capsys, tmp_path):
    assert main(["describe", "--preset", "thesis", "--json", "--data-root", str(tmp_path)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["backbone_params"] == pytest.approx(86.90e6, rel=0.005)
    parts = info["backbone_params"] + info["decode_head_params"] + info["auxiliary_head_params"]
    assert info["total_params"] == parts
    assert info["gradient_bytes_fp32"] == 4 * info["trainable_params"]
    assert info["crop_size"] == [512, 512] and info["images_per_rank"] == 8
    assert info["forward_gmacs_per_image"] > 100  # SwinV2-B + UperNet at 512x512
    assert info["config_file"].endswith("configs/thesis.py")


def test_describe_json_is_the_whole_stdout_in_a_fresh_process(tmp_path):
    """stdout of ``describe --json`` is JSON and nothing else, even with DeepSpeed installed on
    a machine without a GPU (its import-time warning went to stdout and broke the JSON)."""
    proc = subprocess.run(
        [sys.executable, "-m", "swinkit", "describe", "--preset", "test", "--json",
         "--data-root", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["preset"] == "test"


def test_train_prints_iterations(capsys, data_root):
    assert main(["train", "--preset", "test", "--iters", "3", "--data-root", str(data_root)]) == 0
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if line.startswith("iter ")]) == 3
    assert "median iteration" in out


def test_verify_data_exit_codes(capsys, data_copy):
    assert main(["verify-data", "--data-root", str(data_copy)]) == 0
    bad = sorted((data_copy / "images" / "training").glob("*.jpg"))[2]
    bad.write_bytes(b"garbage")
    assert main(["verify-data", "--data-root", str(data_copy)]) == 1
    assert str(bad) in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["describe", "--cfg-options", "images_per_rank=0"], "images_per_rank"),
    (["train", "--preset", "test", "--data-root", "/nonexistent/ade"], "python -m swinkit make-data"),
    (["train", "--preset", "test", "--iters", "0"], "iters must be >= 1"),
])
def test_bad_input_exits_2_with_the_field(capsys, argv, message):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_unknown_preset_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["describe", "--preset", "huge"])
    assert info.value.code == 2


# --- swinkit ddp around its launch: the same messages and exit codes with or without --engine
# (swinkit/cli/launch.py serves both); the launch itself is replaced, so nothing starts here.

DDP = ["ddp", "--preset", "test", "--world-size", "1"]
ENGINE = [*DDP, "--engine", "ddp", "--grad-accum", "2"]  # the engine path (swinkit.cli.engines)
LAUNCHERS = {"ddp": ("swinkit.runs.ddp_run", "run_ddp"),
             "engine": ("swinkit.runs.engine_run", "run_engine")}


def _replace_launch(monkeypatch, which, outcome):
    import importlib

    def launch(spec, quiet=False):
        if isinstance(outcome, Exception):
            raise outcome
        return outcome
    module, name = LAUNCHERS[which]
    monkeypatch.setattr(importlib.import_module(module), name, launch)


@pytest.mark.parametrize("which, argv, label", [
    ("ddp", DDP, "swinkit ddp"), ("engine", ENGINE, "swinkit ddp --engine ddp")])
def test_ddp_failed_launch_exits_1_with_the_diagnosis(monkeypatch, capsys, tmp_path, which, argv,
                                                      label):
    from swinkit.launch import LaunchError
    from swinkit.launch.diagnose import Diagnosis
    failure = LaunchError(Diagnosis("raised", 1, "rank 1 raised ZeroDivisionError", "Traceback x"))
    _replace_launch(monkeypatch, which, failure)
    out = tmp_path / "r.json"
    assert main([*argv, "--json", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{label}: FAILED: rank 1 raised ZeroDivisionError\nTraceback x\n" in err
    assert not out.exists()


@pytest.mark.parametrize("which, argv", [("ddp", DDP), ("engine", ENGINE)])
def test_ddp_node_without_rank_0_exits_0_and_says_so(monkeypatch, capsys, tmp_path, which, argv):
    _replace_launch(monkeypatch, which, None)
    out = tmp_path / "r.json"
    assert main([*argv, "--json", str(out)]) == 0
    assert capsys.readouterr().out.endswith(
        "this node's ranks finished; the node that hosted rank 0 reports the results\n")
    assert not out.exists()


def test_ddp_result_is_written_and_reported(monkeypatch, capsys, tmp_path):
    _replace_launch(monkeypatch, "ddp", {"iter_s": 0.25})
    out = tmp_path / "r.json"
    assert main([*DDP, "--bare", "--json", str(out)]) == 0
    assert json.loads(out.read_text()) == {"iter_s": 0.25}
    assert capsys.readouterr().out.endswith(
        f"median iteration 0.2500 s (bare loop)\nresult written to {out}\n")


def test_a_torch_newer_than_tested_warns_and_an_older_than_supported_is_refused(monkeypatch, capsys):
    """Users arrive with their own torch: above the newest tested release the command runs and
    says so; below the oldest supported it stops with exit 2 naming the version."""
    import torch

    from swinkit.cli import main
    monkeypatch.setattr(torch, "__version__", "2.16.0+cu132")
    monkeypatch.setattr("swinkit.cli.commands.COMMANDS", {"describe": lambda args: 0})
    assert main(["describe", "--preset", "test"]) == 0
    err = capsys.readouterr().err
    assert "warning: torch 2.16.0+cu132 is newer than the newest release swinkit is tested with" in err
    monkeypatch.setattr(torch, "__version__", "2.4.1")
    assert main(["describe", "--preset", "test"]) == 2
    assert "torch 2.4.1 is older than swinkit supports (2.5 or newer)" in capsys.readouterr().err
