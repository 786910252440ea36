"""The fast lane (rota.cli.fast) reads argv exactly as Typer does, or leaves it to Typer."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from importlib import import_module
from typing import Any

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from rota.cli import fast
from rota.cli.lazy_typer import realize


def typer_kwargs(command: str, args: list[str]) -> dict[str, Any] | None:
    """The keyword arguments Typer calls the command's function with (None: it refused)."""
    module, name, interspersed = fast.HOT[command]
    func = getattr(import_module(module), name)
    realize(func)
    seen: dict[str, Any] = {}

    @functools.wraps(func)
    def record(**kw: Any) -> None:
        seen.update(kw)

    app = typer.Typer()
    settings = {} if interspersed else {"allow_interspersed_args": False}
    app.command(name=command, context_settings=settings)(record)
    app.command(name="other")(lambda: None)
    r = CliRunner().invoke(app, [command, *args])
    return seen if r.exit_code == 0 else None


def fast_kwargs(command: str, args: list[str]) -> dict[str, Any] | None:
    module, name, interspersed = fast.HOT[command]
    func = getattr(import_module(module), name)
    try:
        return fast.parse(func, args, interspersed=interspersed)
    except fast._Decline:
        return None


SAME = [
    ("submit", ["--", "python", "train.py", "--lr", "0.1"]),
    ("submit", ["--gpus", "0.5", "--name=n", "--hold", "python", "a.py", "--gpus", "3"]),
    ("submit", ["--env", "A=1", "--env", "B=2", "--after", "3", "--after", "4", "--", "x"]),
    ("submit", ["--gpu-mem", "20G", "--priority", "-3", "--time-limit", "2h", "--", "x"]),
    ("submit", ["--gpu-type", "A100", "--gpus", "2", "--", "x"]),
    ("submit", ["--gpu-type=NVIDIA-H100", "python", "a.py", "--gpu-type", "T4"]),
    ("submit", ["--no-mlflow", "--tag", "a", "--preemptible", "true"]),
    ("submit", ["--mlflow", "--retries", "2", "--retry-backoff", "10s", "--", "x"]),
    ("submit", ["-f", "jobs.yaml"]),
    ("submit", []),
    ("queue", []),
    ("queue", ["--all", "--user", "bob", "--state", "running", "--state", "held", "--json"]),
    ("queue", ["-a", "--limit", "5"]),
    ("show", ["12"]),
    ("show", ["12", "--json"]),
    ("why", ["--json", "7"]),
]
DECLINED = [
    ("submit", ["--help"]),
    ("submit", ["--gpus", "lots", "--", "x"]),
    ("submit", ["--nonsense", "--", "x"]),
    ("submit", ["--name"]),
    ("submit", ["--gpu-type"]),
    ("queue", ["--limit", "0"]),  # below its min: Typer words the error
    ("queue", ["-aw"]),
    ("show", []),
    ("show", ["1", "2"]),
]


@pytest.mark.parametrize(("command", "args"), SAME)
def test_fast_lane_reads_argv_as_typer_does(command: str, args: list[str]) -> None:
    got = fast_kwargs(command, args)
    assert got is not None, "the fast lane should take this"
    assert got == typer_kwargs(command, args)


@pytest.mark.parametrize(("command", "args"), DECLINED)
def test_anything_else_goes_to_typer(command: str, args: list[str]) -> None:
    assert fast_kwargs(command, args) is None


def test_each_hot_command_is_registered_as_the_lane_runs_it() -> None:
    from rota.cli.main import build

    group = typer.main.get_command(build())
    for command, (module, name, interspersed) in fast.HOT.items():
        cmd = group.commands[command]  # type: ignore[attr-defined]
        func = getattr(import_module(module), name)
        assert cmd.callback.__wrapped__ is func if hasattr(cmd.callback, "__wrapped__") \
            else cmd.callback.__name__ == func.__name__
        assert cmd.context_settings.get("allow_interspersed_args", True) is interspersed


def test_same_answers_both_ways(daemon: Any, rota: Any) -> None:
    """`rota show/why/queue --json` printed by the fast lane (a fresh process, as a shell
    runs it) and by Typer (in this process) are the same."""
    env = {**os.environ, **daemon.env}
    sub = subprocess.run([sys.executable, "-m", "rota", "submit", "--hold", "--gpus", "0",
                          "--name", "both-ways", "--json", "--", "true"], env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    jid = str(json.loads(sub.stdout)["jobs"][0]["id"])
    for args in (["why", jid], ["why", jid, "--json"], ["show", jid, "--json"],
                 ["queue", "--json", "--state", "held"]):
        lane = subprocess.run([sys.executable, "-c",
                               "import sys; from rota.cli import fast; "
                               "assert fast.run(sys.argv[1:])", *args],
                              env=env, capture_output=True, text=True, timeout=60)
        assert lane.returncode == 0, lane.stderr
        assert lane.stdout == rota(*args).stdout, args
    rota("cancel", jid)
