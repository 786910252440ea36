"""`rota add`: append a line to the watched jobs file, the original tool's way.

A line the daemon refuses is not left behind: what can be checked here is checked before
writing (the line reads back as the same job; a conda env needs conda), and a line the
running daemon still rejects is taken out again, with the daemon's error.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from rota.cli.common import emit, load, run_cli
from rota.cli.fmt import fail
from rota.errors import DaemonUnavailable, InvalidSpec

if TYPE_CHECKING:
    from rota.client import RawClient as Client


def _append_line(path: Path, line: str) -> tuple[int, int, int]:
    """Append one line (on a line of its own); its line number, and the file's size before
    and after (to take it out again)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        f.seek(0)
        data = f.read()
        prefix = b"\n" if data and not data.endswith(b"\n") else b""
        f.write(prefix + line.encode("utf-8") + b"\n")
        end = f.tell()
    return data.count(b"\n") + (1 if prefix else 0) + 1, len(data), end


def _take_back(path: Path, before: int, after: int) -> bool:
    """Cut the file back to ``before`` bytes if nothing was written after our line."""
    with open(path, "r+b") as f:
        if os.fstat(f.fileno()).st_size != after:
            return False
        f.truncate(before)
    return True


def _check_here(conda: str | None) -> None:
    """What the daemon on this machine would refuse, checked before the line is written."""
    import shutil

    if conda and not (os.environ.get("CONDA_EXE") or shutil.which("conda")):
        raise InvalidSpec(f"conda: environment {conda!r} requested but conda is not installed "
                          "on this machine (leave out --conda, or install conda); nothing "
                          "was added", field="conda")


def add(
    priority: int = typer.Argument(..., help="lower number runs first (with --again: a line "
                                             "number)"),
    script: str = typer.Argument(None, help="script path (.py runs with python, .sh with bash)"),
    args: list[str] = typer.Argument(None, help="the script's arguments (after `--`)"),
    again: bool = typer.Option(False, "--again",
                               help="run these lines of the jobs file again, although they "
                                    "ran before: rota add --again 3 5"),
    conda: str = typer.Option(None, help="conda environment to run it in"),
    allowed_gpus: str = typer.Option(None, "--allowed-gpus", metavar="GPUS",
                                     help="e.g. 0-3 or 4,5,6,7"),
    jobs_file: Path = typer.Option(None, "--jobs-file", metavar="FILE",
                                   help="the jobs file (default: the one the daemon watches)"),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Append a line to the watched jobs file: `rota add 1 train.py -- --lr 0.1`."""
    from rota.cli.common import client
    from rota.jobsfile import format_jobs_line

    with run_cli(json_out=json_out):
        if again:
            _run_again([priority, *([script] if script is not None else []), *(args or [])],
                       json_out=json_out)
            return
        if script is None:
            raise InvalidSpec("give the priority and the script: rota add 1 train.py -- "
                              "--lr 0.1 (or --again LINE... to run lines again)", field="script")
        settings = load()
        if not os.path.isabs(script) and os.path.exists(script):
            script = os.path.abspath(script)  # the daemon runs it from its own directory
        line = format_jobs_line(priority, script, conda, list(args or []), allowed_gpus)
        _check_here(conda)
        c = client()
        watched: str | None = None
        with contextlib.suppress(DaemonUnavailable):
            watched = c.jobs_file()["path"]
        path = Path(jobs_file).absolute() if jobs_file else Path(watched or
                                                                   settings.jobs_file_path)
        number, before, after = _append_line(path, line)
        out: dict[str, Any] = {"path": str(path), "line": number, "text": line,
                               "daemon": watched is not None, "job": None, "error": None}
        notes: list[str] = [f"added line {number} to {path}: {line}"]
        if watched is None:
            notes.append("no daemon is running; it will queue the line when it starts "
                         "(`rota server --detach`)")
        elif Path(watched) != path:
            notes.append(f"the daemon watches {watched}, not this file")
        else:
            _queue_it(c, out, notes, before, after)
        c.close()
        if out["error"]:
            if json_out:
                emit(out, True, str)
            else:
                fail(f"{path}:{number}: {out['error']}")
            raise typer.Exit(2)
        emit(out, json_out, lambda _: "\n".join(notes))


def _queue_it(c: Client, out: dict[str, Any], notes: list[str], before: int,
              after: int) -> None:
    """Have the daemon read the file now; take the line out again if it refuses it."""
    path, number = Path(out["path"]), out["line"]
    status = c.reload_jobs_file()
    mine = [e for e in status["errors"] if e["line"] == number]
    source = f"{path}:{number}"
    for jid in status["queued"]:
        if c.job(jid)["source"] == source:
            out["job"] = jid
    if mine:
        removed = _take_back(path, before, after)
        out["error"] = mine[0]["message"] + (" (the line was taken out again)" if removed
                                             else " (the line is still in the file)")
        out["removed"] = removed
        if removed:
            c.reload_jobs_file()
    elif out["job"] is not None:
        notes.append(f"queued as job {out['job']}")
    elif ran := [r for r in status.get("ran_before", []) if r["line"] == number]:
        notes.append(f"not queued: the same line ran before as job {ran[0]['job']} (now "
                     f"{ran[0]['state']}); `rota add --again {number}` runs it again")
    else:
        notes.append("not queued: an identical job is already queued")


def _run_again(words: list[object], *, json_out: bool) -> None:
    """``rota add --again 3 5``: the daemon runs those lines of its jobs file again."""
    from rota.cli.common import client

    lines = []
    for w in words:
        text = str(w)
        if not text.isdigit() or int(text) < 1:
            raise InvalidSpec(f"--again: {text!r} is not a line number of the jobs file",
                              field="again")
        lines.append(int(text))
    with client() as c:
        status = c.reload_jobs_file(again=lines)
        path = status["path"]
        sources = {j: c.job(j)["source"] for j in status["queued"]}
    queued = {int(src.rsplit(":", 1)[1]): j for j, src in sources.items()
              if src.startswith(f"{path}:")}
    errors = {e["line"]: e["message"] for e in status["errors"]}
    rows: list[dict[str, Any]] = [{"line": n, "job": queued.get(n), "error": errors.get(n)}
                                  for n in lines]
    emit({"path": path, "lines": rows}, json_out, lambda _: "\n".join(
        f"{path}:{r['line']}: queued again as job {r['job']}" for r in rows if r["job"])
        or None)
    if not json_out:
        for r in rows:
            if r["job"] is None:
                fail(f"{path}:{r['line']}: {r['error'] or 'not queued'}")
    if any(r["job"] is None for r in rows):
        raise typer.Exit(2)
