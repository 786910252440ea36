"""A real, private Ray cluster on this host: a head (4 CPUs, 2 logical GPUs, one
``accelerator_type:T4``) and a second node (2 CPUs, 1 logical GPU), started with
``ray start`` on free ports in a private temp dir, and stopped by pid (every process whose
command line names that dir, and everything under them), never by ``ray stop``, which would
stop every Ray of this user on the machine.

Used by the Ray engine's tests (tests/backends/ray/conftest.py) and by bench/bench_pools.py.

Usage::

    cluster = LocalRay()
    try:
        cluster.start()
        ...  # cluster.address: the dashboard (Jobs API); cluster.env: `ray` CLI's env
    finally:
        cluster.close()
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from bench.baselines._common import wait_for

HEAD = {"cpus": 4, "gpus": 2}
WORKER = {"cpus": 2, "gpus": 1}
GPU_TYPE = "T4"  # on the head only


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class LocalRay:
    """A head and a worker node on this host, in ``folder``. ``start`` raises RuntimeError
    (BaselineError is one), OSError or subprocess.TimeoutExpired when Ray does not start."""

    folder: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="rray", dir="/tmp"))
    address: str = ""
    gcs_address: str = ""  # host:port, named by the processes that hold no folder

    @property
    def env(self) -> dict[str, str]:
        bin_dir = os.path.dirname(sys.executable)  # `python` on the cluster: this venv's
        return {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
                "RAY_USAGE_STATS_ENABLED": "0"}

    def _ray(self, *args: str) -> None:
        ray = os.path.join(os.path.dirname(sys.executable), "ray")
        proc = subprocess.run([ray, "start", *args, "--disable-usage-stats"], env=self.env,
                              cwd=self.folder, capture_output=True, text=True, timeout=120,
                              check=False)
        if proc.returncode != 0:
            raise RuntimeError((proc.stderr or proc.stdout).strip().splitlines()[-1])

    def _node_ports(self) -> list[str]:
        agent, grpc, runtime, metrics, client = free_ports(5)
        return [f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={grpc}",
                f"--runtime-env-agent-port={runtime}", f"--metrics-export-port={metrics}",
                f"--ray-client-server-port={client}"]

    def start(self) -> None:
        gcs, dashboard = free_ports(2)
        self._ray("--head", f"--port={gcs}", f"--dashboard-port={dashboard}",
                  "--dashboard-host=127.0.0.1", "--include-dashboard=true",
                  f"--num-cpus={HEAD['cpus']}", f"--num-gpus={HEAD['gpus']}",
                  f"--resources={json.dumps({'accelerator_type:' + GPU_TYPE: 1})}",
                  f"--temp-dir={self.folder}", *self._node_ports())
        self.address = f"http://127.0.0.1:{dashboard}"
        self.gcs_address = f"{_node_ip(self.folder)}:{gcs}"
        self._ray(f"--address={self.gcs_address}", f"--num-cpus={WORKER['cpus']}",
                  f"--num-gpus={WORKER['gpus']}", *self._node_ports())
        wait_for(lambda: _nodes(self.address) >= 2, timeout=60, interval=0.5,
                 what="both Ray nodes to join")

    def close(self) -> None:
        kill_tree(self.folder, *([f"={self.gcs_address}"] if self.gcs_address else []))
        shutil.rmtree(self.folder, ignore_errors=True)


def _node_ip(folder: str) -> str:
    """The head's IP as Ray recorded it (``ray start --address`` needs that one)."""
    addr = Path(folder, "ray_current_cluster").read_text().strip()
    return addr.rsplit(":", 1)[0]


def _nodes(address: str) -> int:
    with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
        data = httpx.get(f"{address}/api/cluster_status", timeout=5).json()["data"]
        return sum(data["clusterStatus"]["autoscalerReport"]["activeNodes"].values())
    return 0


def kill_tree(*markers: str) -> None:
    """SIGTERM, then SIGKILL, to every process whose command line names a marker and to
    everything under them (Ray's workers retitle themselves, so they are found as
    children of the raylet)."""
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    roots = [p for p in psutil.process_iter(["cmdline"]) if p.pid not in mine
             and any(m in arg for m in markers for arg in (p.info["cmdline"] or []))]
    procs: dict[int, psutil.Process] = {}
    for root in roots:
        with contextlib.suppress(psutil.Error):
            for p in [root, *root.children(recursive=True)]:
                procs[p.pid] = p
    for p in procs.values():
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(list(procs.values()), timeout=5)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
