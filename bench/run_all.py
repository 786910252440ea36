"""Run every benchmark and write docs/benchmarks.md.

    python bench/run_all.py [--skip-baselines] [--report-only]

Runs, one after the other (the machine has 2 cores: nothing runs side by side):

1. bench/bench_pass.py   the scheduling pass (100k pending jobs, 1,024 GPUs)
2. bench/bench_e2e.py    a real daemon on 8 simulated GPUs: throughput, latencies, idle cost
3. the baselines         python -m bench.baselines slurm --jobs 2000 --tuned
                         python -m bench.baselines slurm --jobs 2000          (Slurm defaults)
                         python -m bench.baselines tsp --jobs 2000

each as a subprocess (a baseline that fails is reported with its error text; the run goes
on), prints a summary table with Rota's jobs/s next to Slurm's and task-spooler's, writes
the raw JSON to bench/out/ (ignored by git) and docs/benchmarks.md.
``--report-only`` rebuilds the table and the page from the JSON already in bench/out/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
DOC = ROOT / "docs" / "benchmarks.md"
COMMAND = "python bench/run_all.py"
JOBS = 2000

BASELINES: dict[str, list[str]] = {
    "slurm_tuned": ["slurm", "--jobs", str(JOBS), "--tuned"],
    "slurm_default": ["slurm", "--jobs", str(JOBS)],
    "tsp": ["tsp", "--jobs", str(JOBS)],
}
BASELINE_LABEL = {"slurm_tuned": "Slurm (tuned)", "slurm_default": "Slurm (defaults)",
                  "tsp": "task-spooler"}


# --- the machine ---------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gib = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_gib = int(line.split()[1]) / (1 << 20)
    except OSError:
        pass
    try:
        nproc = int(subprocess.run(["nproc"], capture_output=True, text=True,
                                   check=True).stdout.strip())
    except (OSError, ValueError, subprocess.CalledProcessError):
        nproc = len(os.sched_getaffinity(0))
    return {"nproc": nproc, "cpu": cpu or platform.processor() or "unknown",
            "ram_gib": round(ram_gib, 1), "python": platform.python_version(),
            "kernel": platform.release(), "commit": _git("rev-parse", "--short", "HEAD"),
            "tree_dirty": bool(_git("status", "--porcelain", "--untracked-files=no"))}


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=False, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


# --- running the parts ---------------------------------------------------------------------
def run_bench(script: str, out: Path, timeout: float, extra: list[str]) -> dict[str, Any]:
    """Run one of our benchmarks (output shown as it goes); its figures come from --json."""
    argv = [sys.executable, str(ROOT / "bench" / script), "--json", str(out), *extra]
    print(f"\n=== {' '.join(argv[1:])}  (load average {loadavg()})", flush=True)
    out.unlink(missing_ok=True)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=ROOT, timeout=timeout, check=False)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = -1
    took = time.monotonic() - t0
    if out.exists():
        data: dict[str, Any] = json.loads(out.read_text())
        data["_rc"], data["_seconds"] = rc, took
        return data
    return {"_error": f"{script} exited with {rc} after {took:.0f}s and wrote no figures",
            "_rc": rc}


def run_baseline(name: str, args: list[str], timeout: float) -> dict[str, Any]:
    argv = [sys.executable, "-m", "bench.baselines", *args]
    print(f"\n=== python -m bench.baselines {' '.join(args)}  (load average {loadavg()})",
          flush=True)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as e:
        res = {"_error": f"timed out after {timeout:.0f}s",
               "_stderr": _text(e.stderr)[-3000:]}
    except OSError as e:
        res = {"_error": f"could not run it: {e}"}
    else:
        res = _parse_baseline(proc)
    res["_command"] = f"python -m bench.baselines {' '.join(args)}"
    res["_seconds"] = time.monotonic() - t0
    (OUT / f"baseline-{name}.json").write_text(json.dumps(res, indent=2))
    if "_error" in res:
        print(f"FAILED: {res['_error']}", flush=True)
    else:
        print(f"{res.get('jobs_per_s', 0):.1f} jobs/s (mode {res.get('mode')}, tuned "
              f"{res.get('tuned')}, gpu_model {res.get('gpu_model')})", flush=True)
    return res


def _text(b: str | bytes | None) -> str:
    if b is None:
        return ""
    return b.decode(errors="replace") if isinstance(b, bytes) else b


def _parse_baseline(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    err = (proc.stderr or "").strip()
    if proc.returncode != 0:
        return {"_error": f"exit status {proc.returncode}: {err[-3000:] or proc.stdout[-3000:]}"}
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        return {"_error": f"no JSON on stdout: {proc.stdout[-1500:]!r} {err[-1500:]}"}
    if not isinstance(data, dict) or not data.get("jobs_per_s"):
        return {"_error": f"no jobs_per_s in its answer: {proc.stdout[-1500:]}"}
    data["_stderr_tail"] = err[-1500:]
    return data


# --- the report ----------------------------------------------------------------------------
def _ok(flag: bool | None) -> str:
    return "n/a" if flag is None else ("PASS" if flag else "MISS")


def _f(v: Any, fmt: str = ".1f") -> str:
    return "n/a" if not isinstance(v, int | float) else format(v, fmt)


def figures(p: dict[str, Any], e: dict[str, Any], b: dict[str, dict[str, Any]]
            ) -> list[tuple[str, str, str, str]]:
    """(figure, value, target, verdict) rows."""
    rows: list[tuple[str, str, str, str]] = []
    if "_error" in p:
        rows.append(("scheduling pass", p["_error"], "<= 100 ms", "MISS"))
    else:
        r100 = p["realistic"]["100000_presorted"]
        rows += [
            ("pass, 100k pending x 1,024 GPUs, presorted (median / max of "
             f"{p['runs']}; CPU median)",
             f"{r100['median_ms']:.1f} / {r100['max_ms']:.1f} ms; "
             f"CPU {r100['cpu_median_ms']:.1f} ms",
             "<= 100 ms", _ok(r100["median_ms"] <= p["target_ms"])),
            ("pass growth 10k -> 30k -> 100k (CPU time ratios vs n log n)",
             "; ".join(f"x{g['time_ratio']:.2f} (n log n x{g['nlogn_ratio']:.2f})"
                       for g in p["growth"]["presorted"]),
             "<= n log n", _ok(p["growth_ok"])),
        ]
        ru = p["realistic"]["100000_unsorted"]
        rows.append(("pass, 100k, presorted=False (median / max; CPU median)",
                     f"{ru['median_ms']:.1f} / {ru['max_ms']:.1f} ms; "
                     f"CPU {ru['cpu_median_ms']:.1f} ms", "(info)", ""))
        rows.append(("pass peak memory, 100k presorted / unsorted (tracemalloc)",
                     f"{r100['peak_mb']:.1f} / {ru['peak_mb']:.1f} MB", "(info)", ""))
        st = p["stranded"]["100000_presorted"]
        rows.append(("pass, 100k, stress: nothing fits and the pass cannot stop early",
                     f"{st['median_ms']:.1f} / {st['max_ms']:.1f} ms; "
                     f"CPU {st['cpu_median_ms']:.1f} ms", "<= 100 ms (same budget)",
                     _ok(st["median_ms"] <= p["target_ms"])))
        if "reason_on_demand_us" in p:
            rows.append(("reason of one lazily-waiting job after the 100k pass (Plan.reason)",
                         f"{p['reason_on_demand_us']:.0f} us", "(info)", ""))
    if "_error" in e:
        rows.append(("end to end", e["_error"], "", "MISS"))
        return rows
    tb, ts = e["throughput_batch"], e["throughput_single"]
    rota = tb["jobs_per_s"]
    for key in ("slurm_tuned", "slurm_default", "tsp"):
        res = b.get(key)
        label = BASELINE_LABEL[key]
        if res is None:
            rows.append((f"throughput vs {label}", "not run", "Rota ahead", "n/a"))
        elif "_error" in res:
            rows.append((f"throughput vs {label}", f"baseline failed: {res['_error'][:160]}",
                         "Rota ahead", "n/a"))
        else:
            ratio = rota / res["jobs_per_s"]
            rows.append((f"throughput vs {label}",
                         f"Rota {rota:.1f} vs {res['jobs_per_s']:.1f} jobs/s: x{ratio:.2f}",
                         "Rota ahead (> x1)", _ok(ratio > 1)))
    rows += [
        (f"throughput, {tb['jobs']} x `true` at 0.25 GPU, 100 per submit",
         f"{rota:.1f} jobs/s ({tb['first_submit_to_last_end_s']:.1f} s)", "(vs baselines)", ""),
        (f"throughput, {ts['jobs']} x `true` at 0.25 GPU, 1 per submit",
         f"{ts['jobs_per_s']:.1f} jobs/s ({ts['first_submit_to_last_end_s']:.1f} s)", "(info)",
         ""),
        ("CPU per trivial job: daemon / shim + job (batched run)",
         f"{tb['daemon_cpu_ms_per_job']:.1f} / {tb['children_cpu_ms_per_job']:.1f} ms",
         "(info)", ""),
    ]
    sa, sc, d, i = e["submit_api"], e["submit_cli"], e["dispatch"], e["idle"]
    v = e["verdicts"]
    rows += [
        (f"submit latency, socket API, p50 ({sa['n']} held jobs)", f"{sa['p50_ms']:.2f} ms",
         "<= 5 ms", _ok(v["submit_api_p50_ms"]["ok"])),
        ("submit latency, socket API, p99", f"{sa['p99_ms']:.2f} ms", "<= 20 ms",
         _ok(v["submit_api_p99_ms"]["ok"])),
        (f"submit latency, CLI p50 / p99 ({sc['n']} runs; includes Python start-up"
         f"{'' if sc['real_cli'] else '; PROXY, no `rota submit` yet'})",
         f"{sc['p50_ms']:.0f} / {sc['p99_ms']:.0f} ms (python -c pass "
         f"{sc['python_startup_p50_ms']:.0f} ms, import rota.cli.main "
         f"{sc['import_rota_cli_p50_ms']:.0f} ms)", "(info)", ""),
        (f"dispatch, GPU freed -> next start, p50 ({d['n']} gaps)", f"{d['p50_ms']:.2f} ms",
         "<= 50 ms", _ok(v["dispatch_p50_ms"]["ok"])),
        ("dispatch p99 / max", f"{d['p99_ms']:.1f} / {d['max_ms']:.1f} ms", "(info)", ""),
        ("attempt length minus sleep 0.3 s (shim start + exit noticed), p50",
         f"{d['attempt_overhead']['p50_ms']:.0f} ms", "(info)", ""),
        (f"idle daemon CPU ({i['window_s']:.0f} s window)", f"{i['cpu_pct']:.2f}% of a core",
         "< 1%", _ok(v["idle_cpu_pct"]["ok"])),
        ("idle daemon RSS", f"{i['rss_mb']:.0f} MB", "< 150 MB", _ok(v["idle_rss_mb"]["ok"])),
    ]
    return rows


def summary_table(e: dict[str, Any], b: dict[str, dict[str, Any]]) -> str:
    lines = [f"{'system':<28} {'jobs/s':>9} {'Rota / it':>10}"]
    rota = e.get("throughput_batch", {}).get("jobs_per_s")
    single = e.get("throughput_single", {}).get("jobs_per_s")
    lines.append(f"{'Rota (100 per submit)':<28} {_f(rota):>9} {'':>10}")
    lines.append(f"{'Rota (1 per submit)':<28} {_f(single):>9} {'':>10}")
    for key, res in b.items():
        label = BASELINE_LABEL[key]
        if "_error" in res:
            lines.append(f"{label:<28} {'FAILED':>9}   {res['_error'][:70]}")
        else:
            ratio = rota / res["jobs_per_s"] if rota else None
            lines.append(f"{label:<28} {res['jobs_per_s']:>9.1f} {_f(ratio, '.2f'):>10}")
    return "\n".join(lines)


def write_doc(meta: dict[str, Any], p: dict[str, Any], e: dict[str, Any],
              b: dict[str, dict[str, Any]]) -> None:
    m = meta["machine"]
    out = [
        "# Benchmarks",
        "",
        f"Produced by `{COMMAND}` on {meta['date']} (commit {m['commit'] or '?'}"
        f"{', uncommitted changes' if m['tree_dirty'] else ''}). Raw figures: `bench/out/*.json`"
        " (not in git). The budget is in DESIGN.md, \"Performance budget\".",
        "",
        "## Machine",
        "",
        f"- CPU: {m['cpu']}, nproc {m['nproc']}",
        f"- RAM: {m['ram_gib']} GiB",
        f"- Python {m['python']}, Linux {m['kernel']}",
        "- load average (1/5/15 min) when each part started: "
        + ", ".join(f"{k} {v}" for k, v in meta["loads"].items()),
        "",
        "Wall-clock figures on this shared 2-core machine move with whatever else runs on it;",
        "the pass is also given in CPU time (process_time), which is steadier.",
        "",
        "## Figures",
        "",
        "| figure | value | target | verdict |",
        "|---|---|---|---|",
    ]
    out += [f"| {a} | {v} | {t} | {k} |" for a, v, t, k in figures(p, e, b)]
    out += ["", "## Throughput side by side", "", "```", summary_table(e, b), "```", "",
            f"Workload for every system: {JOBS} trivial jobs (`true`), 32 at a time (8 GPUs x "
            "0.25), timed from the first submit to the last completion.", "",
            "## Baseline settings", ""]
    for key, res in b.items():
        label = BASELINE_LABEL[key]
        cmd = res.get("_command", "")
        if "_error" in res:
            out += [f"- **{label}** (`{cmd}`): failed: `{res['_error'][:600]}`"]
            continue
        notes = "; ".join(res.get("notes") or []) or "none"
        out += [f"- **{label}** (`{cmd}`): mode {res.get('mode')}, tuned {res.get('tuned')}, "
                f"gpu_model {res.get('gpu_model')}, slots {res.get('slots', '?')}, "
                f"{res.get('jobs')} jobs in {_f(res.get('seconds'), '.2f')} s "
                f"= {_f(res.get('jobs_per_s'))} jobs/s; failed {res.get('failed', '?')}; "
                f"notes: {notes}"]
    if not b:
        out += ["- not run (`--skip-baselines`)"]
    out += ["", "## What each figure measures", "",
            "- **pass**: `rota.core.schedule.schedule` alone on a seeded mix (shares 0.25/0.5, "
            "whole 1/2/4/8 GPUs, 20% with gpu_mem, 5% with allowed-GPU sets, priorities 0-9) "
            "on 1,024 GPUs of which about 35% are full and 25% partly allocated. The daemon "
            "keeps its queue sorted and passes presorted=True. Peak memory is what the pass "
            "allocates (tracemalloc). The stress case leaves every GPU with a share free but "
            "too little memory for any pending job, so no early stop applies.",
            "- **throughput**: a fresh ROTA_HOME and `python -m rota server --simulate 8x80G`; "
            "the end is the daemon's own `ended_at` of the last job.",
            "- **submit latency (API)**: one held job per request over the Unix socket "
            "(httpx client), 1,000 samples after 20 warm-up requests.",
            "- **submit latency (CLI)**: `rota submit --hold --gpus 0.25 -- true` as a "
            "subprocess: Python start-up and imports included.",
            "- **dispatch**: 8 GPUs full of 1-GPU `sleep 0.3` jobs plus 200 queued; per GPU, "
            "the next attempt's started_at minus the previous attempt's ended_at (both stamped "
            "by the daemon: exit noticed -> next start committed, before its process is "
            "spawned).",
            "- **idle**: 5 s after the work, the daemon's user+system CPU over 20 s, and RSS.",
            ""]
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text("\n".join(out) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--skip-baselines", action="store_true")
    ap.add_argument("--report-only", action="store_true",
                    help="no runs: rebuild the table and docs/benchmarks.md from bench/out/")
    ap.add_argument("--baseline-timeout", type=float, default=2400.0,
                    help="seconds per baseline, installing Slurm included")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    meta_path = OUT / "run_all.json"
    if args.report_only:
        saved = json.loads(meta_path.read_text())
        meta, p, e, b = saved["meta"], saved["pass"], saved["e2e"], saved["baselines"]
    else:
        meta = {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                "machine": machine(), "command": COMMAND, "loads": {}}
        meta["loads"]["pass"] = loadavg()
        p = run_bench("bench_pass.py", OUT / "pass.json", 1800, [])
        meta["loads"]["e2e"] = loadavg()
        e = run_bench("bench_e2e.py", OUT / "e2e.json", 3600, [])
        b = {}
        if not args.skip_baselines:
            for key, cmd in BASELINES.items():
                meta["loads"][key] = loadavg()
                b[key] = run_baseline(key, cmd, args.baseline_timeout)
        meta_path.write_text(json.dumps({"meta": meta, "pass": p, "e2e": e, "baselines": b},
                                        indent=2))
    print("\n" + summary_table(e, b))
    print()
    for fig, val, target, verdict in figures(p, e, b):
        print(f"{verdict:5} {fig}: {val}  [target {target}]")
    write_doc(meta, p, e, b)
    print(f"\nwrote {DOC} and {OUT}/*.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
