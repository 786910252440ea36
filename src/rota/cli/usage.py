"""Tier and usage commands: tiers (limits and prices), report (GPU-hours and cost)."""

from __future__ import annotations

import csv
import io
import sys
from typing import TYPE_CHECKING

import typer

from rota.cli.common import Plain, client, emit, run_cli
from rota.cli.fmt import add_row
from rota.errors import InvalidSpec

if TYPE_CHECKING:
    from rich.console import Group

    from rota.answers import ReportAnswer, TiersAnswer

_BY = ("user", "project", "pool", "tier")
_PERIODS = ("day", "week", "month")


def _limit(value: float | int | None, unit: str = "") -> str:
    from rota.units import format_duration, format_memory

    if value is None:
        return "-"
    if unit == "mem":
        return format_memory(int(value))
    if unit == "time":
        return format_duration(value)
    return f"{value:g}"


#: under a cost figure at Rota's shipped prices (rota.toml declares no tiers)
DEFAULT_PRICES = ("* at Rota's default prices (AWS on-demand for each tier's GPU); nobody here "
                  "set a price: rota.toml [tiers] sets yours")

def tiers_view(data: TiersAnswer) -> Group:
    from rich.box import SIMPLE_HEAD
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    t = Table(box=SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    for col in ("tier", "price/GPU-h", "GPU", "GPU mem", "GPUs", "CPUs", "memory",
                "time limit"):
        t.add_column(col, no_wrap=True)
    for x in data["tiers"]:
        add_row(t, x["name"], f"{x['price']:.3f}", x["gpu_type"] or "-",
                   _limit(x["gpu_mem"], "mem"), _limit(x["gpus"]), _limit(x["cpus"]),
                   _limit(x["memory"], "mem"), _limit(x["time_limit"], "time"))
    note = ("a job gets the cheapest tier it fits (--tier names one); one that fits none "
            "runs untiered and costs nothing; '-': no limit")
    if data.get("default_prices"):
        note += ("\nthese are Rota's default tiers and prices (AWS on-demand for each "
                 "tier's GPU); rota.toml [tiers] sets yours")
    return Group(t, Text(note))


def tiers(json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """The tiers: what a job on each may ask for, and the price of a GPU-hour there."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.tiers(), json_out, tiers_view)


def report_csv(data: ReportAnswer) -> str:
    from rota.cli.user_text import cell

    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([data["by"], data["period"], "gpu_hours", "cost", "wasted_gpu_hours"])
    for r in data["rows"]:
        # a group is a user's or project's name: on one line, as words (rota.cli.user_text);
        # hours to 3.6 s and costs to cents: past that the digits are float noise (--json
        # keeps them whole)
        w.writerow([cell(r["group"]), r["bucket"], f"{r['gpu_hours']:.3f}",
                    f"{r['cost']:.2f}", f"{r['wasted_gpu_hours']:.3f}"])
    return out.getvalue()


def report_view(data: ReportAnswer) -> Group | Plain:
    from datetime import UTC, datetime

    from rich.box import SIMPLE_HEAD
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    def day(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")

    window = f"{day(data['since'])} to {day(data['until'])} UTC"
    whose = f"{data['user']}'s jobs" if data["user"] else "all users"
    if not data["rows"]:
        return Plain(f"no GPU use from {window} ({whose})")
    t = Table(box=SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    cost = "cost*" if data.get("default_prices") else "cost"
    figures = ("GPU-hours", cost, "idle GPU-h")
    for col in (data["period"], data["by"], *figures):
        t.add_column(col, no_wrap=True, justify="right" if col in figures else "left")
    for r in data["rows"]:
        add_row(t, r["bucket"], r["group"], f"{r['gpu_hours']:.2f}", f"{r['cost']:.2f}",
                   f"{r['wasted_gpu_hours']:.2f}")
    t.add_section()
    for x in data["totals"]:
        add_row(t, "total", x["group"], f"{x['gpu_hours']:.2f}", f"{x['cost']:.2f}",
                   f"{x['wasted_gpu_hours']:.2f}")
    notes = f"{window}, {whose}; running jobs counted up to now"
    if data.get("default_prices"):
        notes += "\n" + DEFAULT_PRICES
    return Group(t, Text(notes))


def report(by: str = typer.Option("user", "--by", help="group by user, project, pool or tier"),
           period: str = typer.Option("day", "--period",
                                      help="day, week (ISO, from Monday) or month; UTC"),
           since: str = typer.Option(None, "--since", metavar="DATE",
                                     help="2026-11-01 or an ISO time (UTC); default: 30 "
                                          "days, 12 weeks or a year back"),
           until: str = typer.Option(None, "--until", metavar="DATE", help="default: now"),
           csv_out: bool = typer.Option(False, "--csv", help="print CSV"),
           json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """GPU-hours and cost per user, project, pool or tier, per day, week or month.

    Cost is GPUs x run time x the price each attempt's tier had when it started. You see
    your own jobs; an admin sees everyone's."""
    with run_cli(json_out=json_out):
        if by not in _BY:
            raise InvalidSpec(f"--by: {by!r} is not one of {', '.join(_BY)}", field="by")
        if period not in _PERIODS:
            raise InvalidSpec(f"--period: {period!r} is not one of {', '.join(_PERIODS)}",
                              field="period")
        with client() as c:
            data = c.report(by=by, period=period, since=since, until=until)
        if csv_out and not json_out:
            sys.stdout.write(report_csv(data))
            return
        emit(data, json_out, report_view)


def register(app: typer.Typer) -> None:
    app.command()(tiers)
    app.command()(report)
