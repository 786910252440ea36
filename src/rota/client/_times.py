"""Points in time as people give them (``2h`` ago, an ISO 8601 time) turned into the unix
times the API takes: for ``logs(since=, until=)`` and ``rota logs --since/--until``."""

from __future__ import annotations

import math
import re
from datetime import datetime, time, timedelta

from rota.errors import InvalidSpec

#: What a time may be, for the SDK: a unix time, a datetime (naive: local time), a
#: timedelta (that long ago), or text as the CLI takes it.
When = float | int | datetime | timedelta | str

_CLOCK = re.compile(r"\d{1,2}:\d{2}(:\d{2})?")
_DURATION = re.compile(r"[\d.]+[a-zA-Z]*(\s*[\d.]+[a-zA-Z]*)*")


def unix_time(value: When, *, now: float, field: str) -> float:
    """``value`` as a unix time. Text: a duration before ``now`` (``2h``, ``1h30m``,
    ``90s``), an ISO 8601 date or time (``2026-11-25T10:00``; local time unless it names
    its offset), a time of day today (``10:00``), or ``@`` and unix seconds."""
    if isinstance(value, bool):  # an int to Python, never a time to a person
        raise _bad(value, field)
    if isinstance(value, int | float):
        t = float(value)
    elif isinstance(value, datetime):
        t = value.timestamp()
    elif isinstance(value, timedelta):
        t = now - value.total_seconds()
    else:
        t = _of_text(value, now, field)
    if not math.isfinite(t) or t < 0:
        raise _bad(value, field)
    return t


def _of_text(text: str, now: float, field: str) -> float:
    from rota.units import parse_duration

    s = text.strip()
    try:
        if s.startswith("@"):
            return float(s[1:])
        if _CLOCK.fullmatch(s):  # a time of day today (1:30:00 is a duration elsewhere)
            hour, rest = s.split(":", 1)
            day = datetime.fromtimestamp(now).date()
            return datetime.combine(day, time.fromisoformat(f"{int(hour):02d}:{rest}")
                                    ).timestamp()
        if _DURATION.fullmatch(s):
            return now - parse_duration(s, field=field)
        return datetime.fromisoformat(s).timestamp()
    except (ValueError, InvalidSpec):
        raise _bad(text, field) from None


def _bad(value: object, field: str) -> InvalidSpec:
    return InvalidSpec(f"{field}: {value!r} is not a duration or a time (like 2h, 30m, "
                       "2026-11-25T10:00, or @ and unix seconds)", field=field.lstrip("-"))


def window(since: When | None, until: When | None, *, now: float,
           names: tuple[str, str] = ("since", "until")) -> dict[str, float]:
    """The ``since``/``until`` query parameters (only those given); an error when the
    window ends before it begins. ``names``: how the caller called them."""
    got = {key: unix_time(v, now=now, field=name)
           for key, v, name in (("since", since, names[0]), ("until", until, names[1]))
           if v is not None}
    if "since" in got and "until" in got and got["since"] > got["until"]:
        raise InvalidSpec(f"{names[0]} ({_shown(got['since'])}) is after {names[1]} "
                          f"({_shown(got['until'])}): the window would be empty",
                          field=names[0].lstrip("-"))
    return got


def _shown(t: float) -> str:
    return datetime.fromtimestamp(t).isoformat(sep=" ", timespec="seconds")
