"""What one trivial job costs the daemon: CPU and SQL statements per job, in process.

    python bench/bench_daemon_cost.py [--jobs 1000] [--batch 100] [--json FILE]

A daemon (rota.server.loop.daemon.Daemon on 8 simulated 80 GB GPUs, its own SQLite store and
local runner) runs in this process; ``--jobs`` `true` jobs of 0.25 GPU are submitted
through its intake ``--batch`` at a time, as the API would (no HTTP: that is
bench_api_load's), and run to their end. Printed: the wall time, this process's CPU per
job (the daemon's work: intake, passes, launches, exits, output reads; the runner and the
jobs are other processes), and the statements per job by kind (SQLAlchemy's
``before_cursor_execute``: a multi-row INSERT counts once, an executemany once). Where
end-to-end throughput (bench/rounds.py, bench/bench_cli.py) moves with the machine's
spells, this figure says what changed in the daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import getpass
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT / "src", ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from sqlalchemy import event  # noqa: E402

from rota.config import load_settings  # noqa: E402
from rota.devices.simulated import SimulatedDevices  # noqa: E402
from rota.server.daemon_ports import DaemonPorts  # noqa: E402
from rota.server.intake import Intake  # noqa: E402
from rota.server.loop.daemon import Daemon  # noqa: E402
from rota.store.repo import Store  # noqa: E402
from rota_testing import kill_job_processes  # noqa: E402


async def run(tmp: Path, jobs: int, batch: int) -> dict[str, Any]:
    home = tmp / "home"
    home.mkdir()
    settings = load_settings(home=home)
    store = Store.open(settings.db_url)
    single: collections.Counter[str] = collections.Counter()
    many: collections.Counter[str] = collections.Counter()

    @event.listens_for(store.engine, "before_cursor_execute")
    def count(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
              executemany: bool) -> None:
        (many if executemany else single)[" ".join(statement.split()[:3])] += 1

    d = Daemon(settings, store, SimulatedDevices("8x80G"))
    await d.start()
    try:
        await d.queue_ready.wait()
        ports = DaemonPorts(d, Intake(d), on_shutdown=lambda: None)
        single.clear()
        many.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        ids: list[int] = []
        for k in range(0, jobs, batch):
            specs = [{"command": ["true"], "gpus": 0.25, "name": f"cost-{i}"}
                     for i in range(k, min(jobs, k + batch))]
            ids += [r.id for r in ports.submit(specs, user=getpass.getuser(),
                                               source="bench").rows]
            await asyncio.sleep(0)
        for i in ids:  # each end awaited (polling would count its own CPU)
            await d.wait_for_end(i, None)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        states = collections.Counter(d.job_state(i).value for i in ids)
    finally:
        await d.stop()
        kill_job_processes(tmp)
        store.close()
    return {"jobs": jobs, "batch": batch, "wall_s": wall, "cpu_ms_per_job": 1000 * cpu / jobs,
            "states": dict(states),
            "statements_per_job": {k: v / jobs for k, v in single.most_common()},
            "executemany_per_job": {k: v / jobs for k, v in many.most_common()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rota-bench-cost-") as tmp:
        r = asyncio.run(run(Path(tmp), a.jobs, a.batch))
    print(f"{r['jobs']} jobs, {r['batch']} a submit: {r['wall_s']:.2f} s, daemon CPU "
          f"{r['cpu_ms_per_job']:.2f} ms per job; states {r['states']}")
    print(f"statements per job: {sum(r['statements_per_job'].values()):.2f}, executemany "
          f"per job: {sum(r['executemany_per_job'].values()):.2f}")
    for kind in ("statements_per_job", "executemany_per_job"):
        for k, v in r[kind].items():
            if v >= 0.01:
                print(f"  {kind.split('_')[0]:10s} {v:5.2f}  {k}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
