"""Real NVIDIA GPUs through NVML (the nvidia-ml-py package, module ``pynvml``).

``pynvml`` is imported inside functions: importing Rota must work on machines without a
driver, and tests swap in a fake module through ``sys.modules``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from rota.devices.base import GpuReading
from rota.errors import DeviceError

log = logging.getLogger(__name__)

def _pynvml() -> Any:
    """The pynvml module, or DeviceError when nvidia-ml-py is not installed."""
    try:
        import pynvml
    except ImportError as exc:
        raise DeviceError(f"nvidia-ml-py is not installed ({exc})") from exc
    return pynvml


def _text(value: Any) -> str:
    """NVML strings come back as bytes on older nvidia-ml-py releases."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _is_not_supported(nv: Any, exc: BaseException) -> bool:
    """True for NVML 'Not Supported': a missing feature, not a sick GPU."""
    return getattr(exc, "value", None) == getattr(nv, "NVML_ERROR_NOT_SUPPORTED", 3)


class NvmlDevices:
    """A :class:`~rota.devices.base.DeviceSource` over the GPUs the NVIDIA driver sees.

    Build it with :meth:`open`. One sick GPU never breaks a read: it is reported with
    ``healthy=False`` so the scheduler stops placing on it and recovery can act.
    """

    kind = "nvml"

    def __init__(self, nvml: Any) -> None:
        """Use :meth:`open`; this takes an already initialised pynvml module."""
        self._nv = nvml
        self._lock = threading.Lock()
        self._closed = False
        # uuid and name per index from the last good read, so a lost GPU keeps its identity
        self._identity: dict[int, tuple[str, str]] = {}

    @classmethod
    def open(cls) -> NvmlDevices:
        """Initialise NVML; DeviceError (original NVMLError as __cause__) if unavailable."""
        nv = _pynvml()
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise DeviceError(f"cannot initialise NVML: {exc}") from exc
        return cls(nv)

    def device_count(self) -> int:
        """Number of GPUs the driver lists right now."""
        nv = self._nv
        try:
            return int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as exc:
            raise DeviceError(f"NVML could not count GPUs: {exc}") from exc

    def read(self) -> list[GpuReading]:
        """One reading per GPU index; a GPU whose queries fail is reported unhealthy."""
        with self._lock:
            if self._closed:
                raise DeviceError("NVML device source is closed")
            return [self._read_one(i) for i in range(self.device_count())]

    def close(self) -> None:
        """Shut NVML down once; later calls are no-ops and a failing shutdown is only
        logged, so daemon shutdown paths can call this freely."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            nv = self._nv
            try:
                nv.nvmlShutdown()
            except nv.NVMLError as exc:
                log.warning("NVML shutdown failed: %s", exc)

    def describe(self) -> str:
        """Short text for people, e.g. '2 NVIDIA GPUs (NVML): NVIDIA A100 x2'."""
        readings = self.read()
        names: dict[str, int] = {}
        for r in readings:
            names[r.name] = names.get(r.name, 0) + 1
        n = len(readings)
        kinds = ", ".join(f"{name} x{c}" for name, c in names.items())
        return f"{n} NVIDIA GPU{'' if n == 1 else 's'} (NVML): {kinds}"

    # -- helpers -----------------------------------------------------------------------

    def _read_one(self, index: int) -> GpuReading:
        nv = self._nv
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nv.nvmlDeviceGetUUID(handle))
            name = _text(nv.nvmlDeviceGetName(handle))
            self._identity[index] = (uuid, name)
            mem = nv.nvmlDeviceGetMemoryInfo(handle)
            util = nv.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
            temperature = self._optional(
                lambda: float(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)))
            processes: dict[int, int] = {}
            for query in (nv.nvmlDeviceGetComputeRunningProcesses,
                          nv.nvmlDeviceGetGraphicsRunningProcesses):
                for proc in self._optional(lambda q=query: list(q(handle))) or []:
                    used = int(getattr(proc, "usedGpuMemory", None) or 0)
                    # a process in both lists is one allocation, not two
                    processes[int(proc.pid)] = max(processes.get(int(proc.pid), 0), used)
        except nv.NVMLError:
            uuid, name = self._identity.get(index, (f"GPU-unknown-{index}", "unknown GPU"))
            return GpuReading(index=index, uuid=uuid, name=name, memory_total=0,
                              memory_used=0, utilization=0.0, healthy=False)
        return GpuReading(
            index=index,
            uuid=uuid,
            name=name,
            memory_total=int(mem.total),
            memory_used=int(mem.used),
            utilization=max(0.0, min(1.0, float(util))),
            healthy=True,
            temperature_c=temperature,
            process_memory=processes,
        )

    def _optional(self, query: Any) -> Any:
        """Run a query some GPUs do not support; None when unsupported, raise otherwise."""
        nv = self._nv
        try:
            return query()
        except nv.NVMLError as exc:
            if _is_not_supported(nv, exc):
                return None
            raise
