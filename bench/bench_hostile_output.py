"""A job's output can never stall the daemon: the loop's longest block while a job
writes hostile output.

    python bench/bench_hostile_output.py [--seconds 10] [--every 2.0] [--no-budget] [--trainer]

A real process writes, into a job's log: first one 50 MB line with no newline (in 1 MiB
writes), then 1,000 lines a second of 10,000-character lines built to be slow for the
built-in parser's regexes (``x=1,`` repeated, spaces before a digit, ``step `` repeated,
``1%|`` repeated, dict-shaped text, ``eta `` repeated). On an asyncio loop, the daemon's
own reading code (``rota.server.jobs.job_output.read_outputs`` over an ``OutputReader`` with a
``LineParser`` holding a pattern that backtracks catastrophically in Python's ``re``:
it runs in RE2) reads that log every ``--every`` seconds, and every CATCH_UP_S while a
read left output unread, as the daemon's outputs loop does. Beside it a probe task sleeps
5 ms again and again and records how late it wakes:
the longest lateness is the longest time the loop was blocked. The store and trackers are
stand-ins that count rows (their writes are not the subject). ``--no-budget`` lifts the
parsing budget (PARSE_BUDGET_S) to show what the budget is for.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rota.ml.parse import LineParser
from rota.server.jobs import job_output
from rota.server.tracking.outputs import OutputReader, Progress, events_path

WRITER = r"""
import sys, time
out = open(sys.argv[1], "ab", buffering=0)
seconds = float(sys.argv[2])
chunk = b"loss=" + b"9" * (1 << 20)
for _ in range(50):                       # one 50 MB line, no newline
    out.write(chunk)
out.write(b"\n")
shapes = [b"x=1," * 2500, b" " * 9999 + b"1", b"step " * 1999 + b"1", b"1%|" * 3333,
          b"{" + b"'a': 1, " * 1249, b"eta " * 2499 + b"1", b"a: " * 3333,
          (b"x" * 60 + b"y ") * 160]
t0, n = time.monotonic(), 0
while time.monotonic() - t0 < seconds:
    # 1,000 lines a second, 10 at a time
    out.write(b"\n".join(shapes[(n + i) % len(shapes)][:10000] for i in range(10)) + b"\n")
    n += 10
    time.sleep(max(0.0, t0 + n / 1000 - time.monotonic()))
print(n, flush=True)
"""

#: ``--trainer``: no hostile line, 1,000 lines a second as a fast trainer prints them
TRAINER = r"""
import sys, time
out = open(sys.argv[1], "ab", buffering=0)
seconds = float(sys.argv[2])
t0, n = time.monotonic(), 0
while time.monotonic() - t0 < seconds:
    out.write(b"".join(
        b"{'loss': %.4f, 'grad_norm': 1.25, 'learning_rate': 4.9e-05, 'epoch': %.3f}\n"
        % (1 / (n + i + 1), (n + i) / 1e4) if (n + i) % 2 else
        b"step %d/100000: loss=%.4f lr=3e-4 | 812.5 samples/s\n" % (n + i, 1 / (n + i + 1))
        for i in range(10)))
    n += 10
    time.sleep(max(0.0, t0 + n / 1000 - time.monotonic()))
print(n, flush=True)
"""


class _Store:
    def __init__(self) -> None:
        self.rows = 0

    def add_metrics(self, rows: list[Any], progress: dict[int, Any]) -> None:
        self.rows += len(rows)


class _Tracking:
    def mirror(self, rows: list[Any]) -> None:
        pass


async def _probe(lateness: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.005)
        lateness.append(time.perf_counter() - t - 0.005)


async def _reads(run: Any, store: _Store, every: float, calls: list[float],
                 stop: asyncio.Event) -> None:
    wait = every
    while not stop.is_set():
        await asyncio.sleep(wait)
        t = time.perf_counter()
        job_output.read_outputs(store, _Tracking(), [run], time.time())  # type: ignore[arg-type]
        calls.append(time.perf_counter() - t)
        # as the daemon: sooner again while output is left unread
        wait = min(every, job_output.next_read_in([run], {}))


async def main(seconds: float, every: float, writer_code: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "1.log"
        log.write_bytes(b"")
        reader = OutputReader(
            job_id=1, log_path=log, events_path=events_path(Path(tmp) / "1-1.json"),
            parser=LineParser([r"(?P<loss>(x+x+)+y)"]), progress=Progress(attempt=1))
        run = SimpleNamespace(job_id=1, output=reader, log_path=log, started_at=time.time(),
                              submitted_at=time.time(), attempt_no=1)
        store, lateness, calls, stop = _Store(), [], [], asyncio.Event()
        tasks = [asyncio.create_task(_probe(lateness, stop)),
                 asyncio.create_task(_reads(run, store, every, calls, stop))]
        writer = subprocess.Popen([sys.executable, "-c", writer_code, str(log), str(seconds)],
                                  stdout=subprocess.PIPE)
        biggest_partial = 0
        while writer.poll() is None:
            await asyncio.sleep(0.05)
            biggest_partial = max(biggest_partial, len(reader.partial))
        lines = int(writer.stdout.read() or 0) if writer.stdout else 0
        await asyncio.sleep(every + 0.1)
        stop.set()
        await asyncio.gather(*tasks)
        size = log.stat().st_size
        return {"lines_written": lines, "log_mb": size / 1e6,
                "behind_mb": (size - reader.progress.log_offset) / 1e6,
                "samples_stored": store.rows, "reads": len(calls),
                "read_max_ms": max(calls) * 1e3, "read_median_ms": statistics.median(calls) * 1e3,
                "loop_block_max_ms": max(lateness) * 1e3,
                "loop_block_p99_ms": sorted(lateness)[int(len(lateness) * 0.99)] * 1e3,
                "partial_max_kib": biggest_partial / 1024}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=2.0, help="seconds between reads")
    ap.add_argument("--no-budget", action="store_true", help="lift PARSE_BUDGET_S")
    ap.add_argument("--trainer", action="store_true",
                    help="a fast trainer's lines (1,000/s) instead of hostile output")
    args = ap.parse_args()
    if args.no_budget:
        job_output.PARSE_BUDGET_S = 1e9  # type: ignore[misc]
    got = asyncio.run(main(args.seconds, args.every, TRAINER if args.trainer else WRITER))
    print(f"budget: {'none' if args.no_budget else job_output.PARSE_BUDGET_S}, "
          f"every {args.every} s, {args.seconds} s of writing")
    for k, v in got.items():
        print(f"  {k:20s} {v:10.2f}")
