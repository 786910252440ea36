"""A job's model card and training report (`rota card JOB`): Markdown, and HTML with its
loss curve drawn as an SVG image, from what the store holds of the job: its command and
settings, the git commit it ran, the dataset versions it read, its attempts, the metrics
read from its output, its newest checkpoint, its saved outputs and what it cost. Saved with
its outputs (``rota-card/``) and logged to its MLflow run when it ends.

``facts`` reads the store only (it runs on the daemon's event loop); ``with_git`` may run
git, so it runs on a worker thread; the rest is pure. Git runs as the job's account (a
root daemon's jobs: their owners'), so a card shows only what its owner could read itself.
"""

from __future__ import annotations

import html
import re
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from rota.backends.base import SAFE_PATH, RunAs
from rota.core.usage import cost, gpu_seconds
from rota.errors import RotaError
from rota.ml.gitinfo import GitInfo, git_info
from rota.store.repo import Store
from rota.units import format_memory

#: points of the curve drawn (samples are thinned evenly past it)
CURVE_POINTS = 400
#: which metric the curve shows: the first of these a job reports, else its first metric
CURVE_PREFERENCE = ("loss", "train_loss", "eval_loss", "val_loss")
#: where a card's git state came from (CardFacts.git["source"])
GIT_AT_SUBMIT, GIT_AT_CARD = "submit", "card"
#: a resolved dataset reference, as intake stores it in the spec (rota.server.storage.datasets)
_RESOLVED_REF = re.compile(r"^(?P<owner>[^/]+)/(?P<name>[^:]+):v(?P<version>[0-9]+)$")


@dataclass
class CardFacts:
    job: dict[str, Any]  # id, name, user, project, state, created_at, ended_at, end_reason
    spec: dict[str, Any]
    attempts: int
    gpu_hours: float
    cost: float | None  # None: no priced tier
    metrics: dict[str, list[tuple[int | None, float]]]  # name -> (step, value), in order
    checkpoint: str | None
    outputs: list[dict[str, Any]] = field(default_factory=list)  # path, size[, sha256]
    # ref, digest, files, bytes, note ("removed": digest and sizes None)
    datasets: list[dict[str, Any]] = field(default_factory=list)
    # commit, branch, dirty, remote (no credentials), source (GIT_AT_SUBMIT or GIT_AT_CARD)
    git: dict[str, Any] | None = None
    default_prices: bool = False  # its cost is at Rota's shipped prices (core.tiers)


def facts(store: Store, job_id: int, now: float,
          outputs: list[dict[str, Any]] | None = None, *,
          default_prices: bool = False) -> CardFacts:
    """What the store holds of the job; its git state only as recorded at submit (see
    ``with_git``). ``default_prices``: the tiers are Rota's shipped ones (its cost says
    so)."""
    row = store.get_job(job_id)
    usage = store.job_usage(job_id)
    priced = [u for u in usage if u.price is not None]
    series: dict[str, list[tuple[int | None, float]]] = {}
    after = 0
    while True:  # every sample, a page at a time
        page = store.metrics(job_id, after_id=after, limit=10_000)
        for m in page:
            series.setdefault(m.name, []).append((m.step, m.value))
        if len(page) < 10_000:
            break
        after = page[-1].id
    checkpoint = ((row.progress or {}).get("checkpoint") or {}).get("path")
    return CardFacts(
        job={"id": row.id, "name": row.name or f"job {row.id}", "user": row.user,
             "project": row.project, "state": row.state, "created_at": row.created_at,
             "ended_at": row.ended_at, "end_reason": row.end_reason},
        spec=dict(row.spec), attempts=len(usage),
        gpu_hours=sum(gpu_seconds(u, 0.0, now, now) for u in usage) / 3600,
        cost=sum(cost(u, 0.0, now, now) for u in priced) if priced else None,
        metrics=series, checkpoint=checkpoint, outputs=outputs or [],
        datasets=dataset_versions(store, row.spec.get("datasets") or []),
        git=recorded_git(row.tracking), default_prices=default_prices)


def dataset_versions(store: Store, refs: list[str]) -> list[dict[str, Any]]:
    """The versions a job read, by the refs its spec holds (resolved at submit); one
    removed since (or a ref not resolved) is listed without its digest, with a note."""
    out = []
    for ref in refs:
        m = _RESOLVED_REF.match(ref)
        rows = store.dataset_versions(owner=m["owner"], name=m["name"]) if m else []
        row = next((r for r in rows if m and r.version == int(m["version"])), None)
        if row is None:
            out.append({"ref": ref, "digest": None, "files": None, "bytes": None,
                        "note": "removed" if m else "not resolved"})
        else:
            out.append({"ref": ref, "digest": row.digest, "files": row.files,
                        "bytes": row.bytes, "note": None})
    return out


def recorded_git(tracking: dict[str, Any] | None) -> dict[str, Any] | None:
    """The git state the job's MLflow run was made with (rota.server.tracking.trackers keeps it
    beside the run's id), so the card need not ask MLflow for its tags."""
    git = ((tracking or {}).get("mlflow") or {}).get("git")
    return {**git, "source": GIT_AT_SUBMIT} if git else None


@dataclass(frozen=True)
class NoAccount:
    """The job's account cannot be had (gone, or its mapping changed): nothing is read
    for it."""

    why: str


#: whose rights read a job's files: its account, the daemon's own (None), or nobody's
Account = RunAs | None | NoAccount


def account_of(run_as: Callable[[str], RunAs | None], user: str) -> Account:
    """The account ``user``'s job runs as (``run_as``: the Launcher's, on the loop)."""
    try:
        return run_as(user)
    except RotaError as e:
        return NoAccount(str(e))


def git_as(cwd: str, account: Account) -> GitInfo | None:
    """The repository state of ``cwd`` as git run by ``account`` finds it: in a clean
    environment (the account's home, no daemon variables), taking no lock in the
    repository; None where that account cannot read it."""
    if isinstance(account, NoAccount):
        return None
    if account is None:  # the daemon's own account is the job's
        return git_info(cwd)
    env = {"PATH": SAFE_PATH, "HOME": account.home, "USER": account.user,
           "LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"}
    return git_info(cwd, how={**account.popen_args(), "env": env})


def with_git(f: CardFacts, account: Account) -> CardFacts:
    """The card with its git state: as recorded at submit, else read now from its working
    directory by git run as ``account`` (the job's). Blocks up to seconds: never on the
    event loop."""
    cwd = f.spec.get("cwd")
    if f.git is not None or not cwd:
        return f
    found = git_as(cwd, account)
    return replace(f, git={**asdict(found), "source": GIT_AT_CARD} if found else None)


def curve_metric(metrics: dict[str, list[tuple[int | None, float]]]) -> str | None:
    for name in CURVE_PREFERENCE:
        if metrics.get(name):
            return name
    return next((n for n, pts in metrics.items() if pts), None)


def curve_svg(name: str, points: list[tuple[int | None, float]], width: int = 640,
              height: int = 240) -> str:
    """The metric against its step (its sample number where no step was read)."""
    if len(points) > CURVE_POINTS:  # evenly thinned, the last one kept
        step = len(points) / CURVE_POINTS
        points = [points[int(i * step)] for i in range(CURVE_POINTS - 1)] + [points[-1]]
    xs = [float(s if s is not None else i) for i, (s, _) in enumerate(points)]
    ys = [v for _, v in points]
    pad = 36
    x0, x1 = min(xs), max(xs) or 1.0
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    coords = " ".join(
        f"{pad + (x - x0) / (x1 - x0) * (width - 2 * pad):.1f},"
        f"{height - pad - (y - y0) / (y1 - y0) * (height - 2 * pad):.1f}"
        for x, y in zip(xs, ys, strict=True))
    label = html.escape(name)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{label} by step">'
            f'<rect width="{width}" height="{height}" fill="white"/>'
            f'<polyline fill="none" stroke="#4e79a7" stroke-width="1.5" points="{coords}"/>'
            f'<text x="{pad}" y="16" font-family="sans-serif" font-size="12">{label}: '
            f'{ys[0]:.4g} to {ys[-1]:.4g} (min {min(ys):.4g})</text>'
            f'<text x="{pad}" y="{height - 8}" font-family="sans-serif" font-size="11">'
            f'step {x0:g} to {x1:g}</text></svg>')


def _rows(f: CardFacts) -> list[tuple[str, str]]:
    sp, job = f.spec, f.job
    argv = sp.get("command") or []
    command = argv[0] if sp.get("shell") else shlex.join(argv)
    env = sp.get("env") or {}
    secret = set(sp.get("secret_env") or [])
    rows = [("Command", f"`{command}`"), ("Working directory", sp.get("cwd") or "-"),
            ("State", f"{job['state']}" + (f" ({job['end_reason']})"
                                           if job.get("end_reason") else "")),
            ("User", job["user"]), ("Project", job.get("project") or "-"),
            ("GPUs", f"{sp.get('gpus', 0):g}" + (f" of {sp['gpu_type']}"
                                                 if sp.get("gpu_type") else "")),
            ("Attempts", str(f.attempts)), ("GPU-hours", f"{f.gpu_hours:.3f}"),
            ("Cost (default prices)" if f.default_prices and f.cost is not None else "Cost",
             "-" if f.cost is None else f"{f.cost:.2f}"),
            ("Environment", ", ".join(f"{k}=***" if k in secret else f"{k}={v}"
                                      for k, v in sorted(env.items())) or "-"),
            ("Image", sp.get("image") or "-"), ("Tags", ", ".join(sp.get("tags") or []) or "-"),
            ("Newest checkpoint", f.checkpoint or "-")]
    return rows


def _metric_rows(f: CardFacts) -> list[tuple[str, str, str, str, str]]:
    out = []
    for name in sorted(f.metrics):
        pts = f.metrics[name]
        values = [v for _, v in pts]
        out.append((name, f"{values[-1]:.6g}", f"{min(values):.6g}", f"{max(values):.6g}",
                    str(len(values))))
    return out


def as_json(f: CardFacts) -> dict[str, Any]:
    """The card's facts for a program (`rota card --json`): what the Markdown shows, each
    metric as its last, least and largest value (secret variables' values never)."""
    sp, secret = f.spec, set(f.spec.get("secret_env") or [])
    metrics = {name: {"last": pts[-1][1], "min": min(v for _, v in pts),
                      "max": max(v for _, v in pts), "samples": len(pts),
                      "last_step": pts[-1][0]} for name, pts in sorted(f.metrics.items())}
    return {**f.job, "command": sp.get("command") or [], "shell": bool(sp.get("shell")),
            "cwd": sp.get("cwd"), "gpus": sp.get("gpus", 0), "gpu_type": sp.get("gpu_type"),
            "env": {k: "***" if k in secret else v
                    for k, v in sorted((sp.get("env") or {}).items())},
            "image": sp.get("image"), "tags": sp.get("tags") or [], "attempts": f.attempts,
            "gpu_hours": f.gpu_hours, "cost": f.cost, "default_prices": f.default_prices,
            "checkpoint": f.checkpoint,
            "metrics": metrics, "outputs": f.outputs, "datasets": f.datasets, "git": f.git}


def _git_rows(git: dict[str, Any]) -> list[tuple[str, str]]:
    return [("Commit", f"`{git['commit']}`"), ("Branch", git.get("branch") or "-"),
            ("Uncommitted changes", "yes" if git.get("dirty") else "no"),
            ("Remote", git.get("remote") or "-")]


def _git_source(git: dict[str, Any]) -> str:
    if git.get("source") == GIT_AT_SUBMIT:
        return "Recorded at submit (the job's MLflow run has the same tags)."
    return ("Read when this card was made, from its working directory: it may have changed "
            "since the job ran.")


_NO_GIT = ("No git commit known: its working directory is not a git repository its owner "
           "can read (or git is not installed where the daemon runs).")


def _data_rows(f: CardFacts) -> list[tuple[str, str, str, str | None, str]]:
    """ref, files, size, the digest's first 16 hex digits (None: not known) and a note."""
    return [(d["ref"], "-" if d["files"] is None else str(d["files"]),
             format_memory(d["bytes"]), d["digest"][:16] if d["digest"] else None,
             d.get("note") or "") for d in f.datasets]


def _outputs_note(f: CardFacts) -> str:
    """What a card without its outputs listed says (its save may be under way)."""
    folders = f.spec.get("outputs") or []
    if folders:
        return (f"Not listed here: its output folders ({', '.join(folders)}) are saved to "
                f"Rota's artifact store (`rota artifacts {f.job['id']}`).")
    return "None saved (`--output DIR` saves a folder when the job ends)."


def markdown(f: CardFacts, curve_file: str | None = "loss.svg") -> str:
    job = f.job
    lines = [f"# {job['name']} (job {job['id']})", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in _rows(f)]
    metrics = _metric_rows(f)
    lines += ["", "## Metrics", ""]
    if metrics:
        lines += ["| metric | last | min | max | samples |", "|---|---|---|---|---|"]
        lines += [f"| {' | '.join(r)} |" for r in metrics]
        if curve_file and curve_metric(f.metrics):
            lines += ["", f"![{curve_metric(f.metrics)} by step]({curve_file})"]
    else:
        lines.append("No metrics were read from its output.")
    lines += ["", "## Git", ""]
    if f.git:
        lines += ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in _git_rows(f.git)),
                  "", _git_source(f.git)]
    else:
        lines.append(_NO_GIT)
    lines += ["", "## Data", ""]
    if f.datasets:
        lines += ["| dataset | files | size | sha256 |", "|---|---|---|---|"]
        lines += [f"| {ref} | {files} | {size} | {f'`{dig}`' if dig else note} |"
                  for ref, files, size, dig, note in _data_rows(f)]
    else:
        lines.append("It read no registered datasets.")
    lines += ["", "## Saved outputs", ""]
    if f.outputs:
        lines += ["| file | size | sha256 |", "|---|---|---|"]
        lines += [f"| {o['path']} | {o['size']} | `{o.get('sha256', '')[:16]}` |"
                  for o in f.outputs]
    else:
        lines.append(_outputs_note(f))
    return "\n".join(lines) + "\n"


def html_page(f: CardFacts) -> str:
    """The card as one HTML page, its curve inline; every value escaped."""
    e = html.escape
    job = f.job
    rows = "".join(f"<tr><th>{e(k)}</th><td>{e(v.strip('`'))}</td></tr>" for k, v in _rows(f))
    metrics = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>"
                      for r in _metric_rows(f))
    name = curve_metric(f.metrics)
    curve = curve_svg(name, f.metrics[name]) if name else ""
    outputs = "".join(f"<tr><td>{e(o['path'])}</td><td>{o['size']}</td>"
                      f"<td><code>{e(o.get('sha256', '')[:16])}</code></td></tr>"
                      for o in f.outputs)
    return ("<!doctype html><html><head><meta charset=\"utf-8\">"
            f"<title>{e(job['name'])} (job {job['id']})</title></head><body>"
            f"<h1>{e(job['name'])} (job {job['id']})</h1><table>{rows}</table>"
            "<h2>Metrics</h2>"
            + (f"<table><tr><th>metric</th><th>last</th><th>min</th><th>max</th>"
               f"<th>samples</th></tr>{metrics}</table>{curve}" if metrics
               else "<p>No metrics were read from its output.</p>")
            + _html_git(f.git) + _html_data(f)
            + "<h2>Saved outputs</h2>"
            + (f"<table><tr><th>file</th><th>size</th><th>sha256</th></tr>{outputs}</table>"
               if outputs else f"<p>{html.escape(_outputs_note(f).replace('`', ''))}</p>")
            + "</body></html>\n")


def _html_git(git: dict[str, Any] | None) -> str:
    e = html.escape
    if not git:
        return f"<h2>Git</h2><p>{e(_NO_GIT)}</p>"
    rows = "".join(f"<tr><th>{e(k)}</th><td>{e(v.strip('`'))}</td></tr>"
                   for k, v in _git_rows(git))
    return f"<h2>Git</h2><table>{rows}</table><p>{e(_git_source(git))}</p>"


def _html_data(f: CardFacts) -> str:
    e = html.escape
    if not f.datasets:
        return "<h2>Data</h2><p>It read no registered datasets.</p>"
    rows = "".join(f"<tr><td>{e(ref)}</td><td>{files}</td><td>{e(size)}</td><td>"
                   + (f"<code>{e(dig)}</code>" if dig else e(note)) + "</td></tr>"
                   for ref, files, size, dig, note in _data_rows(f))
    return ("<h2>Data</h2><table><tr><th>dataset</th><th>files</th><th>size</th>"
            f"<th>sha256</th></tr>{rows}</table>")


def card_files(f: CardFacts) -> dict[str, str]:
    """The card's files by name: card.md, card.html and (when it has metrics) loss.svg,
    which card.md shows from beside it."""
    out = {"card.md": markdown(f), "card.html": html_page(f)}
    name = curve_metric(f.metrics)
    if name:
        out["loss.svg"] = curve_svg(name, f.metrics[name])
    return out


#: the folder of a job's saved outputs its card goes in
CARD_FOLDER = "rota-card"


def write_card(f: CardFacts, folder: str) -> list[str]:
    """The card's files (``card_files``) into ``folder``; their names."""
    import os

    os.makedirs(folder, exist_ok=True)
    written = card_files(f)
    for file_name, text in written.items():
        with open(os.path.join(folder, file_name), "x", encoding="utf-8") as out:
            out.write(text)
    return sorted(written)
