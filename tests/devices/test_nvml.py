"""NVML source against a fake pynvml (see conftest.py), plus the real library here."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from rota.devices.base import DeviceSource
from rota.devices.nvml import NvmlDevices
from rota.errors import DeviceError

GIB = 1 << 30


def test_read_maps_every_field(fake_nvml: Any) -> None:
    source: DeviceSource = NvmlDevices.open()
    assert source.kind == "nvml"
    assert fake_nvml.init_calls == 1
    a, b = source.read()

    assert a.index == 0
    assert a.uuid == "GPU-aaaa"
    assert a.name == "NVIDIA A100-SXM4-80GB"  # bytes decoded
    assert a.memory_total == 80 * GIB
    assert a.memory_used == 30 * GIB
    assert a.utilization == pytest.approx(0.37)
    assert a.temperature_c == 61.0
    assert a.healthy is True
    # compute and graphics processes together; usedGpuMemory None counts as 0
    assert a.process_memory == {1234: 20 * GIB, 5678: 0, 4321: 1 * GIB}

    assert (b.index, b.uuid, b.memory_used, b.utilization) == (1, "GPU-bbbb", 0, 0.0)
    assert b.process_memory == {}
    assert b.healthy is True


def test_process_in_both_lists_is_counted_once(fake_nvml: Any) -> None:
    fake_nvml.gpus[1].compute = [(77, 3 * GIB)]
    fake_nvml.gpus[1].graphics = [(77, 3 * GIB)]
    assert NvmlDevices.open().read()[1].process_memory == {77: 3 * GIB}


def test_lost_gpu_is_reported_unhealthy_not_raised(fake_nvml: Any) -> None:
    devices = NvmlDevices.open()
    devices.read()  # a good read first: the lost GPU keeps its identity
    fake_nvml.gpus[0].lost = True
    a, b = devices.read()
    assert a.healthy is False
    assert (a.memory_total, a.memory_used, a.utilization) == (0, 0, 0.0)
    assert a.process_memory == {}
    assert (a.index, a.uuid, a.name) == (0, "GPU-aaaa", "NVIDIA A100-SXM4-80GB")
    assert b.healthy is True and b.memory_total == 80 * GIB


def test_gpu_lost_before_first_read_gets_placeholder_identity(fake_nvml: Any) -> None:
    fake_nvml.gpus.append(fake_nvml.Gpu(uuid="GPU-cccc", name="H100", total=80 * GIB,
                                        used=0, util_pct=0, lost=True))
    readings = NvmlDevices.open().read()
    assert [r.healthy for r in readings] == [True, True, False]
    assert readings[2].uuid == "GPU-unknown-2"
    assert readings[2].memory_total == 0


def test_unsupported_queries_do_not_make_a_gpu_unhealthy(fake_nvml: Any) -> None:
    fake_nvml.gpus[0].temperature = None
    fake_nvml.gpus[0].graphics = None
    a = NvmlDevices.open().read()[0]
    assert a.healthy is True
    assert a.temperature_c is None
    assert a.process_memory == {1234: 20 * GIB, 5678: 0}
    assert a.memory_used == 30 * GIB


def test_open_translates_library_not_found(fake_nvml: Any) -> None:
    fake_nvml.init_error = fake_nvml.NVMLError_LibraryNotFound()
    with pytest.raises(DeviceError, match="NVML Shared Library Not Found") as info:
        NvmlDevices.open()
    assert isinstance(info.value.__cause__, fake_nvml.NVMLError_LibraryNotFound)


def test_open_without_nvidia_ml_py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    with pytest.raises(DeviceError, match="nvidia-ml-py") as info:
        NvmlDevices.open()
    assert isinstance(info.value.__cause__, ImportError)


def test_count_failure_is_a_device_error(fake_nvml: Any) -> None:
    devices = NvmlDevices.open()
    fake_nvml.count_error = fake_nvml.NVMLError_DriverNotLoaded()
    with pytest.raises(DeviceError, match="Driver Not Loaded") as info:
        devices.read()
    assert isinstance(info.value.__cause__, fake_nvml.NVMLError)


def test_close_shuts_down_once(fake_nvml: Any) -> None:
    devices = NvmlDevices.open()
    devices.close()
    devices.close()
    assert fake_nvml.shutdown_calls == 1
    with pytest.raises(DeviceError, match="closed"):
        devices.read()


def test_describe_counts_models(fake_nvml: Any) -> None:
    assert NvmlDevices.open().describe() == "2 NVIDIA GPUs (NVML): NVIDIA A100-SXM4-80GB x2"


def test_real_library_on_this_machine() -> None:
    """No fake: without a driver the real pynvml error must become a DeviceError;
    with one (a GPU machine), the readings must be sane."""
    import pynvml

    try:
        devices = NvmlDevices.open()
    except DeviceError as exc:
        assert isinstance(exc.__cause__, pynvml.NVMLError)
        return
    try:
        readings = devices.read()
        assert [r.index for r in readings] == list(range(len(readings)))
        for r in readings:
            assert r.uuid.startswith(("GPU-", "MIG-"))
            assert r.name
            if r.healthy:
                assert r.memory_total > 0
                assert 0 <= r.memory_used <= r.memory_total
                assert 0.0 <= r.utilization <= 1.0
    finally:
        devices.close()
