"""Who may use the daemon over TCP (`rota user ...`, `rota token ...`) and what their jobs
may be given (`rota secret ...`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

from rota.cli.common import client, confirm, emit, fail, run_cli
from rota.cli.fmt import add_row, fmt_time
from rota.errors import InvalidSpec

user_app = typer.Typer(help="Users: by token over TCP, or a local account over the socket.",
                       no_args_is_help=True)
token_app = typer.Typer(help="API tokens for the TCP API (shown once, stored hashed).",
                        no_args_is_help=True)

secret_app = typer.Typer(help="Your stored secrets (API keys, tokens): encrypted, given to "
                              "jobs with --secret or --wandb, never shown.",
                         no_args_is_help=True)

if TYPE_CHECKING:
    from rich.table import Table

    from rota.answers import SecretsAnswer, TokensAnswer, UsersAnswer

JSON = typer.Option(False, "--json", help="print JSON")


@user_app.command("add")
def user_add(name: str = typer.Argument(..., help="login-like name, e.g. alice"),
             admin: bool = typer.Option(False, "--admin", help="may act on every job and GPU"),
             unix: str | None = typer.Option(None, "--unix", metavar="ACCOUNT",
                                             help="the Unix account this user's jobs run as "
                                                  "(a root daemon starts them as it)"),
             json_out: bool = JSON) -> None:
    """Add a user."""
    with run_cli(json_out=json_out), client() as c:
        u = c.add_user(name, admin=admin, unix_account=unix)
        emit(u, json_out, lambda d: f"user {d['name']} added" + (" (admin)" if d["admin"]
                                                                   else "")
             + (f", jobs run as {d['unix_account']}" if d.get("unix_account") else ""))


@user_app.command("set")
def user_set(name: str = typer.Argument(..., help="an existing user"),
             unix: str | None = typer.Option(None, "--unix", metavar="ACCOUNT",
                                             help="run this user's jobs as this Unix account "
                                                  "from now on"),
             own_account: bool = typer.Option(False, "--own-account",
                                              help="run them as the daemon's account again"),
             admin: bool | None = typer.Option(None, "--admin/--no-admin",
                                               help="may act on every job and GPU"),
             json_out: bool = JSON) -> None:
    """Change an existing user: the Unix account their jobs run as, or admin rights.

    Jobs already running stay as they are; the next ones start as the new account."""
    with run_cli(json_out=json_out), client() as c:
        if unix is None and not own_account and admin is None:
            raise InvalidSpec("nothing to change: give --unix ACCOUNT, --own-account, --admin "
                              "or --no-admin", field="user")
        u = c.set_user(name, admin=admin, unix_account=unix, own_account=own_account)
        emit(u, json_out, lambda d: f"user {d['name']}: " + ("admin" if d["admin"] else
                                                             "not an admin")
             + f", jobs run as {d.get('unix_account') or 'the daemon account'}")


@user_app.command("list")
def user_list(json_out: bool = JSON) -> None:
    """List users."""
    with run_cli(json_out=json_out), client() as c:
        data = c.users()

        def table(d: UsersAnswer) -> Table:
            from rich.table import Table

            t = Table("user", "admin", "jobs run as", "added", header_style="bold")
            for u in d["users"]:
                add_row(t, u["name"], "yes" if u["admin"] else "no",
                           u.get("unix_account") or "the daemon's account",
                           fmt_time(u["created_at"]))
            return t
        emit(data, json_out, table)


@user_app.command("rm")
def user_rm(name: str = typer.Argument(..., help="the user to remove"),
            cancel_jobs: bool = typer.Option(False, "--cancel-jobs",
                                             help="cancel the user's active jobs first"),
            yes: bool = typer.Option(False, "--yes", "-y", help="do not ask first"),
            json_out: bool = JSON) -> None:
    """Remove a user: revokes their tokens and deletes their secrets; ended jobs stay.

    A user with active jobs is refused unless --cancel-jobs cancels them.
    """
    with run_cli(json_out=json_out):
        if not yes:
            what = "cancel their active jobs, " if cancel_jobs else ""
            if not confirm(f"remove user {name} ({what}revoke their tokens, delete their "
                           "secrets; their ended jobs stay as history)?"):
                fail(f"user {name} not removed (--yes removes without asking)")
                raise typer.Exit(1)
        with client() as c:
            got = c.remove_user(name, cancel_jobs=cancel_jobs)
        emit(got, json_out, lambda d: f"user {d['user']} removed: {d['tokens_revoked']} "
                                      f"token(s) revoked, {d['jobs_cancelled']} job(s) "
                                      "cancelled")


@token_app.command("create")
def token_create(user: str = typer.Option(None, "--user", "-u",
                                          help="whose token (default: yourself)"),
                 note: str = typer.Option(None, help="what it is for, e.g. 'dashboard'"),
                 json_out: bool = JSON) -> None:
    """Create a token. It is printed once: store it now (e.g. in ROTA_TOKEN)."""
    with run_cli(json_out=json_out), client() as c:
        t = c.create_token(user, note)
        emit(t, json_out, lambda d: f"{d['token']}\n(token {d['id']} for {d['user']}; it is "
                                    "not shown again)")


@token_app.command("list")
def token_list(json_out: bool = JSON) -> None:
    """List tokens (their first characters only)."""
    with run_cli(json_out=json_out), client() as c:
        data = c.tokens()

        def table(d: TokensAnswer) -> Table:
            from rich.table import Table

            t = Table("id", "user", "starts with", "note", "created", "last used", "revoked",
                      header_style="bold")
            for r in d["tokens"]:
                add_row(t, str(r["id"]), r["user"], r["prefix"] + "...", r["note"] or "",
                           fmt_time(r["created_at"]), fmt_time(r["last_used_at"]),
                           fmt_time(r["revoked_at"]))
            return t
        emit(data, json_out, table)


@token_app.command("revoke")
def token_revoke(token_id: int = typer.Argument(..., help="the token's id (rota token list)"),
                 json_out: bool = JSON) -> None:
    """Revoke a token; requests with it are refused from now on."""
    with run_cli(json_out=json_out), client() as c:
        t = c.revoke_token(token_id)
        emit(t, json_out, lambda d: f"token {d['id']} of {d['user']} revoked")


def _read_secret(name: str) -> str:
    """From a hidden prompt on a terminal, else the first line of stdin: never from argv,
    which other users can read in the process list."""
    if sys.stdin.isatty():
        value = typer.prompt(f"value of {name}", hide_input=True, confirmation_prompt=False)
    else:
        value = sys.stdin.readline().rstrip("\r\n")
    if not value:
        raise InvalidSpec(f"secret {name}: no value given (type it at the prompt or pipe "
                          "it on stdin)", field="value")
    return str(value)


@secret_app.command("set")
def secret_set(name: str = typer.Argument(..., help="e.g. WANDB_API_KEY, HF_TOKEN"),
               user: str = typer.Option(None, "--user", "-u",
                                        help="whose (an admin may set another user's)"),
               json_out: bool = JSON) -> None:
    """Store a secret (the value is asked for, or read from stdin)."""
    with run_cli(json_out=json_out):
        from rota.core.job_secrets import check_secret_name

        value = _read_secret(check_secret_name(name))
        with client() as c:
            got = c.put_secret(name, value, user=user)
        emit(got, json_out, lambda d: f"secret {d['name']} of {d['user']} "
                                      + ("stored" if d["created"] else "replaced"))


@secret_app.command("list")
def secret_list(user: str = typer.Option(None, "--user", "-u"), json_out: bool = JSON) -> None:
    """Your secrets' names (never their values)."""
    with run_cli(json_out=json_out), client() as c:
        data = c.secrets(user)

        def table(d: SecretsAnswer) -> Table:
            from rich.table import Table

            t = Table("secret", "stored", "changed", header_style="bold")
            for r in d["secrets"]:
                add_row(t, r["name"], fmt_time(r["created_at"]), fmt_time(r["updated_at"]))
            return t
        emit(data, json_out, table)


@secret_app.command("rm")
def secret_rm(name: str = typer.Argument(...), user: str = typer.Option(None, "--user", "-u"),
              json_out: bool = JSON) -> None:
    """Delete a secret (a queued job that needs it then fails to start, saying why)."""
    with run_cli(json_out=json_out), client() as c:
        got = c.delete_secret(name, user=user)
        emit(got, json_out, lambda d: f"secret {d['name']} of {d['user']} deleted")


def register(app: typer.Typer) -> None:
    app.add_typer(user_app, name="user")
    app.add_typer(token_app, name="token")
    app.add_typer(secret_app, name="secret")
