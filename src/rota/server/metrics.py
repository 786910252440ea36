"""Prometheus metrics at /metrics: what the daemon is doing, in base units.

Counters and histograms are observed where things happen (a pass, a start, an exit, a
request); gauges of jobs and GPUs are read from the daemon when Prometheus scrapes, so
they are never stale and cost nothing between scrapes. Each daemon has its own registry
(tests run several daemons in one process).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rota.core.lifecycle import JobState
from rota.core.snapshot import MILLI

if TYPE_CHECKING:
    from rota.server.daemon import Daemon

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_WAIT_BUCKETS = (0.01, 0.1, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400)
_RUN_BUCKETS = (0.1, 1, 10, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 7 * 86400)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.pass_seconds = Histogram(
            "rota_scheduling_pass_duration_seconds", "Time one scheduling pass took.",
            buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
            registry=r)
        self.queue_wait = Histogram(
            "rota_job_queue_wait_seconds", "From submit (or requeue) to the attempt's start.",
            buckets=_WAIT_BUCKETS, registry=r)
        self.run_time = Histogram(
            "rota_job_run_seconds", "Length of finished attempts, by how they ended.",
            ["outcome"], buckets=_RUN_BUCKETS, registry=r)
        self.starts = Counter("rota_job_starts_total", "Attempts launched.", registry=r)
        self.ends = Counter("rota_job_attempts_ended_total", "Attempts that ended, by outcome.",
                            ["outcome"], registry=r)
        self.requests = Histogram(
            "rota_api_request_duration_seconds", "API requests, by route and status.",
            ["method", "route", "status"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5),
            registry=r)

    def watch(self, daemon: Daemon) -> None:
        """Add the gauges read from the daemon at scrape time."""
        self.registry.register(_DaemonCollector(daemon))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestTimer:
    """ASGI middleware timing every request by its route template (not its raw path, so
    job ids do not become labels). Plain ASGI: BaseHTTPMiddleware would cost more than
    many requests take."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(scope["method"], route, str(status)).observe(
                time.perf_counter() - t0)


class _DaemonCollector(Collector):
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def collect(self) -> Iterator[Metric]:
        d = self.daemon
        jobs = GaugeMetricFamily("rota_jobs", "Jobs by state.", labels=["state"])
        counts = d.store.count_by_state()
        for state in JobState:
            jobs.add_metric([state.value], counts.get(state.value, 0))
        yield jobs
        views = {v.index: v for v in d.gpu_views()}
        alloc = GaugeMetricFamily("rota_gpu_allocated_ratio",
                                  "Share of the GPU allocated to Rota's jobs (0-1).",
                                  labels=["gpu", "uuid"])
        used = GaugeMetricFamily("rota_gpu_memory_used_bytes", "GPU memory in use (all "
                                 "processes).", labels=["gpu", "uuid"])
        total = GaugeMetricFamily("rota_gpu_memory_total_bytes", "GPU memory.",
                                  labels=["gpu", "uuid"])
        outside = GaugeMetricFamily("rota_gpu_memory_external_bytes", "GPU memory used by "
                                    "processes Rota did not start.", labels=["gpu", "uuid"])
        util = GaugeMetricFamily("rota_gpu_utilization_ratio", "GPU utilisation (0-1).",
                                 labels=["gpu", "uuid"])
        up = GaugeMetricFamily("rota_gpu_schedulable", "1 when the GPU takes new work "
                               "(healthy and not paused).", labels=["gpu", "uuid"])
        for i, g in sorted(d.readings.items()):
            labels = [str(i), g.uuid]
            v = views.get(i)
            alloc.add_metric(labels, (v.allocated_milli if v else 0) / MILLI)
            used.add_metric(labels, g.memory_used)
            total.add_metric(labels, g.memory_total)
            outside.add_metric(labels, v.memory_external if v else 0)
            util.add_metric(labels, g.utilization)
            up.add_metric(labels, 1 if g.healthy and i not in d.paused else 0)
        yield from (alloc, used, total, outside, util, up)
        queued = GaugeMetricFamily("rota_queue_pending_jobs", "Jobs waiting in the queue.")
        queued.add_metric([], len(d.queue))
        yield queued
