"""Simulated GPUs: what machines without GPUs, every test and the demo schedule onto.

Memory and utilisation follow the jobs placed on them, so the daemon's control loop sees
the same kind of feedback a real GPU gives. Faults (unhealthy, vanished GPUs) and processes
Rota did not start can be injected to exercise recovery and the no-over-commit invariant.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from rota.devices.base import GpuReading
from rota.errors import DeviceError, InvalidSpec
from rota.units import format_memory, parse_memory

GIB = 1 << 30
DEFAULT_GPU_MEMORY = 24 * GIB
MAX_GPUS = 1024
#: pid reported for memory taken by processes Rota did not start: EXTERNAL_PID_BASE + index.
EXTERNAL_PID_BASE = 900_000

_SPEC_FORM = "like 4x24G, 8x80G, 2x24G,1x48G or 2 (meaning 2x24G)"
_ITEM_RE = re.compile(r"^\s*(\d+)\s*(?:[xX]\s*(\S.*?))?\s*$")


def parse_sim_spec(text: str) -> list[int]:
    """'4x24G' / '2x24G,1x48G' / '2' -> memory size in bytes of each simulated GPU.

    The same text is accepted by ``--simulate`` and the config, so errors name the value
    and the expected form rather than failing deep inside the daemon.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidSpec(f"simulate: empty GPU spec {text!r}; expected {_SPEC_FORM}",
                          field="simulate")
    sizes: list[int] = []
    for item in text.split(","):
        m = _ITEM_RE.match(item)
        if not m:
            raise InvalidSpec(
                f"simulate: cannot read {item.strip()!r} in {text!r} as a GPU group; "
                f"expected {_SPEC_FORM}", field="simulate")
        count = int(m.group(1))
        if count < 1:
            raise InvalidSpec(
                f"simulate: {item.strip()!r} in {text!r} asks for {count} GPUs; "
                f"a group needs at least 1", field="simulate")
        if m.group(2) is None:
            size = DEFAULT_GPU_MEMORY
        else:
            try:
                size = parse_memory(m.group(2), field="simulate")
            except InvalidSpec:
                raise InvalidSpec(
                    f"simulate: cannot read {m.group(2)!r} in {text!r} as a memory size; "
                    f"expected {_SPEC_FORM}", field="simulate") from None
            if size <= 0:
                raise InvalidSpec(
                    f"simulate: GPU memory must be positive, got {m.group(2)!r} in {text!r}",
                    field="simulate")
        if len(sizes) + count > MAX_GPUS:
            raise InvalidSpec(
                f"simulate: {text!r} asks for more than {MAX_GPUS} GPUs", field="simulate")
        sizes.extend([size] * count)
    return sizes


def format_sim_spec(sizes: Sequence[int]) -> str:
    """Inverse of :func:`parse_sim_spec`: runs of equal sizes -> '2x24G,1x48G'."""
    groups: list[tuple[int, int]] = []
    for size in sizes:
        if groups and groups[-1][1] == size:
            groups[-1] = (groups[-1][0] + 1, size)
        else:
            groups.append((1, size))
    return ",".join(f"{n}x{format_memory(size)}" for n, size in groups)


def sim_uuid(index: int) -> str:
    """Deterministic uuid so a simulated GPU keeps its identity across daemon restarts."""
    return f"GPU-sim-00000000-0000-0000-0000-{index:012d}"


def _gib_text(size: int) -> str:
    return f"{size / GIB:g} GiB"


@dataclass(slots=True)
class _Placement:
    gpus: tuple[int, ...]
    fraction: float
    mem_bytes: int | None
    pid: int | None


@dataclass(slots=True)
class _Gpu:
    total: int
    healthy: bool = True
    present: bool = True
    external_mem: int = 0
    external_util: float = 0.0
    utilization: float | None = None  # set by hand: reported as is, whatever runs there


class SimulatedDevices:
    """A :class:`~rota.devices.base.DeviceSource` whose GPUs exist only in memory.

    All methods take one lock: the daemon reads from its monitor thread while the
    launcher places and releases jobs from others.
    """

    kind = "simulated"

    def __init__(self, spec: str | Sequence[int] = "4x24G") -> None:
        if isinstance(spec, str):
            sizes = parse_sim_spec(spec)
        else:
            sizes = [int(s) for s in spec]
            if not sizes or len(sizes) > MAX_GPUS:
                raise InvalidSpec(
                    f"simulate: need between 1 and {MAX_GPUS} GPUs, got {len(sizes)}",
                    field="simulate")
            if any(s <= 0 for s in sizes):
                raise InvalidSpec(f"simulate: GPU memory must be positive, got {sizes}",
                                  field="simulate")
        self._gpus = [_Gpu(total=s) for s in sizes]
        self._spec = format_sim_spec(sizes)
        self._placements: dict[str, _Placement] = {}
        self._lock = threading.Lock()

    # -- description -------------------------------------------------------------------

    @property
    def gpu_count(self) -> int:
        """Number of GPUs this source was built with, present or not."""
        return len(self._gpus)

    @property
    def spec(self) -> str:
        """Normalised spec text, e.g. '2x24G,1x48G'."""
        return self._spec

    def describe(self) -> str:
        """Short text for people, e.g. '4 simulated GPUs (4x24G)'."""
        n = len(self._gpus)
        return f"{n} simulated GPU{'' if n == 1 else 's'} ({self._spec})"

    # -- jobs ----------------------------------------------------------------------------

    def place(self, key: str, gpu_indices: list[int], fraction: float,
              mem_bytes: int | None, pid: int | None = None) -> None:
        """Account a job on these GPUs; placing a known key again replaces its placement.

        ``fraction`` is the share of each GPU's compute; ``mem_bytes`` the memory reserved
        per GPU (the job is taken to use 90% of it), or None to derive usage from fraction.
        """
        if not gpu_indices:
            raise DeviceError(f"simulated placement {key!r}: no GPU indices given")
        if len(set(gpu_indices)) != len(gpu_indices):
            raise DeviceError(f"simulated placement {key!r}: GPU indices repeat: {gpu_indices}")
        if not 0.0 < fraction <= 1.0:
            raise DeviceError(
                f"simulated placement {key!r}: fraction must be in (0, 1], got {fraction}")
        if mem_bytes is not None and mem_bytes < 0:
            raise DeviceError(
                f"simulated placement {key!r}: memory cannot be negative, got {mem_bytes}")
        with self._lock:
            for i in gpu_indices:
                gpu = self._gpu(i)
                if not gpu.present:
                    raise DeviceError(
                        f"simulated placement {key!r}: GPU {i} is not present (removed)")
            self._placements[key] = _Placement(tuple(gpu_indices), fraction, mem_bytes, pid)

    def release(self, key: str) -> bool:
        """Forget a job's placement; True if it was placed. Releasing twice is harmless
        because exit handling and recovery may both release the same job."""
        with self._lock:
            return self._placements.pop(key, None) is not None

    def placed_keys(self) -> list[str]:
        """Keys of jobs currently placed, in placement order."""
        with self._lock:
            return list(self._placements)

    # -- outside world and faults --------------------------------------------------------

    def set_external(self, index: int, mem_bytes: int, util: float) -> None:
        """Pretend a process Rota did not start uses this memory and compute share."""
        if mem_bytes < 0:
            raise DeviceError(f"simulated GPU {index}: external memory cannot be negative")
        if not 0.0 <= util <= 1.0:
            raise DeviceError(
                f"simulated GPU {index}: external utilisation must be in [0, 1], got {util}")
        with self._lock:
            gpu = self._gpu(index)
            gpu.external_mem = int(mem_bytes)
            gpu.external_util = float(util)

    def set_utilization(self, index: int, util: float | None) -> None:
        """Report this utilisation (0..1) for the GPU whatever runs on it, as a job that
        holds a GPU and does nothing (or busy work Rota does not see); None: it follows
        its jobs again. Tests and demos of idle GPUs (rota.core.idle) drive it."""
        if util is not None and not 0.0 <= util <= 1.0:
            raise DeviceError(
                f"simulated GPU {index}: utilisation must be in [0, 1], got {util}")
        with self._lock:
            self._gpu(index).utilization = None if util is None else float(util)

    def set_health(self, index: int, healthy: bool) -> None:
        """Mark a GPU (un)healthy, like a GPU reporting Xid errors."""
        with self._lock:
            self._gpu(index).healthy = healthy

    def remove(self, index: int) -> None:
        """Make a GPU vanish from :meth:`read`, like a GPU that fell off the bus."""
        with self._lock:
            self._gpu(index).present = False

    def restore(self, index: int) -> None:
        """Undo :meth:`remove`, :meth:`set_health` and :meth:`set_utilization`: the GPU is
        back, healthy, its utilisation following its jobs."""
        with self._lock:
            gpu = self._gpu(index)
            gpu.present = True
            gpu.healthy = True
            gpu.utilization = None

    # -- DeviceSource ------------------------------------------------------------------

    def read(self) -> list[GpuReading]:
        """Readings for every present GPU, computed from placements and injected state."""
        with self._lock:
            mem_used = [g.external_mem for g in self._gpus]
            frac_sum = [0.0] * len(self._gpus)
            procs: list[dict[int, int]] = [{} for _ in self._gpus]
            for p in self._placements.values():
                for i in p.gpus:
                    total = self._gpus[i].total
                    use = (int(0.9 * p.mem_bytes) if p.mem_bytes is not None
                           else int(p.fraction * 0.5 * total))
                    mem_used[i] += use
                    frac_sum[i] += p.fraction
                    if p.pid is not None:
                        procs[i][p.pid] = procs[i].get(p.pid, 0) + use
            out: list[GpuReading] = []
            for i, g in enumerate(self._gpus):
                if not g.present:
                    continue
                if g.external_mem > 0:
                    procs[i][EXTERNAL_PID_BASE + i] = g.external_mem
                util = min(1.0, frac_sum[i] * 0.95 + g.external_util) \
                    if g.utilization is None else g.utilization
                out.append(GpuReading(
                    index=i,
                    uuid=sim_uuid(i),
                    name=f"Rota simulated GPU ({_gib_text(g.total)})",
                    memory_total=g.total,
                    memory_used=min(g.total, mem_used[i]),
                    utilization=util,
                    healthy=g.healthy,
                    temperature_c=round(35.0 + 45.0 * util, 1),
                    process_memory=procs[i],
                ))
            return out

    def close(self) -> None:
        """Nothing to free; present for the protocol."""

    # -- helpers -----------------------------------------------------------------------

    def _gpu(self, index: int) -> _Gpu:
        """The GPU at ``index``; caller holds the lock."""
        if isinstance(index, bool) or not isinstance(index, int) or not (
                0 <= index < len(self._gpus)):
            raise DeviceError(
                f"simulated GPU {index!r} does not exist; this source has "
                f"{len(self._gpus)} GPUs (indices 0-{len(self._gpus) - 1})")
        return self._gpus[index]
