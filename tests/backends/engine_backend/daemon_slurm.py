"""A daemon whose rota.toml declares pools of the private Slurm, and what the tests read of
its jobs (`rota show --json`, `rota wait`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.baselines.slurm import PrivateSlurm

from rota_testing import DaemonProcess, kill_job_processes


@contextlib.contextmanager
def daemon_over(slurm: PrivateSlurm, home: Path, toml: str,
                env: dict[str, str] | None = None) -> Iterator[DaemonProcess]:
    """A daemon in ``home`` (``env``: more of its environment); ``toml``'s ``{conf}`` is the
    cluster's slurm.conf."""
    (home / "rota.toml").write_text(toml.format(conf=slurm.env["SLURM_CONF"]))
    d = DaemonProcess(home, extra_env=env).start()
    try:
        yield d
    finally:
        d.stop()
        kill_job_processes(home)


def job_view(d: DaemonProcess, job_id: int) -> dict[str, Any]:
    r = d.cli("show", str(job_id), "--json")
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def wait_end(d: DaemonProcess, job_id: int, timeout: float = 60) -> dict[str, Any]:
    """The job's view once it has ended (`rota wait`)."""
    r = d.cli("wait", str(job_id), "--timeout", str(timeout), timeout=timeout + 30)
    assert r.returncode in (0, 1, 2, 3), r.stderr
    return job_view(d, job_id)
