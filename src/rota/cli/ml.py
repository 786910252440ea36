"""ML commands: a job's metrics (and, as they come, checkpoints, estimates, templates)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from rota.cli.common import client, console, emit, run_cli
from rota.cli.fmt import add_row
from rota.cli.job_refs import resolve
from rota.cli.job_view import JOB_ARG
from rota.cli.jobs import fmt_time
from rota.cli.ml_text import ended_text, progress_text
from rota.errors import InvalidSpec, RotaError
from rota.ml.estimate import gib
from rota.printable import printable
from rota.units import format_duration, format_memory, parse_memory

if TYPE_CHECKING:
    from rota.answers import CheckpointsAnswer, JobAnswer, MetricsAnswer
    from rota.ml.advise import Machine

SPARKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 40


def sparkline(values: list[float], width: int = SPARK_WIDTH) -> str:
    """The values as a row of block characters, averaged into at most ``width`` buckets."""
    if not values:
        return ""
    n, w = len(values), min(width, len(values))
    means = [sum(b) / len(b) for b in (values[i * n // w:(i + 1) * n // w] for i in range(w))]
    lo, hi = min(means), max(means)
    if math.isclose(lo, hi):
        return SPARKS[0] * len(means)
    return "".join(SPARKS[round((m - lo) / (hi - lo) * (len(SPARKS) - 1))] for m in means)


#: A trend narrower than this says too little to be worth a column.
MIN_TREND = 8
_NUMBER_COLUMNS = ("last", "at step", "min", "max", "samples")


def _table_width(widths: list[int]) -> int:
    """Characters a boxed Rich table of these column widths takes: each column's padding
    (2) and rule (1), and the closing rule."""
    return sum(widths) + 3 * len(widths) + 1


def metrics_table(data: MetricsAnswer, job: JobAnswer | None = None,
                  width: int | None = None) -> Table | str:
    """Each metric's last value, step, range and count, whole at any ``width`` (the
    terminal's by default): the trend gives up its room first, then the names wrap, and
    where even the numbers do not fit side by side each metric gets a line of its own."""
    series = data["series"]
    head = progress_text(data["progress"], ended_text(job) if job else None)
    if not series:
        return f"job {data['id']}: no metrics yet" + (f" ({head})" if head else "")
    if width is None:
        from rota.cli.fmt import console_width

        width = console_width()
    title = f"job {data['id']}" + (f": {head}" if head else "")
    rows = []
    for name in sorted(series):
        values = [p[1] for p in series[name]]
        step = series[name][-1][0]
        rows.append((name, f"{values[-1]:.6g}", "-" if step is None else str(step),
                     f"{min(values):.6g}", f"{max(values):.6g}", str(len(values)), values))
    numbers = [max(len(col), *(len(r[i + 1]) for r in rows))
               for i, col in enumerate(_NUMBER_COLUMNS)]
    names = max(len("metric"), *(len(r[0]) for r in rows))
    trend = min(SPARK_WIDTH, width - _table_width([names, *numbers, 0]))
    room = width - _table_width([0, *numbers])  # what the names may take without a trend
    if trend < MIN_TREND and room < len("metric"):
        from rota.cli.fmt import wrap_words

        said = [f"{r[0]}: last {r[1]} at step {r[2]}, min {r[3]}, max {r[4]}, {r[5]} "
                + ("sample" if r[5] == "1" else "samples") for r in rows]
        # broken between words here: a terminal would break a number where the line ends
        return "\n".join(part for line in [title, *said] for part in wrap_words(line, width))
    t = Table(title=title, title_justify="left", header_style="bold")
    # numbers never wrap nor shrink; a name too long for the room left folds
    t.add_column("metric", overflow="fold", max_width=min(names, room))
    for col in _NUMBER_COLUMNS:
        t.add_column(col, justify="right", no_wrap=True)
    if trend >= MIN_TREND:
        t.add_column("trend", no_wrap=True)
    for *cells, values in rows:
        add_row(t, *cells, *([sparkline(values, trend)] if trend >= MIN_TREND else []))
    return t


def metrics(job: str = JOB_ARG,
            name: list[str] = typer.Option(None, "--name", "-n",
                                           help="only this metric (repeatable)"),
            json_out: bool = typer.Option(False, "--json",
                                          help="JSON: {series: {name: [[step, value, time, "
                                               "attempt], ...]}, progress}"),
            ) -> None:
    """Metrics read from a job's output (loss, lr, ...): last value, range and a trend line."""
    with run_cli(json_out=json_out), client() as c:
        job_id = resolve(c, job)
        data = c.metrics(job_id, list(name or []))
        row = None if json_out else c.job(job_id)  # has it ended? (no ETA then)
        emit(data, json_out, lambda d: metrics_table(d, row))


def checkpoints_table(data: CheckpointsAnswer) -> Table | str:
    rows = data["checkpoints"]
    if not rows:
        where = data.get("checkpoint_dir")
        if where:  # it has one: nothing saved there since its submit (or not readable)
            return (f"job {data['id']}: no checkpoints found in its --checkpoint-dir "
                    f"{printable(where)} "
                    "(none saved there since it was submitted, or none its account can "
                    "read; rota.job.checkpoint_saved reports one saved elsewhere)")
        return (f"job {data['id']}: no checkpoints found (give the job --checkpoint-dir, or "
                "report them with rota.job.checkpoint_saved)")
    t = Table(title=f"job {data['id']}: checkpoints", title_justify="left", header_style="bold")
    for col in ("step", "size", "saved", "valid", "path"):
        t.add_column(col, justify="right" if col in ("step", "size") else "left",
                     overflow="fold")
    for c in rows:
        mark = " (resume)" if c["path"] == data["resume_from"] else ""
        add_row(t, "-" if c["step"] is None else str(c["step"]), format_memory(c["size"]),
                   fmt_time(c["mtime"], short=True),
                   ("yes" if c["valid"] else "no (being written?)") + mark, c["path"])
    return t


def checkpoints(job: str = JOB_ARG,
                json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """A job's checkpoints (step, size, time) and the one a retry resumes from."""
    with run_cli(json_out=json_out), client() as c:
        emit(c.checkpoints(resolve(c, job)), json_out, checkpoints_table)


DEFAULT_GPU_MEMORY = "80G"


def _here() -> Machine | None:
    """This machine's GPUs and the cluster pools, from the daemon; None without one."""
    from rota.ml.advise import Machine

    try:
        with client() as c:
            gpus = c.gpus()["gpus"]
            pools = {p["name"]: p["health"]["gpus_total"] for p in c.pools()["pools"]
                     if p["engine"] != "local"}
    except RotaError:
        return None
    return Machine(tuple(g["memory_total"] for g in gpus), pools)


def _machine(gpu_memory: str | None, here: Machine | None) -> tuple[int, str]:
    """GPU memory to size for: the option, else this machine's largest GPU, else 80 GiB."""
    if gpu_memory is not None:
        return parse_memory(gpu_memory, field="gpu_memory"), "as --gpu-memory says"
    if here is not None and here.gpu_memory:
        n = len(here.gpu_memory)
        return max(here.gpu_memory), f"the largest GPU of this machine ({n} GPUs)"
    why = "no daemon to ask" if here is None else "this machine has no GPU"
    return parse_memory(DEFAULT_GPU_MEMORY), f"{why}: sized for 80 GiB GPUs " \
        "(--gpu-memory to change)"


def _past_runs(script: Path) -> list[float]:
    """Run times of completed jobs whose command names this script, from the daemon; none
    when it cannot be reached."""
    try:
        with client() as c:
            jobs = c.jobs(states=["completed"], limit=1000)
    except RotaError:
        return []
    return [end - start for j in jobs
            if (start := j["started_at"]) and (end := j["ended_at"])
            and any(Path(word).name == script.name for word in j["command"])]


def advice_text(data: dict[str, Any]) -> str:
    lines = [f"{data['target']}: " + ", ".join(
        x for x in (f"{data['gpus']:g} GPU" + ("" if data["gpus"] == 1 else "s")
                    if data["gpus"] is not None else "",
                    f"{gib(data['gpu_mem'])} each" if data["gpu_mem"] else "",
                    f"time limit {format_duration(data['time_limit'])}"
                    if data["time_limit"] else "") if x)]
    lines += [f"  - {r}" for r in data["reasons"]]
    lines.append(data["here"])
    if data["fits_here"] is False:  # what it needs would be refused: say what would do
        lines.append("what would:")
        for alt in data["alternatives"]:
            if alt["kind"] != "sizing":
                lines.append(f"  - {alt['what']}: {alt['how']}")
            elif alt["fits_here"]:
                lines.append(f"  - {alt['what']}: {_count(alt)}, fits here "
                             f"({alt['how']}; then rota submit "
                             f"{' '.join(alt['submit_options'])} -- ...)")
            else:
                lines.append(f"  - {alt['what']}: {_count(alt)}, does not fit here either")
    elif data["submit_options"]:
        lines.append("suggested: rota submit " + " ".join(data["submit_options"]) + " -- ...")
    return "\n".join(lines)


def _count(alt: dict[str, Any]) -> str:
    n = alt["gpus"]
    return f"{n:g} GPU{'' if n == 1 else 's'}" + (
        f" with {gib(alt['gpu_mem'])}" if alt["gpu_mem"] else "")


def estimate(target: str = typer.Argument(..., metavar="MODEL|CONFIG|SCRIPT.py",
                                          help="a model name (qwen2.5-7b), a Hugging Face "
                                               "config.json or its folder, or a script"),
             mode: str = typer.Option(None, help="inference, lora, qlora or full (default: "
                                                 "inference; for a script, what its code does)"),
             dtype: str = typer.Option("bf16", help="weights' dtype: fp32, bf16, fp16, int8, "
                                                    "int4"),
             gpu_memory: str = typer.Option(None, "--gpu-memory",
                                            help="size for GPUs of this much memory (default: "
                                                 "this machine's)"),
             json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """How many GPUs, how much GPU memory and how long a model or a script needs, and why."""
    from rota.cli.common import load
    from rota.ml import advise
    from rota.ml.estimate import LlmTable
    from rota.ml.scan import scan

    with run_cli(json_out=json_out):
        table = LlmTable.load(load().llm_config_path)
        here = _here()
        memory, where = _machine(gpu_memory, here)
        path = Path(target)
        if path.suffix == ".py" and path.is_file():
            facts = scan(path.read_text(encoding="utf-8", errors="replace"), name=path.name)
            a = advise.for_script(facts, name=path.name, table=table, gpu_memory=memory,
                                  mode=mode, dtype=dtype, past_runs=_past_runs(path))
        elif (path / "config.json").is_file() or (path.suffix == ".json" and path.is_file()):
            cfg_path = path / "config.json" if path.is_dir() else path
            try:
                config = json.loads(cfg_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise InvalidSpec(f"{cfg_path}: cannot read it as JSON: {e}",
                                  field="config") from None
            a = advise.for_config(config, label=str(cfg_path), gpu_memory=memory,
                                  mode=mode or "inference", dtype=dtype)
        else:
            a = advise.for_model(target, table=table, gpu_memory=memory,
                                 mode=mode or "inference", dtype=dtype)
        a.reasons.append(f"GPU memory: {gib(memory)}, {where}")
        ok = None if here is None else advise.fits(a.gpus, a.gpu_mem, memory, here)
        alts = advise.alternatives(a, target, here) if here is not None and not ok else []
        emit({"target": target, **a.to_json(), "submit_options": a.submit_options(),
              "fits_here": ok, "here": advise.here_text(a, here, memory),
              "alternatives": [x.to_json() for x in alts]}, json_out, advice_text)


def templates(json_out: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Ready-made jobs that really train: `rota submit --template NAME --set KEY=VALUE`."""
    from rich.console import Group

    from rota.templates import TEMPLATES

    data = [{"name": t.name, "summary": t.summary, "needs": t.needs,
             "options": [{"name": o.name, "default": o.default, "help": o.help}
                         for o in t.options]} for t in TEMPLATES.values()]

    def show(items: list[dict[str, Any]]) -> Group:
        parts: list[Any] = []
        for t in items:
            table = Table(title=f"{t['name']}: {t['summary']}", title_justify="left",
                          caption=f"needs {t['needs']}", caption_justify="left",
                          header_style="bold")
            for col in ("option", "default", "meaning"):
                table.add_column(col, overflow="fold")
            for o in t["options"]:
                add_row(table, o["name"], str(o["default"]), o["help"])
            parts.append(table)
        return Group(*parts)

    with run_cli(json_out=json_out):
        emit(data, json_out, show)


def tensorboard(job: str = JOB_ARG,
                port: int = typer.Option(6006, min=1, max=65535),
                host: str = typer.Option("127.0.0.1", help="address to serve on"),
                json_out: bool = typer.Option(False, "--json",
                                              help="first a JSON line: {id, url, logdir, "
                                                   "command}; then TensorBoard runs")) -> None:
    """Serve a job's TensorBoard logs (its tensorboard_dir) with TensorBoard, if installed."""
    with run_cli(json_out=json_out), client() as c:
        job_id = resolve(c, job)
        spec = c.job(job_id)["spec"]
        where = spec["tensorboard_dir"]
        if not where:
            raise InvalidSpec(f"job {job_id} has no tensorboard_dir; submit it with "
                              "--tensorboard-dir DIR", field="tensorboard_dir")
        logdir = where if os.path.isabs(where) else os.path.join(spec["cwd"] or ".", where)
        exe = shutil.which("tensorboard")
        if exe is not None:
            argv = [exe]
        elif importlib.util.find_spec("tensorboard") is not None:  # installed, not on PATH
            argv = [sys.executable, "-m", "tensorboard.main"]
        else:
            raise InvalidSpec("TensorBoard is not installed here: pip install tensorboard",
                              field="tensorboard")
        argv += ["--logdir", logdir, "--port", str(port), "--host", host]
        url = f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"
        said = {"id": job_id, "url": url, "logdir": logdir, "command": argv}
        if json_out:  # one line, before TensorBoard's own output follows
            print(json.dumps(said))
        else:
            console.print(f"TensorBoard for job {job_id} on {url} ({logdir})")
    sys.stdout.flush()
    os.execv(argv[0], argv)  # it takes over the terminal; Ctrl-C stops it


def register(app: typer.Typer) -> None:
    app.command()(metrics)
    app.command()(checkpoints)
    app.command()(estimate)
    app.command()(templates)
    app.command()(tensorboard)
