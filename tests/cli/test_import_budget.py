"""What `rota submit`, `queue`, `show` and `why` load: a structural check, not a timing one.

Each command runs in a fresh Python against the test daemon, as a person's shell runs it
(through the fast lane, rota.cli.fast); afterwards the test looks at sys.modules. The
figures themselves are bench/bench_cli.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

#: never on these commands' path: the web stack, the store, the daemon, the settings
#: parser, the async HTTP client, Typer (and the pydantic adapters it builds per option)
HEAVY = ["httpx", "pydantic_settings", "fastapi", "starlette", "uvicorn", "sqlalchemy",
         "rota.server", "rota.store", "rota.config", "typer", "click", "pydantic", "yaml",
         "rota.core", "rota.jobsfile", "rota.client.models", "rota.client.sync",
         "importlib.metadata", "http.client", "email", "ssl"]
#: what submit and why print is one line: no Rich console or tables (which import these);
#: `rota queue` draws its table without Rich too
NO_RICH = ["rich.console", "rich.table", "dataclasses", "inspect"]
#: standard modules that cost milliseconds each and that no hot command needs: the socket is
#: a plain _socket, paths are os.path strings (rota.home, the client's Endpoint), typing's
#: names are for annotations only (TYPE_CHECKING = False in each module on the path)
DEAR_STDLIB = ["pathlib", "socket", "http", "urllib.request", "ssl", "asyncio", "typing"]

_RUN = """
import json, sys
sys.argv = ["rota", *json.loads(sys.argv[1])]
try:
    from rota.cli.main import app
    app()
finally:
    sys.stderr.flush()
    sys.stdout.write("\\n@@" + json.dumps(sorted(sys.modules)) + "\\n")
"""


def loaded(daemon: Any, *args: str, **extra_env: str) -> tuple[int, set[str]]:
    env = {**os.environ, **daemon.env, **extra_env}
    r = subprocess.run([sys.executable, "-c", _RUN, json.dumps(list(args))], env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    return r.returncode, set(json.loads(r.stdout.rsplit("@@", 1)[1]))


def _hits(mods: set[str], banned: list[str]) -> list[str]:
    return sorted(m for m in mods if any(m == b or m.startswith(b + ".") for b in banned))


@pytest.mark.parametrize(("args", "banned"), [
    (["submit", "--hold", "--gpus", "0", "--name", "budget", "--", "true"], HEAVY + NO_RICH),
    (["why", "1"], HEAVY + NO_RICH),
    (["queue"], [*HEAVY, "rich"]),  # plain lines (rota.cli.styled), no Rich at all
    (["queue", "--json"], HEAVY + NO_RICH),
    (["show", "1"], HEAVY),
])
def test_hot_commands_load_no_heavy_module(daemon: Any, args: list[str],
                                           banned: list[str]) -> None:
    if args[0] in ("why", "show"):  # a job to look at
        loaded(daemon, "submit", "--hold", "--gpus", "0", "--", "true")
    code, mods = loaded(daemon, *args)
    assert code == 0, args
    assert "rota.cli.fast" in mods  # it went through the fast lane
    # `rota show` still draws with Rich, which imports typing itself
    dear = [m for m in DEAR_STDLIB if m != "typing"] if args[0] == "show" else DEAR_STDLIB
    assert _hits(mods, banned + dear) == [], args


def test_a_file_of_specs_loads_no_spec_model(daemon: Any, tmp_path: Any) -> None:
    """`rota submit -f` reads the YAML (yaml, rota.jobsfile, pathlib are its own) and
    leaves checking the specs to the daemon: no pydantic, no rota.core."""
    f = tmp_path / "jobs.yaml"
    f.write_text("".join(f"- {{command: 'true', gpus: 0, hold: true, name: b{i}}}\n"
                         for i in range(3)))
    code, mods = loaded(daemon, "submit", "-f", str(f))
    assert code == 0
    assert "rota.cli.fast" in mods and "rota.jobsfile" in mods
    own = {"yaml", "rota.jobsfile", "pathlib", "dataclasses", "inspect"}
    banned = [m for m in HEAVY + NO_RICH + DEAR_STDLIB if m not in own]
    assert "pydantic" in banned and "rota.core" in banned
    assert _hits(mods, banned) == []


def test_queue_with_running_jobs_loads_no_heavy_module(daemon: Any, until: Any) -> None:
    """A running job's line says how far it is (rota.cli.ml_text, not rota.cli.ml, which
    imports Typer)."""
    env = {**os.environ, **daemon.env}
    sub = subprocess.run([sys.executable, "-m", "rota", "submit", "--gpus", "0", "--json",
                          "--name", "budget-running", "--", "sleep", "60"], env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    jid = json.loads(sub.stdout)["jobs"][0]["id"]
    try:
        until(lambda: daemon.client.job(jid)["state"] == "running")
        code, mods = loaded(daemon, "queue")
        assert code == 0
        assert "rota.cli.ml_text" in mods  # it did describe a running job
        assert _hits(mods, [*HEAVY, "rich", *DEAR_STDLIB]) == []
    finally:
        daemon.client.cancel(jid)


def test_the_check_can_fail(daemon: Any, tmp_path: Any) -> None:
    """--help is Typer's the first time (then it is cached): the same check sees Typer and
    Rich there."""
    code, mods = loaded(daemon, "submit", "--help", XDG_CACHE_HOME=str(tmp_path))
    assert code == 0
    assert "typer" in mods and "rich.console" in mods
