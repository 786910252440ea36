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
#: what submit and why print is one line: no Rich console or tables (which import these)
NO_RICH = ["rich.console", "rich.table", "dataclasses", "inspect"]

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


def loaded(daemon: Any, *args: str) -> tuple[int, set[str]]:
    env = {**os.environ, **daemon.env}
    r = subprocess.run([sys.executable, "-c", _RUN, json.dumps(list(args))], env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    return r.returncode, set(json.loads(r.stdout.rsplit("@@", 1)[1]))


def _hits(mods: set[str], banned: list[str]) -> list[str]:
    return sorted(m for m in mods if any(m == b or m.startswith(b + ".") for b in banned))


@pytest.mark.parametrize(("args", "banned"), [
    (["submit", "--hold", "--gpus", "0", "--name", "budget", "--", "true"], HEAVY + NO_RICH),
    (["why", "1"], HEAVY + NO_RICH),
    (["queue"], [*HEAVY, "rich.table"]),
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
    assert _hits(mods, banned) == [], args


def test_the_check_can_fail(daemon: Any) -> None:
    """--help is Typer's: the same check sees Typer and Rich there."""
    code, mods = loaded(daemon, "submit", "--help")
    assert code == 0
    assert "typer" in mods and "rich.console" in mods
