"""NVML sampling finds the GPU that CUDA numbers ``i`` (a stand-in pynvml on CPU), and a
process driving several devices reports each."""
from __future__ import annotations

import time
import types
import warnings

import pytest
import torch

from swinkit.measure.samplers import (NvmlSampler, NvmlSamplers, nvml_handle, pci_bus_id,
                                      uuid_candidates, visibility_is_identity)

# A node of 8 GPUs as NVML sees them (PCI order); the job sees physical 4 and 5.
NODE = [{"uuid": f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd", "bus": (0, 0x10 + i, 0),
         "util": 10 * i, "mem_mib": 1000 * i} for i in range(8)]


class FakeNVMLError(Exception):
    pass


def fake_pynvml(node=NODE, str_uuids: bool = True, by_uuid: bool = True):
    """A pynvml stand-in over ``node``. ``str_uuids=False``: the lookup accepts bytes only,
    as older bindings passing the argument to ctypes unchanged do."""
    nvml = types.SimpleNamespace(NVMLError=FakeNVMLError, nvmlInit=lambda: None)

    def by_index(i):
        return node[i]

    def by_uuid_fn(uuid):
        if isinstance(uuid, str) and not str_uuids:
            raise TypeError("bytes or integer address expected instead of str instance")
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for dev in node:
            if dev["uuid"] == text:
                return dev
        raise FakeNVMLError("Not Found")

    def by_bus(bus):
        for dev in node:
            if bus.upper() == "{:08X}:{:02X}:{:02X}.0".format(*dev["bus"]):
                return dev
        raise FakeNVMLError("Not Found")

    nvml.nvmlDeviceGetHandleByIndex = by_index
    if by_uuid:
        nvml.nvmlDeviceGetHandleByUUID = by_uuid_fn
    else:  # a driver that knows the device by bus id only
        def not_supported(uuid):
            raise FakeNVMLError("Not Supported")
        nvml.nvmlDeviceGetHandleByUUID = not_supported
    nvml.nvmlDeviceGetHandleByPciBusId = by_bus
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=h["util"])
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=h["mem_mib"] * 2**20)
    return nvml


def visible_properties(physical):
    """torch.cuda.get_device_properties over the visible devices: CUDA index -> physical
    GPU's properties (bare UUID, as torch prints it; PCI ids)."""
    def props(i):
        dev = NODE[physical[i]]
        domain, bus, device = dev["bus"]
        return types.SimpleNamespace(uuid=dev["uuid"][len("GPU-"):], pci_domain_id=domain,
                                     pci_bus_id=bus, pci_device_id=device)
    return props


SLURM = {"CUDA_VISIBLE_DEVICES": "4,5"}


def wait_until(condition, limit_s: float = 10.0) -> None:
    """Until the sampler thread has taken its first sample (at once, on start) or failed."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the sampler thread took no sample")
        time.sleep(0.001)


def test_cuda_device_0_is_the_visible_gpu_not_nvml_index_0():
    props = visible_properties([4, 5])
    for cuda_index, physical in ((0, 4), (1, 5)):
        handle, how = nvml_handle(fake_pynvml(), cuda_index, props(cuda_index), SLURM)
        assert handle is NODE[physical]
        assert how == {"cuda_index": cuda_index, "lookup": "uuid", "id": NODE[physical]["uuid"]}


def test_bytes_only_bindings_get_the_uuid_as_bytes():
    handle, how = nvml_handle(fake_pynvml(str_uuids=False), 0, visible_properties([4, 5])(0), SLURM)
    assert handle is NODE[4] and how["lookup"] == "uuid"


def test_pci_bus_id_when_the_uuid_is_not_found():
    handle, how = nvml_handle(fake_pynvml(by_uuid=False), 1, visible_properties([4, 5])(1), SLURM)
    assert handle is NODE[5]
    assert how == {"cuda_index": 1, "lookup": "pci_bus_id", "id": "00000000:15:00.0"}


def test_never_the_bare_index_under_renumbered_visibility():
    bare = types.SimpleNamespace(uuid=None)  # properties with no UUID and no PCI ids
    with pytest.raises(LookupError, match="CUDA_VISIBLE_DEVICES='4,5'"):
        nvml_handle(fake_pynvml(), 0, bare, SLURM)
    handle, how = nvml_handle(fake_pynvml(), 1, bare, {})  # identity: the index is the device
    assert handle is NODE[1] and how["lookup"] == "index"


@pytest.mark.parametrize("uuid, expected", [
    ("6a3c-1", ["GPU-6a3c-1", "MIG-6a3c-1"]),
    (b"GPU-6a3c-1", ["GPU-6a3c-1"]),
    ("MIG-6a3c-1", ["MIG-6a3c-1"]),
])
def test_uuid_spellings(uuid, expected):
    assert uuid_candidates(uuid) == expected


def test_pci_bus_id_format_and_missing_fields():
    props = types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0x3B, pci_device_id=0)
    assert pci_bus_id(props) == "00000000:3B:00.0"
    assert pci_bus_id(types.SimpleNamespace(pci_bus_id=1)) is None


@pytest.mark.parametrize("env, identity", [
    ({}, True), ({"CUDA_VISIBLE_DEVICES": "0,1"}, True), ({"CUDA_VISIBLE_DEVICES": "0"}, True),
    ({"CUDA_VISIBLE_DEVICES": "1,0"}, False), ({"CUDA_VISIBLE_DEVICES": "4,5"}, False),
    ({"CUDA_VISIBLE_DEVICES": "GPU-0000"}, False),
])
def test_visibility_identity(env, identity):
    assert visibility_is_identity(env) is identity


def test_sampler_reports_the_visible_gpu():
    sampler = NvmlSampler(0, interval_s=0.001, nvml=fake_pynvml(),
                          properties=visible_properties([4, 5]), env=SLURM)
    sampler.start()
    wait_until(lambda: sampler.samples or sampler.error)
    figures = sampler.stop()
    assert figures["gpu_util_percent"] == 40.0 and figures["gpu_mem_used_mib"] == 4000.0
    assert figures["nvml_device"]["lookup"] == "uuid" and figures["nvml_error"] is None


def test_every_device_is_reported_under_its_cuda_index():
    samplers = NvmlSamplers([0, 1], interval_s=0.001, nvml=fake_pynvml(),
                            properties=visible_properties([4, 5]), env=SLURM)
    samplers.start()
    wait_until(lambda: all(s.samples or s.error for s in samplers.samplers.values()))
    figures = samplers.stop()
    per_device = {i: d["gpu_util_percent"] for i, d in figures["devices"].items()}
    assert per_device == {"0": 40.0, "1": 50.0}
    assert figures["gpu_util_percent"] == 45.0 and figures["gpu_mem_used_mib"] == 5000.0


def test_several_devices_without_nvml_warn_once():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: NVML works here")
    samplers = NvmlSamplers([0, 1])
    samplers.start()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figures = samplers.stop()
    assert figures["gpu_util_percent"] is None and set(figures["devices"]) == {"0", "1"}
    assert len([w for w in caught if "GPU utilisation not recorded" in str(w.message)]) == 1


@pytest.mark.gpu
def test_real_nvml_finds_every_visible_device_by_uuid():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pynvml = pytest.importorskip("pynvml")
    pynvml.nvmlInit()
    for i in range(torch.cuda.device_count()):
        handle, how = nvml_handle(pynvml, i, torch.cuda.get_device_properties(i))
        assert how["lookup"] == "uuid"
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        assert uuid.endswith(str(torch.cuda.get_device_properties(i).uuid))
