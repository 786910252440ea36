"""`rota alerts`: the alerts sent to the webhook, and a test one
(rota.server.policy.alert_sender)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from rota.cli.common import client, emit, run_cli
from rota.cli.fmt import add_row, fmt_time

if TYPE_CHECKING:
    from rich.table import Table

    from rota.answers import AlertAnswer, AlertsAnswer

JSON = typer.Option(False, "--json", help="print JSON")
alerts_app = typer.Typer(help="Alerts sent to the webhook (set in rota.toml), each "
                              "once: with no command, the newest with their state.",
                         invoke_without_command=True)


@alerts_app.callback()
def alerts_list(ctx: typer.Context,
                user: str = typer.Option(None, "--user", "-u",
                                         help="whose (an admin's default: everyone's)"),
                limit: int = typer.Option(20, "--limit", "-n", min=1, max=1000),
                json_out: bool = JSON) -> None:
    """The newest alerts with their state: pending, sent or failed."""
    if ctx.invoked_subcommand is not None:
        return
    with run_cli(json_out=json_out), client() as c:
        data = c.alerts(user=user, limit=limit)

        def table(d: AlertsAnswer) -> Table | str:
            from rich.table import Table

            if not d["alerts"]:
                return "no alerts"
            t = Table("id", "when", "kind", "user", "state", "tries", "text", "error",
                      header_style="bold")
            for a in d["alerts"]:
                add_row(t, str(a["id"]), fmt_time(a["created_at"]), a["kind"], a["user"] or "",
                           a["state"], str(a["attempts"]), a["text"],
                           a["last_error"] or "")
            return t
        emit(data, json_out, table)


@alerts_app.command("test")
def alerts_test(text: str = typer.Option(None, "--text", help="what it says (default: a test "
                                                             "line naming you)"),
                json_out: bool = JSON) -> None:
    """Send a test alert to the webhook (admin); `rota alerts` then shows it sent."""
    with run_cli(json_out=json_out), client() as c:
        got = c.test_alert(text)

        def said(d: AlertAnswer) -> str:
            return f"test alert {d['id']} queued for the webhook ({d['state']})"
        emit(got, json_out, said)


def register(app: typer.Typer) -> None:
    app.add_typer(alerts_app, name="alerts")
