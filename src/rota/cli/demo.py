"""`rota demo`: a half-minute tour on simulated GPUs (sharing, priorities, a sweep, a retry,
and a job that waits with a reason)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from rota.cli.common import console, load, run_cli
from rota.cli.fmt import add_row, fmt_gpus
from rota.cli.job_view import why_sentence
from rota.cli.queue_view import queue_order, queue_table
from rota.errors import RotaError

if TYPE_CHECKING:
    from rich.table import Table

    from rota.answers import JobAnswer, JobDetailAnswer
    from rota.client import RawClient as Client
    from rota.config import Settings

PY = sys.executable
_FLAKY = ("import os, sys\n"
          "marker = sys.argv[1]\n"
          "if not os.path.exists(marker):\n"
          "    open(marker, 'w').close()\n"
          "    print('first try: failing on purpose (exit 3)')\n"
          "    sys.exit(3)\n"
          "print('second try: marker found, all good')\n")
_SWEEP = "import time; print('training with lr={lr}'); time.sleep(1)"


def _say(text: str) -> None:
    console.print(text, markup=False, highlight=False)


def _step(title: str) -> None:
    from rich.rule import Rule
    from rich.text import Text

    console.print(Rule(Text(title, style="bold cyan"), align="left"))


def _sleep_job(name: str, seconds: float, gpus: float, **extra: Any) -> dict[str, Any]:
    return {"command": ["sleep", f"{seconds:g}"], "name": name, "gpus": gpus, **extra}


@contextmanager
def demo_daemon(simulate: str, keep: bool) -> Iterator[tuple[Client, bool]]:
    """A client to the running daemon, or to one started here on simulated GPUs.

    A fresh ROTA_HOME is used as it is, on the database it names (ROTA_DATABASE_URL: an
    empty PostgreSQL database gets the demo's jobs); one whose database already holds jobs
    gets the demo in its own `demo/` folder on SQLite, so the demo never runs (or
    re-adopts) anyone's real jobs.
    """
    from rota.client import RawClient as Client
    from rota.config import Settings

    settings = load()
    c = Client(settings.socket_path)
    from rota.server.serve import socket_alive, start_detached

    if socket_alive(settings.socket_path):
        try:
            yield c, False
        finally:
            c.close()
        return
    c.close()
    home, database = settings.home, settings.database_url
    if database:
        from rota.store.db import holds_jobs, redact_url

        if holds_jobs(database):
            home, database = home / "demo", None
            _say(f"(the database you named, {redact_url(settings.database_url or '')}, "
                 f"already holds jobs: the demo uses its own queue in {home})")
    elif (home / "rota.db").exists():
        home = home / "demo"
        _say(f"(your ROTA_HOME already holds a queue: the demo uses {home})")
    env_before = os.environ.get("ROTA_HOME")
    os.environ["ROTA_HOME"] = str(home)
    try:
        demo_settings = Settings(home=home)
        # the database the user named reaches the daemon as it reached us (environment or
        # rota.toml), never in its argv, where any account could read a password
        argv = ["server", "--simulate", simulate, "--jobs-file", str(home / "demo-jobs.txt")]
        if not database:
            argv += ["--database-url", f"sqlite:///{home / 'rota.db'}"]
        if socket_alive(demo_settings.socket_path):
            c = Client(demo_settings.socket_path)
            started = False
        else:
            pid = start_detached(demo_settings, argv)
            c = Client(demo_settings.socket_path)
            started = True
    finally:
        if env_before is None:
            os.environ.pop("ROTA_HOME", None)
        else:
            os.environ["ROTA_HOME"] = env_before
    try:  # from here on, whatever happens (Ctrl-C, a closed pipe), the daemon is stopped
        if started:
            _say(f"started a daemon on simulated GPUs {simulate} (pid {pid}) in {home}")
        yield c, started
    finally:
        if started and not keep:
            _stop(c, demo_settings)
        elif started:
            hint = "" if home == settings.home else f"ROTA_HOME={home} "
            _say(f"the daemon keeps running: try `{hint}rota queue --all`; "
                 f"stop it with `{hint}rota server stop`")
        c.close()


def _stop(c: Client, settings: Settings) -> None:
    pid_text = settings.pid_path.read_text().strip() if settings.pid_path.exists() else ""
    with contextlib.suppress(RotaError):
        c.shutdown()
    c.close()  # an open keep-alive connection would hold up the server's graceful exit
    deadline = time.monotonic() + 15
    while pid_text and time.monotonic() < deadline:
        if _gone(int(pid_text)):
            break
        time.sleep(0.05)
    else:
        if pid_text:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_text), signal.SIGTERM)
    with contextlib.suppress(OSError):  # stdout may be a closed pipe by now
        _say("stopped the demo daemon")


def _gone(pid: int) -> bool:
    """Has the process ended? The daemon started here is our child: reap it, or it would
    linger as a zombie that `kill(pid, 0)` still finds."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _show_queue(c: Client, ids: list[int], title: str) -> None:
    jobs = [j for j in c.jobs(limit=500) if j["id"] in ids]
    console.print(queue_table(queue_order(jobs), title=title))


def _summary(c: Client, ids: list[int], t0: float) -> Table:
    from rich.table import Table

    # no box, as rota queue: the demo's names (at most 16 characters) and states fit 80
    # columns whole, never folded mid-word
    t = Table(title="summary", title_justify="left", header_style="bold", box=None,
              pad_edge=False)
    for col in ("job", "name", "state", "prio", "attempts", "gpus", "on GPUs", "started"):
        t.add_column(col, no_wrap=col in ("name", "state"), overflow="fold")
    for jid in ids:
        j = c.job(jid)
        att = j["attempts_detail"]
        on = ";".join(",".join(map(str, a["gpus"])) or "-" for a in att) or "-"
        at = j["started_at"]
        started = f"+{at - t0:.1f}s" if at else "-"
        add_row(t, str(jid), j["name"], j["state"], str(j["priority"]), str(j["attempts"]),
                fmt_gpus(j["gpus"]), on, started)
    return t


def _until_looked_at(c: Client, ids: list[int], timeout: float = 5.0) -> None:
    """Wait (briefly) until a scheduling pass has seen every one of the jobs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = [j for j in c.jobs(limit=500) if j["id"] in ids]
        if all(_looked_at(j) for j in jobs):
            return
        time.sleep(0.05)


def _looked_at(job: JobAnswer) -> bool:
    """Whether a scheduling pass has seen the job (it no longer says not_scheduled)."""
    reason = job.get("reason")
    return not reason or reason["code"] != "not_scheduled"


@dataclass
class _Tour:
    """The demo's jobs as the daemon answered them, and what they share."""

    base: dict[str, Any]  # every job's cwd, tags and grace
    marker: Path  # the flaky job's "I failed once" file
    jobs: list[JobAnswer] = field(default_factory=list)
    # the ids of the jobs the tour talks about, set as it goes
    urgent: int = 0
    flaky: int = 0
    huge: int = 0

    @property
    def ids(self) -> list[int]:
        return [j["id"] for j in self.jobs]


def _gpus_for_demo(c: Client) -> int:
    """The daemon's GPU count, once it is sure the demo can run there."""
    health = c.health()
    if health["draining"]:
        raise RotaError("the daemon is draining, so nothing would start; "
                        "`rota drain --off` first")
    n_gpus = health["gpus"]
    if n_gpus < 2:
        raise RotaError(f"the demo needs at least 2 GPUs; this daemon has {n_gpus} "
                        "(try `rota demo --simulate 4x24G` with no daemon running)")
    return n_gpus


def _sharing_and_priorities(c: Client, tour: _Tour, n_gpus: int) -> None:
    base = tour.base
    _step("1. sharing: two jobs that each ask for half a GPU land on the same GPU")
    share = c.submit([{**_sleep_job("share-a", 4, 0.5), **base},
                      {**_sleep_job("share-b", 4, 0.5), **base}])
    train = c.submit([_sleep_job(f"train-{k}", 1 + k, 1, **base) for k in range(1, n_gpus)])
    _say(f"half-GPU jobs {share[0]['id']}, {share[1]['id']}; whole-GPU jobs "
         f"{', '.join(str(j['id']) for j in train)} fill the other GPUs")

    _step("2. priorities: lower numbers run first")
    evals = c.submit([{**_sleep_job(f"eval-{k}", 1, 1, priority=10), **base} for k in (1, 2)])
    urgent = c.submit([{**_sleep_job("urgent", 1, 1, priority=-5), **base}])[0]
    tour.urgent = urgent["id"]
    _say(f"eval-1 and eval-2 (priority 10) queued first; 'urgent' (priority -5, job "
         f"{tour.urgent}) was queued last but will start first")
    tour.jobs += [*share, *train, *evals, urgent]


def _sweep_and_retry(c: Client, tour: _Tour) -> None:
    from rota.core.spec import parse_spec
    from rota.core.sweep import expand_sweep, parse_sweep_arg

    base = tour.base
    _step("3. a sweep: one spec, three learning rates, a quarter GPU each")
    spec = parse_spec({"command": [PY, "-c", _SWEEP], "name": "sweep", "gpus": 0.25})
    grid = [parse_sweep_arg("lr=1e-3,3e-4,1e-4")]
    sweep = c.submit([{"command": s.command, "name": s.name, "gpus": 0.25,
                       "priority": 10, **base} for s in expand_sweep(spec, grid)])
    _say("  " + ", ".join(f"{j['id']} {j['name']}" for j in sweep))

    _step("4. retries: a job that fails once and succeeds on its retry")
    flaky = c.submit([{"command": [PY, "-c", _FLAKY, str(tour.marker)],
                       "name": "flaky", "gpus": 0.25, "priority": 10, "retries": 1,
                       "retry_backoff": 1.0, **base}])[0]
    tour.flaky = flaky["id"]
    _say(f"  {tour.flaky} flaky: exits 3 on its first try; retries=1, retry_backoff=1s")
    tour.jobs += [*sweep, flaky]


def _refused_or_forced(c: Client, tour: _Tour, n_gpus: int) -> None:
    from rota.errors import InvalidSpec

    _step("5. a job that cannot run here is refused, or waits with --force")
    huge_spec = _sleep_job("huge", 1, n_gpus + 1, priority=10, **tour.base)
    with contextlib.suppress(InvalidSpec):
        c.submit([huge_spec])
        raise RotaError("the daemon accepted a job that asks for more GPUs than exist")
    _say(f"  huge asks for {n_gpus + 1} GPUs on a {n_gpus}-GPU machine: refused at submit")
    huge = c.submit([huge_spec], force=True)[0]
    tour.huge = huge["id"]
    _say(f"  {tour.huge} huge: with --force it is queued, and waits saying why")
    tour.jobs.append(huge)


def _wait_for_the_end(c: Client, tour: _Tour, timeout: float) -> None:
    ids, huge = tour.ids, tour.huge
    _until_looked_at(c, ids)
    _show_queue(c, ids, "the queue right after submitting")
    for jid in (tour.urgent, huge):
        _say(f"$ rota why {jid}\n  {why_sentence(c.why(jid))}")

    _step("6. waiting for the jobs to finish")
    deadline = time.monotonic() + timeout
    res = c.wait(tour.urgent, timeout=timeout)
    _show_queue(c, ids, f"the queue when 'urgent' {res['state']}")
    for jid in ids:
        if jid != huge:
            c.wait(jid, timeout=max(0.1, deadline - time.monotonic()))
    c.cancel(huge)
    _say(f"cancelled job {huge} (it could never start here)")


def _wrap_up(c: Client, tour: _Tour, t0: float, stays: bool) -> None:
    flaky = tour.flaky
    console.print(_summary(c, tour.ids, t0))
    log = c.logs(flaky)["data"]
    _say(f"$ rota logs {flaky}\n" + "".join(f"  {line}\n" for line in log.splitlines()))
    _say(f"done in {time.time() - t0:.0f}s.")
    if stays:
        _say(f"Look around: `rota show {flaky}` (attempts and timeline), "
             "`rota queue --all`, `rota gpus`.")
    else:
        _say("`rota demo --keep` leaves the daemon running to look around afterwards.")


def run_demo(c: Client, timeout: float, *, stays: bool = True) -> list[int]:
    """Submit the tour's jobs, narrate, wait; returns the ids of the demo's jobs."""
    n_gpus = _gpus_for_demo(c)
    tmp = Path(tempfile.mkdtemp(prefix="rota-demo-"))
    tour = _Tour(base={"cwd": str(tmp), "tags": ["demo"], "grace": 2.0},
                 marker=tmp / "marker")
    t0 = time.time()
    try:
        _sharing_and_priorities(c, tour, n_gpus)
        _sweep_and_retry(c, tour)
        _refused_or_forced(c, tour, n_gpus)
        _wait_for_the_end(c, tour, timeout)
        _wrap_up(c, tour, t0, stays)
        return tour.ids
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def demo(simulate: str = typer.Option("4x24G", help="simulated GPUs if a daemon is started"),
         keep: bool = typer.Option(False, "--keep", help="leave the daemon running"),
         timeout: float = typer.Option(120.0, help="give up waiting after this many seconds"),
         json_out: bool = typer.Option(False, "--json", help="print the demo's jobs as JSON"),
         ) -> None:
    """A 30-second tour: sharing, priorities, a sweep, a retry, a waiting job."""
    with run_cli(json_out=json_out):
        if json_out:
            with console.capture():
                _ids, jobs = _run(simulate, keep, timeout)
            sys.stdout.write(__import__("json").dumps({"jobs": jobs}, indent=2,
                                                      default=str) + "\n")
        else:
            _run(simulate, keep, timeout)


def _run(simulate: str, keep: bool, timeout: float) -> tuple[list[int], list[JobDetailAnswer]]:
    with demo_daemon(simulate, keep) as (c, started):
        ids = run_demo(c, timeout, stays=keep or not started)
        return ids, [c.job(i) for i in ids]


def register(app: typer.Typer) -> None:
    """Attach `rota demo` to the `rota` app."""
    app.command()(demo)
