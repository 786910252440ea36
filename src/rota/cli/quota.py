"""Quotas and budgets (`rota quota ...`): per user or project, on GPUs at once, GPU-hours or
money per UTC day, week or month. Anyone lists their own; an admin sets, lifts, removes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from rota.cli.common import client, emit, run_cli
from rota.cli.fmt import add_row
from rota.errors import InvalidSpec

if TYPE_CHECKING:
    from rich.table import Table

    from rota.answers import QuotaAnswer, QuotasAnswer

quota_app = typer.Typer(help="Quotas and budgets per user or project (admins set them).",
                        no_args_is_help=True)
JSON = typer.Option(False, "--json", help="print JSON")
USER = typer.Option(None, "--user", "-u", help="the user it applies to")
PROJECT = typer.Option(None, "--project", "-p", help="the project it applies to")


def _owner(user: str | None, project: str | None) -> tuple[str, str]:
    if (user is None) == (project is None):
        raise InvalidSpec("name one owner: --user NAME or --project NAME")
    return ("user", user) if user is not None else ("project", project or "")


def _measure(gpus: float | None, gpu_hours: float | None,
             money: float | None) -> tuple[str, float]:
    given = [(w, v) for w, v in (("gpus", gpus), ("gpu_hours", gpu_hours), ("money", money))
             if v is not None]
    if len(given) != 1:
        raise InvalidSpec("give one limit: --gpus N, --gpu-hours N or --money N")
    return given[0]


def _line(q: QuotaAnswer) -> str:
    flags = (" (hard budget)" if q["hard"] else "") + \
        (" (lifted)" if q["lifted_until"] else "")
    return f"{q['text']} [{q['percent']:.0f} %]{flags}"


@quota_app.command("set")
def quota_set(user: str = USER, project: str = PROJECT,
              gpus: float = typer.Option(None, "--gpus", help="GPUs held at once"),
              gpu_hours: float = typer.Option(None, "--gpu-hours", help="GPU-hours a period"),
              money: float = typer.Option(None, "--money", help="money a period (the "
                                                                "attempts' price)"),
              per: str = typer.Option("none", "--per", help="day, week, month (UTC) or none"),
              hard: bool = typer.Option(False, "--hard", help="a budget: at 100 % running "
                                                             "jobs are stopped too"),
              json_out: bool = JSON) -> None:
    """Set (or replace) a quota, e.g. --project vision --gpu-hours 96 --per week."""
    with run_cli(json_out=json_out), client() as c:
        kind, name = _owner(user, project)
        what, limit = _measure(gpus, gpu_hours, money)
        if what == "gpus" and (per != "none" or hard):
            raise InvalidSpec("a GPUs-at-once quota has no period and cannot be --hard "
                              "(--per and --hard are for --gpu-hours and --money)")
        emit(c.set_quota(kind, name, what, limit, period=per, hard=hard), json_out, _line)


@quota_app.command("list")
def quota_list(json_out: bool = JSON) -> None:
    """Quotas with what is used of them now (yours and the projects'; an admin: all)."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.quotas(), json_out, _table)


@quota_app.command("lift")
def quota_lift(user: str = USER, project: str = PROJECT,
               what: str = typer.Option(None, "--what", help="gpus, gpu_hours or money "
                                                             "(default: all of the owner's)"),
               for_: str = typer.Option("1d", "--for", help="how long, e.g. 2h, 1d"),
               json_out: bool = JSON) -> None:
    """Stop enforcing a quota for a while; held jobs may start at once."""
    from rota.units import parse_duration

    with run_cli(json_out=json_out), client() as c:
        kind, name = _owner(user, project)
        got = c.lift_quota(kind, name, parse_duration(for_, field="--for"), what)
        emit(got, json_out, lambda d: f"lifted {d['changed']} quota(s) of {kind} {name} "
                                      f"for {for_}")


@quota_app.command("rm")
def quota_rm(user: str = USER, project: str = PROJECT,
             what: str = typer.Option(None, "--what", help="gpus, gpu_hours or money "
                                                           "(default: all of the owner's)"),
             json_out: bool = JSON) -> None:
    """Remove a quota."""
    with run_cli(json_out=json_out), client() as c:
        kind, name = _owner(user, project)
        got = c.remove_quota(kind, name, what)
        emit(got, json_out, lambda d: f"removed {d['changed']} quota(s) of {kind} {name}")


def _table(data: QuotasAnswer) -> Table | str:
    if not data["quotas"]:
        return "no quotas"
    from rich.table import Table

    t = Table("owner", "limit", "used", "%", "resets", header_style="bold")
    for q in data["quotas"]:
        unit = {"gpus": "GPUs at once", "gpu_hours": "GPU-hours", "money": "money"}[q["what"]]
        per = "" if q["period"] == "none" else f" / {q['period']}"
        hard = " hard" if q["hard"] else ""
        from rota.cli.fmt import fmt_time

        add_row(t, f"{q['kind']} {q['name']}", f"{q['limit']:g} {unit}{per}{hard}",
                   f"{q['used']:.4g}", f"{q['percent']:.0f}",
                   fmt_time(q["resets_at"]) if q["resets_at"] else "-")
    return t


def register(app: typer.Typer) -> None:
    app.add_typer(quota_app, name="quota")
