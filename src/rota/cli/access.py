"""Who may use the daemon over TCP: `rota user ...` and `rota token ...`."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from rota.cli.common import client, emit, run_cli
from rota.cli.jobs import fmt_time

user_app = typer.Typer(help="Users of the TCP API (the socket's owner needs none).",
                       no_args_is_help=True)
token_app = typer.Typer(help="API tokens for the TCP API (shown once, stored hashed).",
                        no_args_is_help=True)

JSON = typer.Option(False, "--json", help="print JSON")


@user_app.command("add")
def user_add(name: str = typer.Argument(..., help="login-like name, e.g. alice"),
             admin: bool = typer.Option(False, "--admin", help="may act on every job and GPU"),
             json_out: bool = JSON) -> None:
    """Add a user."""
    with run_cli(json_out=json_out), client() as c:
        u = c.request("POST", "/v1/users", json={"name": name, "admin": admin})
        emit(u, json_out, lambda d: f"user {d['name']} added" + (" (admin)" if d["admin"]
                                                                   else ""))


@user_app.command("list")
def user_list(json_out: bool = JSON) -> None:
    """List users."""
    with run_cli(json_out=json_out), client() as c:
        data = c.request("GET", "/v1/users")

        def table(d: dict[str, Any]) -> Table:
            t = Table("user", "admin", "added", header_style="bold")
            for u in d["users"]:
                t.add_row(u["name"], "yes" if u["admin"] else "no", fmt_time(u["created_at"]))
            return t
        emit(data, json_out, table)


@token_app.command("create")
def token_create(user: str = typer.Option(None, "--user", "-u",
                                          help="whose token (default: yourself)"),
                 note: str = typer.Option(None, help="what it is for, e.g. 'dashboard'"),
                 json_out: bool = JSON) -> None:
    """Create a token. It is printed once: store it now (e.g. in ROTA_TOKEN)."""
    with run_cli(json_out=json_out), client() as c:
        t = c.request("POST", "/v1/tokens", json={"user": user, "note": note})
        emit(t, json_out, lambda d: f"{d['token']}\n(token {d['id']} for {d['user']}; it is "
                                    "not shown again)")


@token_app.command("list")
def token_list(json_out: bool = JSON) -> None:
    """List tokens (their first characters only)."""
    with run_cli(json_out=json_out), client() as c:
        data = c.request("GET", "/v1/tokens")

        def table(d: dict[str, Any]) -> Table:
            t = Table("id", "user", "starts with", "note", "created", "last used", "revoked",
                      header_style="bold")
            for r in d["tokens"]:
                t.add_row(str(r["id"]), r["user"], r["prefix"] + "...", r["note"] or "",
                          fmt_time(r["created_at"]), fmt_time(r["last_used_at"]),
                          fmt_time(r["revoked_at"]))
            return t
        emit(data, json_out, table)


@token_app.command("revoke")
def token_revoke(token_id: int = typer.Argument(..., help="the token's id (rota token list)"),
                 json_out: bool = JSON) -> None:
    """Revoke a token; requests with it are refused from now on."""
    with run_cli(json_out=json_out), client() as c:
        t = c.request("POST", f"/v1/tokens/{token_id}/revoke")
        emit(t, json_out, lambda d: f"token {d['id']} of {d['user']} revoked")


def register(app: typer.Typer) -> None:
    app.add_typer(user_app, name="user")
    app.add_typer(token_app, name="token")
