"""Presets load, derive their crop-sized parts, and reject bad input naming the field."""
import pytest

from swinkit.config import PRESETS, config_path, load_config, workload


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_loads(preset, tmp_path):
    cfg = load_config(preset, tmp_path)
    assert config_path(preset).is_file()
    crop = tuple(cfg.crop_size)
    assert cfg.model.data_preprocessor.size == crop
    steps = {s["type"]: s for s in cfg.train_dataset.pipeline}
    assert tuple(steps["RandomCrop"]["crop_size"]) == crop
    assert cfg.train_dataset.data_root == str(tmp_path)


def test_thesis_preset_is_the_thesis_run(tmp_path):
    cfg = load_config("thesis", tmp_path)
    w = workload(cfg)
    assert (w.arch, w.window_size, w.crop_size, w.images_per_rank) == ("B", 16, (512, 512), 8)
    assert cfg.model.decode_head.norm_cfg["type"] == "SyncBN"
    assert cfg.optim_wrapper.optimizer["lr"] == 6e-5
    assert cfg.optim_wrapper.optimizer["weight_decay"] == 0.01
    assert cfg.param_scheduler[-1]["type"] == "PolyLR"


def test_cpu_runs_replace_syncbn_by_bn(tmp_path):
    cfg = load_config("thesis", tmp_path, device="cpu")
    assert cfg.model["decode_head"]["norm_cfg"]["type"] == "BN"
    assert cfg.model["auxiliary_head"]["norm_cfg"]["type"] == "BN"


@pytest.mark.parametrize("overrides, message", [
    ({"images_per_rank": 0}, "images_per_rank must be an integer >= 1, got 0"),
    ({"images_per_rank": -2}, "images_per_rank"),
    ({"crop_size": (0, 64)}, "crop_size must be an integer >= 1"),
    ({"crop_size": (60, 64)}, r"crop_size \(60, 64\) cannot be taken by the model"),
    ({"crop_size": (16, 16)}, "at least 32"),
    ({"loader_workers": -1}, "loader_workers"),
    ({"device": "tpu"}, "device"),
])
def test_bad_values_name_the_field(overrides, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        load_config("test", tmp_path, overrides)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match="preset must be one of thesis, cpu, test; got 'huge'"):
        load_config("huge")


def test_data_root_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SWINKIT_DATA_ROOT", str(tmp_path))
    assert load_config("test").data_root == str(tmp_path)
