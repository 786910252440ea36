"""A fake ``pynvml`` module: the NVML calls Rota makes, answered from plain data.

Injected with ``monkeypatch.setitem(sys.modules, "pynvml", fake)`` so the lazy
``import pynvml`` inside rota.devices.nvml picks it up.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15


class NVMLError(Exception):
    """Like pynvml.NVMLError: carries the NVML return code in ``value``."""

    _names = {
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    }

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return self._names.get(self.value, f"NVML Error with code {self.value}")


class NVMLError_NotSupported(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_NOT_SUPPORTED)


class NVMLError_DriverNotLoaded(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_DRIVER_NOT_LOADED)


class NVMLError_LibraryNotFound(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_LIBRARY_NOT_FOUND)


class NVMLError_GpuIsLost(NVMLError):
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_GPU_IS_LOST)


@dataclass
class FakeGpu:
    uuid: str
    name: str | bytes
    total: int
    used: int
    util_pct: int
    temperature: int | None = 40  # None: sensor not supported
    compute: list[tuple[int, int | None]] = field(default_factory=list)
    graphics: list[tuple[int, int | None]] | None = field(default_factory=list)  # None: n/s
    lost: bool = False


class FakeNvml:
    """Stands in for the pynvml module; attributes mirror its names."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_TEMPERATURE_GPU = 0
    Gpu = FakeGpu  # so tests can build GPUs without importing conftest

    def __init__(self, gpus: list[FakeGpu] | None = None) -> None:
        self.gpus = list(gpus or [])
        self.init_error: NVMLError | None = None
        self.count_error: NVMLError | None = None
        self.init_calls = 0
        self.shutdown_calls = 0

    # lifecycle
    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    # devices
    def nvmlDeviceGetCount(self) -> int:
        if self.count_error is not None:
            raise self.count_error
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def _live(self, handle: FakeGpu) -> FakeGpu:
        if handle.lost:
            raise NVMLError_GpuIsLost()
        return handle

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return self._live(handle).uuid

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str | bytes:
        return self._live(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> Any:
        g = self._live(handle)
        return SimpleNamespace(total=g.total, used=g.used, free=g.total - g.used)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> Any:
        return SimpleNamespace(gpu=self._live(handle).util_pct, memory=0)

    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        g = self._live(handle)
        if g.temperature is None:
            raise NVMLError_NotSupported()
        return g.temperature

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu) -> list[Any]:
        g = self._live(handle)
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in g.compute]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeGpu) -> list[Any]:
        g = self._live(handle)
        if g.graphics is None:
            raise NVMLError_NotSupported()
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in g.graphics]


GIB = 1 << 30


def two_gpus() -> list[FakeGpu]:
    """An A100 running two jobs and a lost-prone second GPU."""
    return [
        FakeGpu(uuid="GPU-aaaa", name=b"NVIDIA A100-SXM4-80GB", total=80 * GIB,
                used=30 * GIB, util_pct=37, temperature=61,
                compute=[(1234, 20 * GIB), (5678, None)], graphics=[(4321, 1 * GIB)]),
        FakeGpu(uuid="GPU-bbbb", name="NVIDIA A100-SXM4-80GB", total=80 * GIB,
                used=0, util_pct=0, temperature=35),
    ]


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNvml]:
    """A fake pynvml with two GPUs, installed as ``sys.modules['pynvml']``."""
    fake = FakeNvml(two_gpus())
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    yield fake
