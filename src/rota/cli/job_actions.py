"""Acting on jobs named on the command line (by id or name): logs, wait, cancel, hold,
release, preempt, requeue, attach, sessions."""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

from rota.cli.common import apply_each, client, confirm, emit, run_cli
from rota.cli.fmt import fail
from rota.cli.job_view import JOB_ARG
from rota.errors import InvalidSpec, RotaError

if TYPE_CHECKING:
    from rich.text import Text

    from rota.answers import (
        JobAnswer,
        JobStateAnswer,
        RequeueAnswer,
        SessionAnswer,
        WaitAnswer,
    )
    from rota.cli.common import R
    from rota.client import RawClient as Client

    class Waited(WaitAnswer):
        """`rota wait --json`: the daemon's answer and the exit code it makes."""

        cli_exit: int


JOBS_ARG = typer.Argument(None, metavar="JOB...",
                          help="jobs by id or name; a sweep's base name picks its active "
                               "jobs (asks first)")
JSON = typer.Option(False, "--json", help="print JSON (one entry a job)")


# --- logs --------------------------------------------------------------------------------

def logs(job: str = JOB_ARG,
         follow: bool = typer.Option(False, "--follow", "-f", help="follow until the job ends"),
         since: str = typer.Option(None, "--since", metavar="WHEN",
                                   help="only lines written since then: 2h (ago), "
                                        "2026-11-25T10:00, 10:00 (today), @UNIX"),
         until: str = typer.Option(None, "--until", metavar="WHEN",
                                   help="only lines written until then (as --since; "
                                        "not with -f)"),
         raw: bool = typer.Option(False, "--raw",
                                  help="the bytes as the job wrote them, terminal control "
                                       "sequences included (by default they are shown "
                                       "escaped, as \\x1b)"),
         json_out: bool = typer.Option(False, "--json",
                                       help="JSON ({data, offset, next}; with -f one "
                                            "object a chunk)"),
         ) -> None:
    """Print a job's output (stdout and stderr), or the part written in a time window.

    Control characters other than newlines, tabs and carriage returns are shown escaped
    unless --raw: a job's output never drives your terminal."""
    from rota.cli.job_refs import resolve

    with run_cli(json_out=json_out):
        window = _log_window(since, until, follow)
        with client() as c:
            job_id = resolve(c, job)
            if json_out and not follow:
                _print_log_json(c, job_id, window)
                return
            out = _LogOut(json_out, raw)
            if follow:
                _say_it_waits(c, job_id)
                pieces = c.follow_logs(job_id, since=window.get("since"))
            else:
                pieces = c.log_stream(job_id, since=window.get("since"),
                                      until=window.get("until"))
            for piece in pieces:  # written as they come: a log of any size, little memory
                out.write(piece)
            out.close()


def _log_window(since: str | None, until: str | None, follow: bool) -> dict[str, float]:
    """--since/--until as unix times; a clear error naming the option that is wrong."""
    if follow and until is not None:
        raise InvalidSpec("--until: cannot be used with -f (a followed log goes on until "
                          "the job ends); use --since alone", field="until")
    if since is None and until is None:
        return {}
    from rota.client._times import window

    return window(since, until, now=time.time(), names=("--since", "--until"))


def _print_log_json(c: Client, job_id: int, window: dict[str, float]) -> None:
    """``{"id", "data", "offset", "next"}``, its data written page by page as it comes."""
    import json

    offset, first = 0, None
    sys.stdout.write(f'{{"id": {job_id}, "data": "')
    while True:
        got = c.logs(job_id, offset, **window)
        first = got["offset"] if first is None else first
        if not got["data"]:
            break
        sys.stdout.write(json.dumps(got["data"], ensure_ascii=False)[1:-1])
        offset = got["next"]
    sys.stdout.write(f'", "offset": {first}, "next": {max(offset, first or 0)}}}\n')
    sys.stdout.flush()


def _say_it_waits(c: Client, job_id: int) -> None:
    """A job that has not started has no output yet: say so once, on stderr, with why."""
    why = c.why(job_id)
    if why["state"] not in ("pending", "held"):
        return
    from rota.cli.common import err_console

    reason = why["message"].removeprefix("held: ")
    what = "is held" if why["state"] == "held" else "has not started yet"
    err_console.print(f"job {job_id} {what} ({reason}); waiting for it to start, then "
                      "following its output (Ctrl-C to stop waiting)",
                      markup=False, highlight=False, soft_wrap=True)


class _LogOut:
    """Where a log's pieces go: stdout, its control characters escaped (printable_lines)
    unless ``raw``; one JSON object a piece with ``json_out``. Pieces may cut a UTF-8
    character in two: it is decoded whole, across them."""

    def __init__(self, json_out: bool, raw: bool) -> None:
        import codecs

        self.json_out, self.raw = json_out, raw
        self.text = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def write(self, piece: bytes) -> None:
        if self.json_out:
            import json

            sys.stdout.write(json.dumps({"data": piece.decode("utf-8", "replace")}) + "\n")
        elif self.raw and hasattr(sys.stdout, "buffer"):
            sys.stdout.flush()
            sys.stdout.buffer.write(piece)
            sys.stdout.buffer.flush()
            return
        else:
            text = self.text.decode(piece)
            # (printable ASCII needs no look for controls: most logs, and at memory speed)
            sys.stdout.write(text if piece.isascii() and not piece.translate(None, _PLAIN)
                             else self._shown(text))
        sys.stdout.flush()

    def close(self) -> None:
        if not self.json_out:
            sys.stdout.write(self._shown(self.text.decode(b"", final=True)))
            sys.stdout.flush()

    def _shown(self, text: str) -> str:
        from rota.printable import printable_lines

        return text if self.raw else printable_lines(text)


#: bytes a log shows as they are: printable ASCII, tab, newline, carriage return
_PLAIN = bytes(range(0x20, 0x7F)) + b"\t\n\r"


# --- wait --------------------------------------------------------------------------------

def wait_exit_code(res: WaitAnswer) -> int:
    """0 completed; the job's code when it has one; 124 when the wait timed out; else 1."""
    if not res["done"]:
        return 124
    if res["state"] == "completed":
        return 0
    code = res["exit_code"]
    if isinstance(code, int) and 0 < code < 256:
        return code
    return 1


def wait(jobs: list[str] = typer.Argument(..., metavar="JOB...", help="jobs by id or name"),
         timeout: float = typer.Option(None, metavar="SECONDS",
                                       help="give up after this many seconds (exit 124)"),
         json_out: bool = typer.Option(False, "--json",
                                       help="print JSON (a list when several jobs are given)"),
         ) -> None:
    """Block until jobs end; exit with the worst exit code among them (0 if all completed)."""
    from rota.cli.job_refs import resolve

    with run_cli(json_out=json_out):
        if timeout is not None and timeout <= 0:
            raise InvalidSpec("--timeout: must be more than 0 seconds", field="timeout")
        deadline = None if timeout is None else time.monotonic() + timeout
        results: list[Waited] = []
        with client() as c:
            for ref in jobs:
                left = None if deadline is None else max(0.01, deadline - time.monotonic())
                res = c.wait(resolve(c, ref), timeout=left)
                results.append({**res, "cli_exit": wait_exit_code(res)})
        code = max(r["cli_exit"] for r in results)

        def human(rs: list[Waited]) -> Text:
            from rich.text import Text

            return Text("\n".join(_waited(d, timeout) for d in rs))

        if len(jobs) == 1:
            emit(results[0], json_out, lambda d: human([d]))
        else:
            emit(results, json_out, human)
    raise typer.Exit(code)


def _waited(d: WaitAnswer, timeout: float | None) -> str:
    if not d["done"]:
        return f"job {d['id']} is still {d['state']} after {timeout or 0:g}s"
    extra = f" (exit code {d['exit_code']})" if d["exit_code"] is not None else ""
    return f"job {d['id']} {d['state']}{extra}"


# --- acting on several jobs --------------------------------------------------------------

YES = typer.Option(False, "--yes", "-y",
                   help="do not ask before acting on the jobs a sweep's base name picks")


class _Target:
    """One job an action is applied to: ``label`` names it in an error entry (the id, or
    the name as given); ``error``: why the argument named no job, reported in its turn."""

    __slots__ = ("error", "job", "label")

    def __init__(self, label: int | str, job: int | None,
                 error: RotaError | None = None) -> None:
        self.label, self.job, self.error = label, job, error


def each(refs: list[str], json_out: bool, act: Callable[[Client, int], R],
         done: Callable[[R], str], *, verb: tuple[str, str] = ("act on", "acted on"),
         yes: bool = False) -> None:
    """Apply one action to each job; report each; exit 1 if any of them failed (the
    others are still done). A sweep's base name among ``refs`` stands for the sweep's
    active jobs: they are shown and, unless ``yes``, the user is asked first (``verb``:
    the action, and its past for "nothing cancelled") before any job is acted on."""
    if not refs:
        with run_cli(json_out=json_out):
            raise InvalidSpec("no job given (give ids or names)", field="job")
    targets = _targets(refs, json_out, verb, yes)

    def act_on(c: Client, t: _Target) -> R:
        if t.error is not None:
            raise t.error
        assert t.job is not None  # (a target has a job or an error)
        return act(c, t.job)

    apply_each(targets, "id", json_out, act_on, done, label=lambda t: t.label)


def _targets(refs: list[str], json_out: bool, verb: tuple[str, str],
             yes: bool) -> list[_Target]:
    """The jobs ``refs`` name, all looked up before any is acted on: a question about a
    sweep that is answered no leaves every job as it was. An argument that names no job
    keeps its place with its error, reported with the others' results."""
    from rota.cli.job_refs import picked
    from rota.errors import DaemonUnavailable, StoreError

    if all(r.isdigit() for r in refs):  # ids alone: nothing to look up
        return [_Target(int(r), int(r)) for r in refs]
    out: list[_Target] = []
    with run_cli(json_out=json_out), client() as c:
        for ref in refs:
            label = int(ref) if ref.isdigit() else ref
            try:
                ids, members = picked(c, ref)
            except (DaemonUnavailable, StoreError):  # the next one's would fail too
                raise
            except RotaError as e:
                out.append(_Target(label, None, e))
                continue
            if not members:
                out.append(_Target(label, ids[0]))
                continue
            _ask_for_sweep(ref, members, verb, yes)
            out.extend(_Target(i, i) for i in ids)
    return out


def _ask_for_sweep(base: str, members: list[JobAnswer], verb: tuple[str, str],
                   yes: bool) -> None:
    """Say which jobs a sweep's base name picked (on stderr: stdout may be --json), then,
    unless ``yes``, ask as a filter does; a no ends the command with nothing done."""
    n = len(members)
    jobs = f"{n} active job{'s' if n != 1 else ''}"
    sys.stderr.write(f"no job is named {base!r}: it is the base name of a sweep, and picks "
                     f"its {jobs}: {_listed(members)}\n")
    sys.stderr.flush()
    if yes:
        return
    if not confirm(f"{verb[0]} {jobs} of sweep {base!r}?"):
        fail(f"nothing {verb[1]} (--yes {verb[0]}s without asking)")
        raise typer.Exit(1)


def _listed(picked: list[JobAnswer]) -> str:
    """The first 10 jobs as ``ID NAME (STATE)``, and how many more."""
    shown = ", ".join(f"{j['id']} {j['name']} ({j['state']})" for j in picked[:10])
    return shown + (f" and {len(picked) - 10} more" if len(picked) > 10 else "")


_CANCEL = ("cancel", "cancelled")


def _cancelled(r: JobStateAnswer) -> str:
    if r["state"] == "cancelled":
        return f"cancelled job {r['id']}"
    return f"job {r['id']} was {r['state']}: stopping it (SIGTERM, SIGKILL after its grace)"


def cancel(jobs: list[str] = JOBS_ARG,
           user: str = typer.Option(None, "--user", "-u", help="every active job of this user"),
           name: str = typer.Option(None, "--name",
                                    help="every active job whose name as shown (the given "
                                         "one, else the command) contains this"),
           state: list[str] = typer.Option(None, "--state", metavar="STATE",
                                           help="only active jobs in this state (repeatable)"),
           all_: bool = typer.Option(False, "--all", help="every active job you may cancel"),
           yes: bool = typer.Option(False, "--yes", "-y",
                                    help="do not ask before cancelling by filter or by a "
                                         "sweep's base name"),
           json_out: bool = JSON) -> None:
    """Cancel jobs by id or name, or every job a filter picks (asks first).

    A name is the name as shown (the given one, else the command). A sweep's base name
    (`train` for `train[lr=1e-3]`) picks the sweep's active jobs (asks first). A running
    job gets SIGTERM, then SIGKILL after its grace period.
    """
    from rota.cli.job_refs import matching

    by_filter = bool(user or name or state or all_)
    if not by_filter:
        each(jobs or [], json_out, lambda c, j: c.cancel(j), _cancelled, verb=_CANCEL,
             yes=yes)
        return
    with run_cli(json_out=json_out):
        if jobs:
            raise InvalidSpec("give jobs, or a filter (--user, --name, --state, --all), "
                              "not both", field="job")
        with client() as c:
            picked = matching(c, user=user, name=name, states=state)
        if not picked:
            emit([], json_out, lambda _: "no active job matches: nothing to cancel")
            return
        ids = [int(j["id"]) for j in picked]
        if not yes:
            _confirm(picked)
    each([str(i) for i in ids], json_out, lambda c, j: c.cancel(j), _cancelled, verb=_CANCEL)


def _confirm(picked: list[JobAnswer]) -> None:
    if not confirm(f"cancel {len(picked)} job{'s' if len(picked) != 1 else ''}: "
                   f"{_listed(picked)}?"):
        fail("nothing cancelled (--yes cancels without asking)")
        raise typer.Exit(1)


def hold(jobs: list[str] = JOBS_ARG, yes: bool = YES, json_out: bool = JSON) -> None:
    """Hold pending jobs: they stay queued but do not start."""
    each(jobs or [], json_out, lambda c, j: c.hold(j), lambda r: f"held job {r['id']}",
         verb=("hold", "held"), yes=yes)


def release(jobs: list[str] = JOBS_ARG, yes: bool = YES, json_out: bool = JSON) -> None:
    """Release held jobs: they may start again."""
    each(jobs or [], json_out, lambda c, j: c.release(j), lambda r: f"released job {r['id']}",
         verb=("release", "released"), yes=yes)


def preempt(jobs: list[str] = JOBS_ARG, yes: bool = YES, json_out: bool = JSON) -> None:
    """Stop running jobs and queue them again in their place.

    They stop through the stop handshake and resume from their newest checkpoint.
    """
    each(jobs or [], json_out, lambda c, j: c.preempt(j),
         lambda r: f"preempting job {r['id']}: it saves and stops, then waits in its place",
         verb=("preempt", "preempted"), yes=yes)


def requeue(jobs: list[str] = JOBS_ARG, yes: bool = YES, json_out: bool = JSON) -> None:
    """Run jobs again (a running one restarts, an ended one is submitted anew).

    A running job is stopped and queued again; an ended one becomes a new job with the
    same spec.
    """
    def done(r: RequeueAnswer) -> str:
        new = r["job"]["id"]
        return (f"job {r['requeued']} is stopping and will run again" if new == r["requeued"]
                else f"job {r['requeued']} submitted again as job {new}")
    each(jobs or [], json_out, lambda c, j: c.requeue(j), done, verb=("requeue", "requeued"),
         yes=yes)


# --- sessions ----------------------------------------------------------------------------

def attach(job: str = JOB_ARG,
           json_out: bool = typer.Option(False, "--json",
                                         help="print the attach argv instead of running it")
           ) -> None:
    """Attach to a running job's tmux/screen session."""
    from rota.cli.job_refs import resolve

    with run_cli(json_out=json_out), client() as c:
        job_id = resolve(c, job)
        argv = c.attach_argv(job_id)
    if json_out:
        emit({"id": job_id, "argv": argv}, True, str)
        return
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        fail(f"cannot run {shlex.join(argv)}: {e.strerror or e}")
        raise typer.Exit(1) from None


def sessions(json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Running jobs you can attach to (`rota attach JOB`)."""
    def human(rows: list[SessionAnswer]) -> Any:
        from rich.table import Table

        from rota.cli.fmt import add_row

        if not rows:
            return "no attachable sessions (submit with --session tmux or --session screen)"
        t = Table(header_style="bold")
        for col in ("job", "session", "backend", "gpus", "attach with"):
            t.add_column(col, overflow="fold", no_wrap=col != "attach with")
        for s in rows:
            add_row(t, str(s["job"]), s["session"], s["backend"],
                    ",".join(map(str, s["gpus"])) or "-", shlex.join(s["attach"] or []))
        return t
    with run_cli(json_out=json_out), client() as c:
        emit(c.sessions(), json_out, human)
