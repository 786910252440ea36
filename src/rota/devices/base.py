"""What every GPU source (NVML, simulated) reports, and the protocol they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU as seen right now."""

    index: int
    uuid: str
    name: str
    memory_total: int  # bytes
    memory_used: int  # bytes used by every process on it, Rota's and others'
    utilization: float  # 0..1, compute
    healthy: bool = True
    temperature_c: float | None = None
    # pid -> bytes of GPU memory, for every process the driver lists on this GPU
    process_memory: dict[int, int] = field(default_factory=dict)


class DeviceSource(Protocol):
    """A source of GPU readings. ``read`` is cheap enough to call a few times a second."""

    kind: str  # "nvml" | "simulated"

    def read(self) -> list[GpuReading]:
        """Current readings, one per GPU present; a vanished GPU is simply absent."""
        ...

    def close(self) -> None: ...
