"""The job commands, attached to the `rota` app. Each lives in a module of its own:
submit (cli/submit.py), queue (cli/queue_view.py), show and why (cli/job_view.py), the
actions on jobs named by id or name (cli/job_actions.py), `rota add` (cli/jobs_add.py).

Those modules import Rich, the spec model and the jobs file inside the functions that use
them, so `rota submit` and `rota queue` load only what they print with.
"""

from __future__ import annotations

import typer

from rota.cli.fmt import add_row, fmt_gpus, fmt_time, job_clock
from rota.cli.job_actions import wait_exit_code
from rota.cli.queue_view import ACTIVE_STATES, queue_order, queue_table

__all__ = ["ACTIVE_STATES", "add_row", "fmt_gpus", "fmt_time", "job_clock", "queue_order",
           "queue_table", "register", "wait_exit_code"]


def register(app: typer.Typer) -> None:
    """Attach the job commands to the `rota` app."""
    from rota.cli import job_actions as act
    from rota.cli.help_text import plain_help_types
    from rota.cli.job_view import show, why
    from rota.cli.jobs_add import add
    from rota.cli.queue_view import queue
    from rota.cli.submit import CMD_SETTINGS, submit

    plain_help_types()
    app.command(context_settings=CMD_SETTINGS)(submit)
    app.command()(queue)
    app.command()(show)
    app.command()(why)
    app.command()(act.logs)
    app.command()(act.wait)
    app.command()(act.cancel)
    app.command()(act.hold)
    app.command()(act.release)
    app.command()(act.preempt)
    app.command()(act.requeue)
    app.command()(act.attach)
    app.command()(act.sessions)
    app.command()(add)
