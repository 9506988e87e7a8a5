"""The swinkit CLI: describe, train, verify-data, and bad input with exit code 2."""
import json

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
