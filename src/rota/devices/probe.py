"""Pick the GPU source at start-up: real GPUs when the driver sees some, else simulated.

A machine without NVIDIA GPUs still gets a working Rota (and the demo), and the message
says plainly that the GPUs are simulated so nobody mistakes them for real ones.
"""

from __future__ import annotations

from rota.devices.base import DeviceSource
from rota.devices.nvml import NvmlDevices
from rota.devices.simulated import SimulatedDevices
from rota.errors import DeviceError

DEFAULT_SIMULATION = "4x24G"


def open_devices(simulate: str | None) -> tuple[DeviceSource, str]:
    """The device source to use and a one-line message for people.

    ``simulate`` (the ``--simulate`` value) forces simulated GPUs; a bad value raises
    InvalidSpec. Without it NVML is tried, and any failure or zero GPUs falls back to
    ``DEFAULT_SIMULATION``.
    """
    if simulate is not None:
        sim = SimulatedDevices(simulate)
        return sim, f"Using {sim.describe()} (--simulate)."
    try:
        nvml = NvmlDevices.open()
    except DeviceError as exc:
        return _fallback(_reason(exc))
    try:
        description = nvml.describe()
        count = nvml.device_count()
    except DeviceError as exc:
        nvml.close()
        return _fallback(_reason(exc))
    if count == 0:
        nvml.close()
        return _fallback("the driver lists 0 GPUs")
    return nvml, f"Using {description}."


def _reason(exc: DeviceError) -> str:
    """The underlying library's words when there are some, ours otherwise."""
    return str(exc.__cause__) if exc.__cause__ is not None else str(exc)


def _fallback(reason: str) -> tuple[DeviceSource, str]:
    sim = SimulatedDevices(DEFAULT_SIMULATION)
    return sim, (f"No NVIDIA GPU found (NVML: {reason}); using {sim.describe()}. "
                 f"Use --simulate to choose.")
