"""Small formatting helpers shared by the job and machine commands.

Rich is imported inside the functions that draw: `rota submit` prints one line and should
not pay for it.
"""

from __future__ import annotations

import textwrap
import time

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

    from rota.answers import JobAnswer

STATE_STYLE = {"running": "green", "starting": "green", "pending": "yellow", "held": "magenta",
               "completed": "blue", "failed": "red", "timeout": "red", "cancelled": "dim",
               "preempted": "yellow"}


def fmt_gpus(gpus: float | None) -> str:
    """1 -> '1', 0.5 -> '0.5', 0 -> 'cpu'."""
    if not gpus:
        return "cpu"
    return f"{gpus:g}"


def fmt_time(ts: float | None, *, short: bool = False) -> str:
    """Local time; with short=True only the clock for today's times (tables keep a time on
    one line: its cell does not wrap)."""
    if ts is None:
        return "-"
    from datetime import datetime

    when = datetime.fromtimestamp(ts)
    if short:
        return when.strftime("%H:%M:%S" if when.date() == datetime.now().date()
                             else "%m-%d %H:%M")
    return when.strftime("%Y-%m-%d %H:%M:%S")


def fail(message: str) -> None:
    """An error line on stderr (words only: common.fail)."""
    from rota.cli.common import fail as _fail

    _fail(message)


def styled_state(state: str) -> Text:
    from rich.text import Text

    return Text(state, style=STATE_STYLE.get(state, ""))


def add_row(table: Table, *cells: Any) -> None:
    """A table row whose plain values are shown as words on one line (names may hold
    [brackets] or control characters: rota.cli.user_text)."""
    from rich.text import Text

    from rota.cli.user_text import cell

    table.add_row(*(c if isinstance(c, Text) else Text(cell(c)) for c in cells))


def job_clock(job: JobAnswer, now: float | None = None) -> str:
    """How long it has waited, run, or ran, in words a queue table can hold."""
    from rota.units import format_duration

    now = time.time() if now is None else now
    state, started, ended = job["state"], job["started_at"], job["ended_at"]
    if state in ("running", "starting", "preempted") and started:
        return f"ran {format_duration(now - started)}"
    if ended and started:
        return f"ran {format_duration(ended - started)}"
    if ended:
        return "-"
    return f"waits {format_duration(now - job['created_at'])}"


def wrap_words(text: str, width: int) -> list[str]:
    """Lines of at most ``width`` characters, broken between words only (a word longer
    than the line gets a line of its own rather than being cut)."""
    return textwrap.wrap(text, max(width, 10), break_long_words=False,
                         break_on_hyphens=False) or [""]


def console_width() -> int:
    """The terminal's width, as Rich would take it (without importing Rich)."""
    from rota.cli.styled import terminal_width

    return terminal_width()
