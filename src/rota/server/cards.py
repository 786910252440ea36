"""A job's model card and training report (`rota card JOB`): Markdown, and HTML with its
loss curve drawn as an SVG image, from what the store holds of the job: its command and
settings, its attempts, the metrics read from its output, its newest checkpoint, its saved
outputs and what it cost. Saved with its outputs (``card/``) when it ends.

``facts`` reads the store; the rest is pure.
"""

from __future__ import annotations

import html
import shlex
from dataclasses import dataclass, field
from typing import Any

from rota.core.usage import cost, gpu_seconds
from rota.store.repo import Store

#: points of the curve drawn (samples are thinned evenly past it)
CURVE_POINTS = 400
#: which metric the curve shows: the first of these a job reports, else its first metric
CURVE_PREFERENCE = ("loss", "train_loss", "eval_loss", "val_loss")


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


def facts(store: Store, job_id: int, now: float,
          outputs: list[dict[str, Any]] | None = None) -> CardFacts:
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
        metrics=series, checkpoint=checkpoint, outputs=outputs or [])


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
            ("Cost", "-" if f.cost is None else f"{f.cost:.2f}"),
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
    lines += ["", "## Saved outputs", ""]
    if f.outputs:
        lines += ["| file | size | sha256 |", "|---|---|---|"]
        lines += [f"| {o['path']} | {o['size']} | `{o.get('sha256', '')[:16]}` |"
                  for o in f.outputs]
    else:
        lines.append("None saved (`--output DIR` saves a folder when the job ends).")
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
            + "<h2>Saved outputs</h2>"
            + (f"<table><tr><th>file</th><th>size</th><th>sha256</th></tr>{outputs}</table>"
               if outputs else "<p>None saved.</p>")
            + "</body></html>\n")


#: the folder of a job's saved outputs its card goes in
CARD_FOLDER = "rota-card"


def write_card(f: CardFacts, folder: str) -> list[str]:
    """card.md, card.html and (when it has metrics) loss.svg into ``folder``; their names."""
    import os

    os.makedirs(folder, exist_ok=True)
    written = {"card.md": markdown(f), "card.html": html_page(f)}
    name = curve_metric(f.metrics)
    if name:
        written["loss.svg"] = curve_svg(name, f.metrics[name])
    for file_name, text in written.items():
        with open(os.path.join(folder, file_name), "x", encoding="utf-8") as out:
            out.write(text)
    return sorted(written)
