"""Simulated GPUs: spec parsing, job-driven memory/utilisation, injected faults."""

from __future__ import annotations

import threading

import pytest

from rota.devices.base import DeviceSource
from rota.devices.simulated import (
    EXTERNAL_PID_BASE,
    MAX_GPUS,
    SimulatedDevices,
    format_sim_spec,
    parse_sim_spec,
)
from rota.errors import DeviceError, InvalidSpec

GIB = 1 << 30


# -- spec parsing --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4x24G", [24 * GIB] * 4),
        ("8x80G", [80 * GIB] * 8),
        ("2x24G,1x48G", [24 * GIB, 24 * GIB, 48 * GIB]),
        ("2", [24 * GIB] * 2),
        ("1", [24 * GIB]),
        (" 2 X 16GiB , 1x512M ", [16 * GIB, 16 * GIB, 512 << 20]),
        ("1x1.5G", [int(1.5 * GIB)]),
        (f"{MAX_GPUS}x24G", [24 * GIB] * MAX_GPUS),
    ],
)
def test_parse_sim_spec_good(text: str, expected: list[int]) -> None:
    assert parse_sim_spec(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("24G", "'24G'"),
        ("4x", "'4x'"),
        ("x24G", "'x24G'"),
        ("4x24Q", "'24Q'"),
        ("4x0G", "must be positive"),
        ("0x24G", "at least 1"),
        ("-1x24G", "'-1x24G'"),
        ("2x24G,,1x48G", "''"),
        ("four", "'four'"),
        (f"{MAX_GPUS + 1}", f"more than {MAX_GPUS}"),
        (f"{MAX_GPUS}x24G,1x48G", f"more than {MAX_GPUS}"),
    ],
)
def test_parse_sim_spec_bad(text: str, fragment: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_sim_spec(text)
    msg = str(info.value)
    assert fragment in msg
    assert msg.startswith("simulate:")
    assert info.value.field == "simulate"


def test_bad_spec_message_names_value_and_form() -> None:
    with pytest.raises(InvalidSpec, match=r"'4x24Q'.*like 4x24G"):
        parse_sim_spec("4x24Q")


def test_format_sim_spec_round_trips() -> None:
    for text in ("4x24G", "2x24G,1x48G,1x24G", "8x80G"):
        assert format_sim_spec(parse_sim_spec(text)) == text
    assert format_sim_spec(parse_sim_spec("2")) == "2x24G"


# -- construction and idle readings --------------------------------------------------------


def test_is_a_device_source_with_idle_readings() -> None:
    sim = SimulatedDevices("2x24G,1x48G")
    source: DeviceSource = sim
    assert source.kind == "simulated"
    readings = source.read()
    assert [r.index for r in readings] == [0, 1, 2]
    assert [r.memory_total for r in readings] == [24 * GIB, 24 * GIB, 48 * GIB]
    assert all(r.memory_used == 0 and r.utilization == 0.0 for r in readings)
    assert all(r.healthy and r.process_memory == {} for r in readings)
    assert readings[3 - 1].uuid == "GPU-sim-00000000-0000-0000-0000-000000000002"
    assert readings[0].name == "Rota simulated GPU (24 GiB)"
    assert readings[2].name == "Rota simulated GPU (48 GiB)"
    assert len({r.uuid for r in readings}) == 3


def test_uuids_are_deterministic_across_instances() -> None:
    a = [r.uuid for r in SimulatedDevices("4x24G").read()]
    b = [r.uuid for r in SimulatedDevices("4x24G").read()]
    assert a == b
    assert a[3] == "GPU-sim-00000000-0000-0000-0000-000000000003"


def test_describe() -> None:
    assert SimulatedDevices("4x24G").describe() == "4 simulated GPUs (4x24G)"
    assert SimulatedDevices("1x80G").describe() == "1 simulated GPU (1x80G)"
    assert SimulatedDevices("2x24G,1x48G").describe() == "3 simulated GPUs (2x24G,1x48G)"
    assert SimulatedDevices([24 * GIB, 24 * GIB]).describe() == "2 simulated GPUs (2x24G)"


def test_built_from_list_of_sizes() -> None:
    sim = SimulatedDevices([16 * GIB, 40 * GIB])
    assert sim.gpu_count == 2
    assert [r.memory_total for r in sim.read()] == [16 * GIB, 40 * GIB]


@pytest.mark.parametrize("sizes", [[], [0], [24 * GIB, -1], [GIB] * (MAX_GPUS + 1)])
def test_bad_list_of_sizes(sizes: list[int]) -> None:
    with pytest.raises(InvalidSpec):
        SimulatedDevices(sizes)


def test_bad_spec_text_in_constructor() -> None:
    with pytest.raises(InvalidSpec):
        SimulatedDevices("lots")


# -- placements ----------------------------------------------------------------------------


def test_placement_with_memory_uses_ninety_percent() -> None:
    sim = SimulatedDevices("2x24G")
    sim.place("job-1", [1], 0.5, 10 * GIB, pid=4242)
    idle, busy = sim.read()
    assert idle.memory_used == 0 and idle.utilization == 0.0
    assert busy.memory_used == int(0.9 * 10 * GIB)
    assert busy.utilization == pytest.approx(0.5 * 0.95)
    assert busy.process_memory == {4242: int(0.9 * 10 * GIB)}
    assert idle.temperature_c is not None and busy.temperature_c is not None
    assert busy.temperature_c > idle.temperature_c


def test_placement_without_memory_uses_half_the_fraction() -> None:
    sim = SimulatedDevices("1x24G")
    sim.place("job-1", [0], 0.5, None)
    (r,) = sim.read()
    assert r.memory_used == int(0.5 * 0.5 * 24 * GIB)
    assert r.process_memory == {}  # no pid given


def test_multi_gpu_placement_counts_on_every_gpu() -> None:
    sim = SimulatedDevices("4x24G")
    sim.place("gang", [0, 2], 1.0, 20 * GIB, pid=7)
    used = [r.memory_used for r in sim.read()]
    assert used == [int(0.9 * 20 * GIB), 0, int(0.9 * 20 * GIB), 0]
    utils = [r.utilization for r in sim.read()]
    assert utils == pytest.approx([0.95, 0.0, 0.95, 0.0])


def test_fractions_add_up_and_cap_at_one() -> None:
    sim = SimulatedDevices("1x24G")
    sim.place("a", [0], 0.5, GIB, pid=1)
    sim.place("b", [0], 0.25, 2 * GIB, pid=2)
    (r,) = sim.read()
    assert r.utilization == pytest.approx(0.75 * 0.95)
    assert r.memory_used == int(0.9 * GIB) + int(0.9 * 2 * GIB)
    assert r.process_memory == {1: int(0.9 * GIB), 2: int(0.9 * 2 * GIB)}
    sim.place("c", [0], 0.5, None)
    assert sim.read()[0].utilization == 1.0


def test_memory_used_never_exceeds_total() -> None:
    sim = SimulatedDevices("1x24G")
    sim.place("a", [0], 1.0, 40 * GIB)
    assert sim.read()[0].memory_used == 24 * GIB


def test_release_frees_memory_and_util() -> None:
    sim = SimulatedDevices("1x24G")
    sim.place("a", [0], 0.5, 8 * GIB, pid=11)
    sim.place("b", [0], 0.25, 4 * GIB, pid=12)
    assert sim.release("a") is True
    (r,) = sim.read()
    assert r.memory_used == int(0.9 * 4 * GIB)
    assert r.utilization == pytest.approx(0.25 * 0.95)
    assert r.process_memory == {12: int(0.9 * 4 * GIB)}
    assert sim.release("a") is False  # twice is harmless
    assert sim.release("b") is True
    (r,) = sim.read()
    assert (r.memory_used, r.utilization, r.process_memory) == (0, 0.0, {})
    assert sim.placed_keys() == []


def test_placing_a_key_again_replaces_it() -> None:
    sim = SimulatedDevices("2x24G")
    sim.place("a", [0], 1.0, 10 * GIB)
    sim.place("a", [1], 0.5, 2 * GIB)
    r0, r1 = sim.read()
    assert r0.memory_used == 0
    assert r1.memory_used == int(0.9 * 2 * GIB)
    assert sim.placed_keys() == ["a"]


@pytest.mark.parametrize(
    ("gpus", "fraction", "mem", "fragment"),
    [
        ([], 1.0, None, "no GPU indices"),
        ([0, 0], 1.0, None, "repeat"),
        ([0], 0.0, None, "fraction"),
        ([0], 1.5, None, "fraction"),
        ([0], 0.5, -1, "negative"),
        ([4], 1.0, None, "GPU 4 does not exist"),
        ([-1], 1.0, None, "GPU -1 does not exist"),
    ],
)
def test_bad_placements(gpus: list[int], fraction: float, mem: int | None,
                        fragment: str) -> None:
    sim = SimulatedDevices("4x24G")
    with pytest.raises(DeviceError, match=fragment):
        sim.place("job", gpus, fraction, mem)
    assert sim.placed_keys() == []


def test_failed_placement_on_one_gpu_places_nothing() -> None:
    sim = SimulatedDevices("2x24G")
    with pytest.raises(DeviceError):
        sim.place("gang", [0, 5], 1.0, GIB)
    assert all(r.memory_used == 0 for r in sim.read())


# -- external processes ----------------------------------------------------------------


def test_external_use_shows_in_memory_util_and_processes() -> None:
    sim = SimulatedDevices("2x24G")
    sim.set_external(1, 6 * GIB, 0.3)
    sim.place("a", [1], 0.5, 4 * GIB, pid=99)
    r0, r1 = sim.read()
    assert r0.memory_used == 0
    assert r1.memory_used == 6 * GIB + int(0.9 * 4 * GIB)
    assert r1.utilization == pytest.approx(0.5 * 0.95 + 0.3)
    assert r1.process_memory == {99: int(0.9 * 4 * GIB), EXTERNAL_PID_BASE + 1: 6 * GIB}
    sim.set_external(1, 0, 0.0)
    r1 = sim.read()[1]
    assert r1.process_memory == {99: int(0.9 * 4 * GIB)}
    assert r1.utilization == pytest.approx(0.5 * 0.95)


def test_a_set_utilisation_is_reported_whatever_runs_until_restored() -> None:
    """What idle-GPU tests drive: a job placed, its GPU reporting 0 % all the same."""
    sim = SimulatedDevices("2x24G")
    sim.place("a", [0, 1], 1.0, GIB)
    sim.set_utilization(1, 0.0)
    r0, r1 = sim.read()
    assert r0.utilization == pytest.approx(0.95) and r1.utilization == 0.0
    assert r1.memory_used == int(0.9 * GIB)  # only the utilisation is pinned
    sim.set_utilization(1, None)
    assert sim.read()[1].utilization == pytest.approx(0.95)
    sim.set_utilization(0, 0.02)
    sim.restore(0)
    assert sim.read()[0].utilization == pytest.approx(0.95)
    with pytest.raises(DeviceError, match=r"utilisation must be in \[0, 1\], got 1.5"):
        sim.set_utilization(0, 1.5)
    with pytest.raises(DeviceError, match="does not exist"):
        sim.set_utilization(7, 0.0)


@pytest.mark.parametrize(("index", "mem", "util"), [(9, 0, 0.0), (0, -1, 0.0), (0, 0, 1.5)])
def test_bad_external(index: int, mem: int, util: float) -> None:
    with pytest.raises(DeviceError):
        SimulatedDevices("2x24G").set_external(index, mem, util)


# -- faults ------------------------------------------------------------------------------


def test_health_flag() -> None:
    sim = SimulatedDevices("2x24G")
    sim.set_health(0, False)
    assert [r.healthy for r in sim.read()] == [False, True]
    sim.set_health(0, True)
    assert [r.healthy for r in sim.read()] == [True, True]


def test_remove_and_restore() -> None:
    sim = SimulatedDevices("3x24G")
    sim.place("a", [1], 1.0, 8 * GIB)
    sim.set_health(1, False)
    sim.remove(1)
    assert [r.index for r in sim.read()] == [0, 2]
    with pytest.raises(DeviceError, match="not present"):
        sim.place("b", [1], 0.5, None)
    assert sim.release("a") is True  # jobs on a vanished GPU can still be released
    sim.restore(1)
    readings = sim.read()
    assert [r.index for r in readings] == [0, 1, 2]
    assert readings[1].healthy is True
    assert readings[1].memory_used == 0
    assert readings[1].uuid == "GPU-sim-00000000-0000-0000-0000-000000000001"


@pytest.mark.parametrize("method", ["set_health", "remove", "restore"])
def test_unknown_index_is_a_clear_error(method: str) -> None:
    sim = SimulatedDevices("4x24G")
    args: tuple[object, ...] = (7, False) if method == "set_health" else (7,)
    with pytest.raises(DeviceError, match=r"GPU 7 does not exist.*4 GPUs \(indices 0-3\)"):
        getattr(sim, method)(*args)


def test_close_keeps_nothing_open() -> None:
    sim = SimulatedDevices("1")
    sim.close()
    sim.close()


# -- threads -------------------------------------------------------------------------------


def test_concurrent_place_release_read_stays_consistent() -> None:
    sim = SimulatedDevices("4x24G")
    errors: list[BaseException] = []
    start = threading.Barrier(9)

    def worker(n: int) -> None:
        try:
            start.wait()
            for k in range(300):
                key = f"w{n}-{k}"
                sim.place(key, [n % 4], 0.1, GIB, pid=n * 1000 + k)
                sim.release(key)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            start.wait()
            for _ in range(300):
                for r in sim.read():
                    assert 0 <= r.memory_used <= r.memory_total
                    assert 0.0 <= r.utilization <= 1.0
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    threads.append(threading.Thread(target=reader))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert sim.placed_keys() == []
    assert all(r.memory_used == 0 and r.process_memory == {} for r in sim.read())
