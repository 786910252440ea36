"""`rota queue`: running and waiting jobs, readable at 80 columns.

The table is drawn line by line rather than by a Rich table, so that no value is ever cut
or broken inside a word: the fixed columns keep their width, a long name is shortened
with an ellipsis (whole in `--wide`, `--json` and `rota show`), and when the reasons do
not fit beside the columns each one goes on its own line under its job, wrapped between
words.
"""

from __future__ import annotations

import time

from rota.cli import lazy_typer as typer
from rota.cli.common import emit, run_cli
from rota.cli.fmt import STATE_STYLE, console_width, fmt_gpus, job_clock, wrap_words
from rota.cli.styled import Line, Lines
from rota.printable import CONTROL, printable

TYPE_CHECKING = False  # typing's, without importing typing (rota.cli starts faster)
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from rota.answers import JobAnswer, QueueAnswer

ACTIVE_STATES = ["pending", "held", "starting", "running", "preempted"]
_RANK = {"running": 0, "starting": 0, "preempted": 0, "pending": 1, "held": 2}
_RIGHT = {"id", "prio", "gpus"}
_NAME_MIN = 12
_GAP = "  "
#: the job lists of a GET /v1/queue answer, in the order `rota queue` shows them
_SECTIONS = ("running_jobs", "waiting_jobs", "held_jobs")


def queue_order(jobs: list[JobAnswer]) -> list[JobAnswer]:
    """Running first, then waiting jobs in the order they would start, then held, then done."""
    def key(j: JobAnswer) -> tuple[int, int, int]:
        rank = _RANK.get(j["state"], 3)
        if rank == 1:
            return (rank, j["priority"], j["id"])
        return (rank, 0, j["id"] if rank < 3 else -j["id"])
    return sorted(jobs, key=key)


def idle_mark(job: JobAnswer, now: float) -> str:
    """'idle 17m' for a running job flagged as holding idle GPUs (docs/policy.md), or ""."""
    since = job.get("idle_since")
    if since is None:
        return ""
    span = max(0.0, now - since)
    return f"idle {span / 60:.0f}m" if span >= 60 else f"idle {span:.0f}s"


def short_reason(job: JobAnswer, now: float | None = None,
                 per_step: bool | None = None) -> str:
    """Why it waits, how it ended, or how far it has come (first: 'idle 17m' when its
    GPUs stay idle, given ``now``; ``per_step``: the listing's rate unit, ml_text)."""
    state = job["state"]
    if state in ("pending", "held"):
        reason = job.get("reason")
        return reason["message"] if reason else ""
    if state in ("failed", "timeout", "cancelled"):
        return job["end_reason"] or ""
    if state == "running":
        from rota.cli.ml_text import progress_text

        progress = progress_text(job["progress"], per_step=per_step)
        idle = idle_mark(job, now) if now is not None else ""
        return "; ".join(t for t in (idle, progress) if t)
    return ""


def starts_text(job: JobAnswer, now: float) -> str:
    """A waiting job's start estimate, relative: '~in 12m', 'unknown'; '-' for others."""
    if job["state"] != "pending":
        return "-"
    est = job.get("estimated_start")
    if est is None:
        return "unknown"
    left = est - now
    if left < 60:
        return "~now"
    if left < 3600:
        return f"~in {round(left / 60)}m"
    if left < 86400:
        return f"~in {left / 3600:.1f}h"
    return f"~in {left / 86400:.1f}d"


def _cells(job: JobAnswer, now: float, wide: bool, starts: bool = False) -> dict[str, str]:
    on = ",".join(map(str, job["gpu_indices"]))
    gpus = fmt_gpus(job["gpus"])
    cells = {"id": str(job["id"]), "name": str(job["name"]), "user": str(job["user"]),
             "state": str(job["state"]), "prio": str(job["priority"])}
    if wide:
        cells |= {"gpus": gpus, "on": on or "-", "time": job_clock(job, now),
                  "project": job["project"] or "-", "tags": ",".join(job["tags"]) or "-"}
    else:  # "1 on 0,1": one column for how many and where
        cells |= {"gpus": f"{gpus} on {on}" if on else gpus, "time": job_clock(job, now)}
    if starts:
        cells["starts"] = starts_text(job, now)
    # a user's words escaped before widths are measured (styled.Line escapes them anyway);
    # one search for the row
    if CONTROL.search("".join(cells.values())):
        return {k: printable(v) for k, v in cells.items()}
    return cells


def _escaped(text: str) -> str:
    return printable(text) if CONTROL.search(text) else text


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def queue_lines(jobs: list[JobAnswer], *, width: int | None = None, wide: bool = False,
                title: str | None = None, starts: bool = False) -> Lines:
    """The `rota queue` table (also used by `rota demo`) as lines that fit ``width``
    (no limit with ``wide``)."""
    now = time.time()
    from rota.cli.ml_text import rate_unit

    rows = [_cells(j, now, wide, starts) for j in jobs]
    unit = rate_unit([j["progress"] for j in jobs if j["state"] == "running"])
    reasons = [_escaped(short_reason(j, now, unit)) for j in jobs]
    heads = list(rows[0]) if rows else ["id", "name", "user", "state", "prio", "gpus", "time"]
    widths = {h: max([len(h)] + [len(r[h]) for r in rows]) for h in heads}
    limit = width if width is not None and not wide else None
    if limit is not None:
        others = sum(w for h, w in widths.items() if h != "name") + len(_GAP) * len(heads)
        widths["name"] = min(widths["name"], max(_NAME_MIN, limit - others))
    used = sum(widths.values()) + len(_GAP) * (len(heads) - 1)
    room = None if limit is None else limit - used - len(_GAP)
    beside = room is None or max(map(len, reasons), default=0) <= room
    # a reason column beside: the last column keeps its padding, so every reason starts
    # at the same column (with --wide the last is tags, left-aligned)
    pad_last = beside and any(reasons)
    head_line = _line({h: h for h in heads}, heads, widths, style="bold", pad_last=pad_last)
    if beside:
        head_line.append(_GAP + "reason / progress", style="bold")
    lines = Lines([Line(title, style="bold")] if title else [])
    lines.append(head_line)
    indent = widths["id"] + len(_GAP)
    for row, job, reason in zip(rows, jobs, reasons, strict=True):
        row = {**row, "name": _shorten(row["name"], widths["name"])}
        line = _line(row, heads, widths, state_style=STATE_STYLE.get(job["state"], ""),
                     pad_last=pad_last)
        if reason and beside:
            line.append(_GAP + reason)
        lines.append(line)
        if reason and not beside:
            text_width = (limit or 80) - indent
            lines += [Line(" " * indent + part, style="dim")
                      for part in wrap_words(reason, text_width)]
    return lines


def _line(cells: dict[str, str], heads: list[str], widths: dict[str, int], *,
          style: str = "", state_style: str = "", pad_last: bool = False) -> Line:
    out = Line(style=style)
    for k, h in enumerate(heads):
        cell = cells[h]
        padded = cell.rjust(widths[h]) if h in _RIGHT else cell.ljust(widths[h])
        if k == len(heads) - 1 and not pad_last:
            padded = padded.rstrip()
        out.append(padded, style=state_style if h == "state" and not style else "")
        if k < len(heads) - 1:
            out.append(_GAP)
    return out


def queue_table(jobs: list[JobAnswer], *, title: str | None = None) -> Lines:
    """The queue at the terminal's width (kept for `rota demo`)."""
    return queue_lines(jobs, width=console_width(), title=title)


def queue(
    state: list[str] = typer.Option(None, "--state", metavar="STATE",
                                    help="only jobs in this state (repeatable)"),
    user: str = typer.Option(None, help="only this user's jobs"),
    name: str = typer.Option(None, help="only jobs whose name as shown (the given one, "
                                        "else the command) contains this"),
    all_: bool = typer.Option(False, "--all", "-a", help="include finished jobs"),
    limit: int = typer.Option(200, min=1, help="at most this many waiting jobs (with --all "
                              "or a filter: this many jobs, newest first)"),
    wide: bool = typer.Option(False, "--wide", "-w",
                              help="every column, whole, however long the lines get"),
    watch: float = typer.Option(None, "--watch", metavar="SECONDS", min=0.1,
                                help="draw it again every SECONDS; Ctrl-C leaves"),
    json_out: bool = typer.Option(False, "--json", help="print JSON (every field)"),
    start: bool = typer.Option(False, "--start", help="a column 'starts': when each waiting "
                               "job may start, estimated from time limits and predicted "
                               "run times"),
) -> None:
    """The queue: running jobs, then waiting ones in start order, then held ones.

    Waiting jobs come in the scheduler's order (priority, then submission), a page of
    --limit of them with the total; --all adds finished ones (the job list, newest
    first), as does any filter."""
    from rota.cli.common import client

    states = list(state) if state else (None if all_ else ACTIVE_STATES)
    empty = "the queue is empty" + ("" if all_ or state else
                                    " (`rota queue --all` shows finished jobs)")

    def draw() -> None:
        with client() as c:
            if all_ or state or user or name:  # the job list, newest first
                jobs = queue_order(c.jobs(states=states, user=user, name=name, limit=limit))
                emit(list_json(jobs, limit), json_out, lambda _: queue_lines(
                    jobs, width=console_width(), wide=wide, starts=start) if jobs else empty)
                return
            # the scheduler's own order, from the daemon; no counts of ended jobs (they
            # read every row: 0.1-0.5 s at a million jobs)
            answer = c.queue(limit=limit, counts=False)
        emit(page_json(answer), json_out,
             lambda _: _page_lines(answer, wide, start) or empty)

    with run_cli(json_out=json_out):
        if watch is None:
            draw()
            return
        _watch(draw, watch)


def page_jobs(answer: QueueAnswer) -> list[JobAnswer]:
    """The jobs of a GET /v1/queue answer as `rota queue` lists them."""
    return [*answer.get("running_jobs", []), *answer.get("waiting_jobs", []),
            *answer.get("held_jobs", [])]


def page_json(answer: QueueAnswer) -> dict[str, Any]:
    """`rota queue --json` of a GET /v1/queue answer: its jobs under ``jobs`` in the order
    the table lists them (running, waiting, held), its totals beside."""
    rest = {k: v for k, v in answer.items() if k not in _SECTIONS}
    return {"jobs": page_jobs(answer), **rest}


def list_json(jobs: list[JobAnswer], limit: int) -> dict[str, Any]:
    """`rota queue --all/--state/--user/--name --json`: the same shape as page_json with
    what a filtered list knows (``more``: --limit was reached, so there may be more)."""
    return {"jobs": jobs, "limit": limit, "more": len(jobs) >= limit}


def more_lines(answer: QueueAnswer) -> list[str]:
    """What the page leaves out: '… and 999,800 more waiting (...)'."""
    out = []
    waiting = answer["pending"] - answer["offset"] - len(answer.get("waiting_jobs", []))
    if waiting > 0:
        out.append(f"… and {waiting:,} more waiting (rota queue --all / --limit N)")
    held = answer["held"] - len(answer.get("held_jobs", []))
    if held > 0:
        out.append(f"… and {held:,} more held")
    return out


def _page_lines(answer: QueueAnswer, wide: bool, starts: bool = False) -> Lines | None:
    jobs = page_jobs(answer)
    if not jobs:
        return None
    table = queue_lines(jobs, width=console_width(), wide=wide, starts=starts)
    table += [Line(line, style="dim") for line in more_lines(answer)]
    return table


def _watch(draw: Callable[[], None], every: float) -> None:
    """Draw, wait, draw again until Ctrl-C (which ends it quietly, exit 0)."""
    import datetime

    from rota.cli.common import console

    try:
        while True:
            console.clear()
            stamp = datetime.datetime.now().strftime("%H:%M:%S")
            console.print(f"every {every:g}s, at {stamp} (Ctrl-C to leave)", style="dim",
                          highlight=False)
            draw()
            if not console.is_terminal:
                console.file.flush()
            time.sleep(every)
    except KeyboardInterrupt:
        return
