"""Choosing the device source: real NVML when it works, simulated otherwise."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from rota.devices.nvml import NvmlDevices
from rota.devices.probe import DEFAULT_SIMULATION, open_devices
from rota.devices.simulated import SimulatedDevices
from rota.errors import InvalidSpec
from rota_testing import nvidia_driver_present


def test_default_simulation_is_four_24g() -> None:
    assert DEFAULT_SIMULATION == "4x24G"


def test_simulate_wins_over_nvml(fake_nvml: Any) -> None:
    source, message = open_devices("2x80G")
    assert isinstance(source, SimulatedDevices)
    assert [r.memory_total for r in source.read()] == [80 << 30, 80 << 30]
    assert message == "Using 2 simulated GPUs (2x80G) (--simulate)."
    assert fake_nvml.init_calls == 0


def test_bad_simulate_value_is_invalid_spec() -> None:
    with pytest.raises(InvalidSpec, match="'lots'"):
        open_devices("lots")


def test_no_driver_on_this_machine_falls_back() -> None:
    """The real pynvml, no fake: this machine has no NVIDIA driver."""
    if nvidia_driver_present():
        pytest.skip("an NVIDIA driver is present here")
    source, message = open_devices(None)
    assert isinstance(source, SimulatedDevices)
    assert source.kind == "simulated"
    assert len(source.read()) == 4
    assert message == ("No NVIDIA GPU found (NVML: NVML Shared Library Not Found); "
                       "using 4 simulated GPUs (4x24G). Use --simulate to choose.")


def test_real_gpus_used_when_driver_present() -> None:
    if not nvidia_driver_present():
        pytest.skip("no NVIDIA driver here")
    source, message = open_devices(None)
    try:
        assert isinstance(source, NvmlDevices)
        assert message.startswith("Using ") and "(NVML)" in message
        assert source.read()
    finally:
        source.close()


def test_fake_nvml_with_gpus_is_used(fake_nvml: Any) -> None:
    source, message = open_devices(None)
    assert isinstance(source, NvmlDevices)
    assert len(source.read()) == 2
    assert message == "Using 2 NVIDIA GPUs (NVML): NVIDIA A100-SXM4-80GB x2."
    assert fake_nvml.shutdown_calls == 0


def test_fake_nvml_with_zero_gpus_falls_back(fake_nvml: Any) -> None:
    fake_nvml.gpus.clear()
    source, message = open_devices(None)
    assert isinstance(source, SimulatedDevices)
    assert message.startswith("No NVIDIA GPU found (NVML: the driver lists 0 GPUs); "
                              "using 4 simulated GPUs (4x24G).")
    assert fake_nvml.shutdown_calls == 1  # NVML not left initialised


def test_driver_not_loaded_falls_back(fake_nvml: Any) -> None:
    fake_nvml.init_error = fake_nvml.NVMLError_DriverNotLoaded()
    source, message = open_devices(None)
    assert isinstance(source, SimulatedDevices)
    assert "(NVML: Driver Not Loaded)" in message
    assert message.endswith("Use --simulate to choose.")


def test_count_failure_after_init_falls_back(fake_nvml: Any) -> None:
    fake_nvml.count_error = fake_nvml.NVMLError_DriverNotLoaded()
    source, message = open_devices(None)
    assert isinstance(source, SimulatedDevices)
    assert "(NVML: Driver Not Loaded)" in message
    assert fake_nvml.shutdown_calls == 1


def test_missing_nvidia_ml_py_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    source, message = open_devices(None)
    assert isinstance(source, SimulatedDevices)
    assert message.startswith("No NVIDIA GPU found (NVML: ")
