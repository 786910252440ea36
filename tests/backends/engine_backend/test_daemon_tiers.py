"""A job on a Slurm pool is charged like a local one: its attempt records the tier and
price when it starts, and the report shows its GPU-hours under the pool at that price.
Against the private Slurm of tests/backends/slurm (skipped where it cannot run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench.baselines.slurm import PrivateSlurm

from rota.store.repo import Store

from .daemon_slurm import daemon_over, wait_end

TOML = """
[pools.hpc]
engine = "slurm"
shared_workspaces = true
slurm_conf = "{conf}"

[tiers.small]
price = 4.0
time_limit = "1h"
"""


def test_a_slurm_attempt_gets_tier_and_price_and_shows_in_the_report(
        slurm: PrivateSlurm, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with daemon_over(slurm, home, TOML) as d:
        job = d.submit("--pool", "hpc", "--gpus", "1", "--time-limit", "10m", "--",
                       "sleep", "1", cwd=tmp_path)
        done = wait_end(d, job)
        assert done["state"] == "completed", done
        store = Store.open(f"sqlite:///{home / 'rota.db'}")
        [record] = [r for r in store.usage(0.0, 1e12) if r.job_id == job]
        store.close()
        assert (record.pool, record.tier, record.price) == ("hpc", "small", 4.0)
        assert record.backend == "slurm:hpc" and record.ended_at is not None
        used = record.gpus * (record.ended_at - record.started_at)
        out = d.cli("report", "--by", "pool", "--since", "0", "--json")
        assert out.returncode == 0, out.stderr
        [total] = json.loads(out.stdout)["totals"]
        assert total["group"] == "hpc"
        assert total["gpu_hours"] * 3600 == pytest.approx(used, rel=1e-9)
        assert total["cost"] == pytest.approx(used / 3600 * 4.0, rel=1e-9)
