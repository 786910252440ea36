"""`rota sim`: replay a trace on a simulated cluster under one or more policies."""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from rota.cli.common import Plain, emit, run_cli
from rota.cli.fmt import add_row
from rota.errors import InvalidSpec

if TYPE_CHECKING:
    from rota.config import PrioritySettings
    from rota.sim.cluster import Cluster
    from rota.sim.engine import Shares
    from rota.sim.metrics import Metrics, Spread
    from rota.sim.trace import SimJob

HISTORY_PAGE = 1000


def sim(trace: Path = typer.Option(None, metavar="FILE", help="the trace to replay"),
        fmt: str = typer.Option(None, "--format",
                                help="tiresias | openb | csv | json (default: guessed)"),
        from_history: str = typer.Option(None, metavar="AGE",
                                         help="replay this daemon's finished jobs of the "
                                              "last AGE (e.g. 30d) instead of a file"),
        synthetic: int = typer.Option(None, metavar="N", min=1,
                                      help="replay N synthetic openb-like jobs (--seed)"),
        gpus: str = typer.Option("8x80G", help="GPUs of one node: COUNTxMEMORY"),
        nodes: int = typer.Option(1, min=1, help="how many such nodes"),
        cluster: Path = typer.Option(None, metavar="FILE",
                                     help="the trace's cluster file instead (Tiresias "
                                          "n32g4.csv, openb node list)"),
        policy: str = typer.Option("backfill",
                                   help="fifo | priority | backfill | sjf | fairshare"),
        compare: str = typer.Option(None, metavar="P1,P2,...",
                                    help="run each of these policies and compare them"),
        seed: int = typer.Option(0, help="seed of --synthetic's trace"),
        load: float = typer.Option(0.9, help="--synthetic: offered share of GPU time"),
        expected: str = typer.Option("history",
                                     help="expected run times: history (the daemon's: "
                                          "time limit, else p90 of the name's last runs) "
                                          "| limit | oracle (true run time) | none"),
        half_life: str = typer.Option("7d", help="fairshare: usage counts half after this "
                                      "long ([priority] half_life)"),
        weights: str = typer.Option(None, metavar="K=V,...",
                                    help="fairshare: [priority] weights, e.g. "
                                         "weight_age=0,weight_fair_share=1000"),
        shares: str = typer.Option(None, metavar="NAME=N,...",
                                   help="fairshare: users' shares (project:NAME=N for a "
                                        "project's); default 1 each, or with "
                                        "--from-history the daemon's own (rota share)"),
        save_trace: Path = typer.Option(None, metavar="FILE",
                                        help="also write the trace replayed as Rota JSON "
                                             "(e.g. to keep --from-history)"),
        json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Replay a trace through the daemon's own scheduler on a simulated cluster."""
    with run_cli(json_out=json_out):
        from rota.sim import cluster as clusters
        from rota.sim import policies as pol
        from rota.sim.engine import simulate
        from rota.sim.metrics import measure

        jobs = _trace(trace, fmt, from_history, synthetic, seed, load, nodes, gpus)
        if save_trace is not None:
            import json

            from rota.sim.traces import as_rota_json

            save_trace.write_text(json.dumps(as_rota_json(jobs), indent=1) + "\n")
        where = clusters.load_cluster(cluster) if cluster else \
            clusters.parse_cluster(gpus, nodes)
        names = [p for p in (compare or policy).split(",") if p.strip()]
        chosen = [pol.policy_named(p) for p in names]
        priority = _priority(half_life, weights)
        given = _shares(shares) if shares is not None else \
            _daemon_shares() if from_history is not None else None
        results = []
        for sp in chosen:
            t0 = time.perf_counter()
            m = measure(simulate(jobs, where, sp, priority=priority, expected=expected,
                                 shares=given))
            results.append((m, time.perf_counter() - t0))
        emit({"trace": _label(trace, from_history, synthetic), "jobs": len(jobs),
              "cluster": where.describe(), "gpus": where.gpus,
              "runs": [{**m.as_dict(), "seconds": round(s, 3)} for m, s in results]},
             json_out, lambda d: _view(d, [m for m, _ in results], where))


def _priority(half_life: str, weights: str | None) -> PrioritySettings:
    """The [priority] settings fair share runs under, as the daemon reads them."""
    from pydantic import ValidationError

    from rota.config import PrioritySettings

    given: dict[str, Any] = {"half_life": half_life}
    for item in (weights or "").split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        if not eq:
            raise InvalidSpec(f"--weights {item!r}: give KEY=VALUE", field="weights")
        given[key.strip()] = value.strip()
    try:
        return PrioritySettings.model_validate(given)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(map(str, err["loc"])) or "priority"
        raise InvalidSpec(f"[priority] {where}: {err['msg']}", field="priority") from None


def _shares(text: str) -> Shares:
    """--shares alice=2,bob=1,project:vision=3"""
    from rota.sim.engine import Shares

    users: dict[str, float] = {}
    projects: dict[str, float] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        name = key.strip().removeprefix("project:")
        try:
            n = float(value)
        except ValueError:
            n = float("nan")
        if not eq or not name or not (n > 0 and math.isfinite(n)):
            raise InvalidSpec(f"--shares {item.strip()!r}: give NAME=N with N > 0 (a "
                              "project's as project:NAME=N)", field="shares")
        (projects if key.strip().startswith("project:") else users)[name] = n
    return Shares(users, projects)


def _daemon_shares() -> Shares:
    """The shares set on this daemon (``rota share set``), for a replay of its history."""
    from rota.cli.common import client
    from rota.sim.engine import Shares

    with client() as c:
        accounts = c.shares()["accounts"]
    return Shares({a["name"]: a["shares"] for a in accounts if a["kind"] == "user"},
                  {a["name"]: a["shares"] for a in accounts if a["kind"] == "project"})


def _trace(path: Path | None, fmt: str | None, history: str | None, synthetic: int | None,
           seed: int, load: float, nodes: int, gpus: str) -> list[SimJob]:
    given = [x for x in (path, history, synthetic) if x is not None]
    if len(given) != 1:
        raise InvalidSpec("give one of --trace FILE, --from-history AGE, --synthetic N",
                          field="trace")
    if path is not None:
        from rota.sim.traces import load as load_trace

        return load_trace(path, fmt)
    if synthetic is not None:
        from rota.sim.cluster import parse_cluster
        from rota.sim.synthetic import synthetic as make

        if not 0 < load <= 10:
            raise InvalidSpec(f"--load {load:g}: give a share of GPU time in (0, 10]",
                              field="load")
        return make(synthetic, parse_cluster(gpus, nodes).gpus, load, random.Random(seed))
    assert history is not None
    return _history(history)


def _history(age: str) -> list[SimJob]:
    """This daemon's finished jobs (GET /v1/jobs, newest first, a page at a time)."""
    from rota.cli.common import client
    from rota.sim.traces import HISTORY_STATES, from_history
    from rota.units import parse_duration

    since = time.time() - parse_duration(age, field="from_history")
    got: list[Any] = []
    with client() as c:
        before: int | None = None
        while True:
            params: dict[str, Any] = {"limit": HISTORY_PAGE, "state": list(HISTORY_STATES)}
            if before is not None:
                params["before"] = before
            page = c.request("GET", "/v1/jobs", params=params)
            got += page["jobs"]
            before = page.get("next")
            if before is None or (page["jobs"] and page["jobs"][-1]["created_at"] < since):
                break
    return from_history(got, since)


def _label(path: Path | None, history: str | None, synthetic: int | None) -> str:
    if path is not None:
        return str(path)
    return f"history of the last {history}" if history else f"synthetic ({synthetic} jobs)"


def _s(x: float | None) -> str:
    """Seconds, compact: the table's rows say the unit."""
    if x is None or math.isnan(x):
        return "n/a"
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def _spread(s: Spread | None) -> str:
    """mean/p50/p90 of an error."""
    return "n/a" if s is None else f"{_s(s.mean)}/{_s(s.p50)}/{_s(s.p90)}"


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _view(d: dict[str, Any], runs: list[Metrics], where: Cluster) -> Any:
    """One column per policy, one row per figure (docs/simulator.md defines them)."""
    from rich.box import SIMPLE_HEAD
    from rich.console import Group
    from rich.table import Table

    t = Table(box=SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    t.add_column("", no_wrap=True)
    for m in runs:
        t.add_column(m.policy, justify="right", no_wrap=True)
    rows: list[tuple[str, list[str]]] = [
        ("finished", [f"{m.finished}/{m.jobs}" for m in runs]),
        ("never started", [str(m.never_started) for m in runs]),
        ("timed out", [str(m.timed_out) for m in runs]),
        ("JCT mean s", [_s(m.jct.mean) for m in runs]),
        ("JCT p50 s", [_s(m.jct.p50) for m in runs]),
        ("JCT p99 s", [_s(m.jct.p99) for m in runs]),
        ("wait mean s", [_s(m.queueing.mean) for m in runs]),
        ("wait p50 s", [_s(m.queueing.p50) for m in runs]),
        ("wait p99 s", [_s(m.queueing.p99) for m in runs]),
        ("makespan s", [_s(m.makespan) for m in runs]),
        ("makespan bound s", [_s(m.makespan_bound) for m in runs]),
        ("utilisation", [_share(m.utilisation) for m in runs]),
        ("utilisation bound", [_share(m.utilisation_bound) for m in runs]),
        ("fragmentation", [_share(m.fragmentation) for m in runs]),
        ("fairness worst", ["n/a" if m.fairness_worst is None
                            else f"{m.fairness_worst:.2f}x" for m in runs]),
        ("fairness Jain", ["n/a" if m.fairness_jain is None
                           else f"{m.fairness_jain:.3f}" for m in runs]),
        ("start est. err s", [_spread(m.estimate_error) for m in runs]),
        ("  jobs estimated", [str(m.estimated) for m in runs]),
    ]
    for label, cells in rows:
        add_row(t, label, *cells)
    head = Plain(f"{d['jobs']} jobs from {d['trace']} on {where.describe()}")
    from rich.text import Text

    return Group(Text(head), t)


def register(app: typer.Typer) -> None:
    app.command()(sim)
