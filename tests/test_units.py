"""Human units: a memory a person writes is GiB unless it names a unit."""

from __future__ import annotations

import pytest

from rota.errors import InvalidSpec
from rota.units import MEMORY_HELP, parse_memory, parse_memory_person

GIB = 1 << 30


@pytest.mark.parametrize(("text", "expected"), [
    ("20", 20 * GIB), ("1.5", GIB * 3 // 2), ("20G", 20 * GIB), ("20GiB", 20 * GIB),
    ("20gb", 20 * GIB), ("512M", 512 << 20), ("512MiB", 512 << 20), ("64k", 64 << 10),
    ("1000B", 1000), ("1000b", 1000), ("0", 0), ("1T", 1 << 40),
])
def test_memory_a_person_writes(text: str, expected: int) -> None:
    assert parse_memory(text) == expected


def test_an_int_from_a_program_is_bytes() -> None:
    assert parse_memory(20) == 20
    assert parse_memory_person(20) == 20 * GIB
    assert parse_memory_person("512M") == "512M"  # left for the spec to read
    assert parse_memory_person(True) is True  # a bool is not a size: the spec refuses it


@pytest.mark.parametrize("text", ["lots", "20 gigs", "5ib", "5i", "-3", "1e3"])
def test_unreadable_memory_names_the_field_and_the_rule(text: str) -> None:
    with pytest.raises(InvalidSpec) as e:
        parse_memory(text, field="gpu_mem")
    assert e.value.field == "gpu_mem" and "gpu_mem" in str(e.value)
    assert MEMORY_HELP in str(e.value)
