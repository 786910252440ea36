"""Parsing of human units: memory sizes, durations, GPU index sets."""

from __future__ import annotations

import re

from rota.errors import InvalidSpec

# patterns compiled on first use (re caches them): `rota submit` imports this module and
# rarely parses a size or a duration
_MEM_RE = r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$"
MEMORY_HELP = "GiB unless a unit is given: 20, 20G, 512M"
_MEM_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DUR_RE = r"(\d+(?:\.\d+)?)\s*(d|h|m|s)"
_DUR_FULL_RE = r"(\s*\d+(?:\.\d+)?\s*[dhms])+\s*"
_DUR_MULT = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
#: the highest GPU index a job may name: a machine of 1,024 GPUs at most, as a job's
#: ``gpus`` is bounded (checked before a range is expanded: "0-99999999999999999999" must
#: not become a set of 10**20 numbers)
MAX_GPU_INDEX = 1023


def parse_memory(text: str | int, *, field: str = "gpu_mem") -> int:
    """'20G', '512M', '1.5GiB', '64MB', '1000B' -> bytes (binary units); a bare number a
    person writes ('20') means GiB, since nobody asks for 20 bytes of GPU memory.

    An int comes from a program (the API, the SDK) and is already bytes.
    """
    if isinstance(text, int):
        if text < 0:
            raise InvalidSpec(f"{field}: memory cannot be negative", field=field)
        return text
    m = re.match(_MEM_RE, text, re.IGNORECASE)
    if not m:
        raise InvalidSpec(f"{field}: cannot read {text!r} as a memory size "
                          f"({MEMORY_HELP})", field=field)
    number, prefix, suffix = m.group(1), m.group(2).lower(), m.group(3).lower()
    if not prefix and suffix not in ("", "b"):
        raise InvalidSpec(f"{field}: {text!r} has no size prefix ({MEMORY_HELP})", field=field)
    mult = _MEM_MULT[prefix] if prefix or suffix else _MEM_MULT["g"]
    return int(float(number) * mult)


def parse_memory_person(value: object, *, field: str = "gpu_mem") -> object:
    """A memory written by a person in a jobs file or YAML: a bare number (20 or 1.5) is GiB
    there too. Other values are left for the spec's own check to judge."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise InvalidSpec(f"{field}: memory cannot be negative", field=field)
        return int(value * _MEM_MULT["g"])
    return value


def format_memory(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, mult in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= mult:
            v = n / mult
            return f"{v:.0f}{unit}" if v >= 10 or v == int(v) else f"{v:.1f}{unit}"
    return f"{n}B"


def parse_duration(text: str | float | int, *, field: str = "time_limit") -> float:
    """'2h', '1h30m', '90s', '45' (seconds), '1:30:00' -> seconds."""
    if isinstance(text, int | float):
        value = float(text)
    else:
        s = text.strip()
        if re.fullmatch(r"\d+(\.\d+)?", s):
            value = float(s)
        elif re.fullmatch(r"\d+(:\d{1,2}){1,2}", s):
            value = 0.0
            for part in s.split(":"):
                value = value * 60 + int(part)
        elif re.fullmatch(_DUR_FULL_RE, s, re.IGNORECASE):
            value = sum(float(m.group(1)) * _DUR_MULT[m.group(2).lower()]
                        for m in re.finditer(_DUR_RE, s, re.IGNORECASE))
        else:
            raise InvalidSpec(
                f"{field}: cannot read {text!r} as a duration (like 2h, 30m, 1h30m, 90s)",
                field=field)
    if value <= 0:
        raise InvalidSpec(f"{field}: a duration must be positive, got {text!r}", field=field)
    return value


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def parse_gpu_set(text: str | None, *, field: str = "allowed_gpus") -> frozenset[int] | None:
    """'0-3,6' or '4,5,6,7' -> frozenset; empty or None -> None (all GPUs allowed)."""
    if text is None or not str(text).strip():
        return None
    out: set[int] = set()
    parts = str(text).replace(" ", "").split(",")
    if len(parts) > MAX_GPU_INDEX + 1:  # each part expands to up to 1,024 indices
        raise InvalidSpec(f"{field}: {len(parts)} parts; a set of GPUs has at most "
                          f"{MAX_GPU_INDEX + 1}", field=field)
    for part in parts:
        if not part:
            continue
        m = re.fullmatch(r"([0-9]{1,4})(?:-([0-9]{1,4}))?", part)
        if not m:
            raise InvalidSpec(f"{field}: {part[:40]!r} is not a GPU index or range (like 0-3,6; "
                              f"indices 0-{MAX_GPU_INDEX})", field=field)
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi > MAX_GPU_INDEX:
            raise InvalidSpec(f"{field}: GPU index {hi} is past {MAX_GPU_INDEX}, the highest "
                              "a machine has", field=field)
        if hi < lo:
            raise InvalidSpec(f"{field}: range {part!r} runs backwards", field=field)
        out.update(range(lo, hi + 1))
    return frozenset(out) if out else None


def format_gpu_set(gpus: frozenset[int] | set[int] | list[int] | None) -> str:
    """Compact form: {0,1,2,3,6} -> '0-3,6'."""
    if not gpus:
        return ""
    idx = sorted(gpus)
    parts: list[str] = []
    start = prev = idx[0]
    for i in [*idx[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(parts)
