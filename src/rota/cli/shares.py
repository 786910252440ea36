"""Fair share and the order of the queue: `rota share` (list, set) and `rota priority`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from rota.cli.common import Plain, client, emit, run_cli
from rota.cli.fmt import add_row, console_width, wrap_words
from rota.cli.job_refs import resolve

if TYPE_CHECKING:
    from rich.console import Group

    from rota.answers import PriorityAnswer, SharesAnswer

share_app = typer.Typer(help="Fair shares: each user's and project's share, usage and "
                             "fair-share factor; `rota share set` gives one (admins).",
                        invoke_without_command=True)
JSON = typer.Option(False, "--json", help="print JSON")


#: the table's columns: short headers, so that it fits 80 columns (the note says the rest)
_COLUMNS = ("kind", "name", "shares", "share", "usage", "used", "factor", "day", "week")


def shares_view(d: SharesAnswer) -> Group:
    from rich.box import SIMPLE_HEAD
    from rich.console import Group
    from rich.table import Table

    t = Table(box=SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True,
              header_style="bold")
    for col in _COLUMNS:  # only a long name wraps; figures and headers never do
        t.add_column(col, no_wrap=col != "name", overflow="fold",
                     justify="left" if col in ("kind", "name") else "right")
    for a in d["accounts"]:
        add_row(t, a["kind"], a["name"], f"{a['shares']:g}", f"{a['norm_shares']:.0%}",
                   f"{a['usage_gpu_hours']:.2f}", f"{a['norm_usage']:.0%}",
                   f"{a['factor']:.2f}", f"{a['gpu_hours_day']:.2f}",
                   f"{a['gpu_hours_week']:.2f}")
    hl = d["half_life"]
    how = ("the queue is ordered by fair share" if d["fair_share"] else
           "fair share is off ([priority] fair_share = true in rota.toml orders the queue "
           "by it)")
    half = (f"{hl / 86_400:g} days" if hl >= 86_400 else f"{hl / 3600:g} h" if hl >= 3600
            else f"{hl:g} s")
    if not d["accounts"]:
        return Group(Plain("no usage and no shares set yet"),
                     Plain(f"{how}; usage halves every {half}"))
    legend = ("share: part of all shares; usage: decayed GPU-hours; used: part of everyone's "
              "usage; day, week: GPU-hours in the last 24 hours and 7 days")
    width = console_width()
    return Group(t, *(Plain(line) for text in (legend, f"{how}; usage halves every {half}")
                      for line in wrap_words(text, width)))


def priority_view(d: PriorityAnswer) -> Group:
    from rich.console import Group
    from rich.table import Table

    owner = d["user"] + (f" ({d['project']})" if d["project"] else "")
    t = Table("factor", "value", "weight", "weighted", header_style="bold",
              title=f"job {d['id']} of {owner}")
    for f in d["factors"]:
        add_row(t, f["name"].replace("_", " "), f"{f['factor']:.4f}", f"{f['weight']:g}",
                   f"{f['weighted']:.2f}")
    add_row(t, "total", "", "", f"{d['total']:.2f}")
    note = [] if d["fair_share"] else [Plain("fair share is off: the queue runs by "
                                             "priority, then submission order")]
    return Group(t, *note)


@share_app.callback()
def share(ctx: typer.Context, json_out: bool = JSON) -> None:
    """List users and projects with their share, decayed usage and fair-share factor."""
    if ctx.invoked_subcommand is not None:
        return
    with run_cli(json_out=json_out), client() as c:
        emit(c.shares(), json_out, shares_view)


@share_app.command("set")
def share_set(name: str = typer.Argument(..., help="a user's name (or, --project, a "
                                                    "project's)"),
              shares: float = typer.Argument(..., help="its shares, > 0 (relative: 2 is "
                                                       "twice one with the default 1)"),
              project: bool = typer.Option(False, "--project", help="NAME is a project"),
              json_out: bool = JSON) -> None:
    """Give a user or a project a fair share (admins only)."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.set_share(name, shares, project=project), json_out,
             lambda _: Plain(f"{'project' if project else 'user'} {name}: {shares:g} "
                             "shares"))


def priority(job: str = typer.Argument(..., metavar="JOB", help="a job's id or name"),
             json_out: bool = JSON) -> None:
    """Show a waiting job's priority factors, their weights and the sum (like sprio)."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.priority(resolve(c, job)), json_out, priority_view)


def register(app: typer.Typer) -> None:
    app.add_typer(share_app, name="share")
    app.command()(priority)
