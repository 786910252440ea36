"""Prometheus metrics at /metrics: what the daemon is doing, in base units.

Counters and histograms are observed where things happen (a pass, a start, an exit, a
request); gauges of jobs and GPUs are read from the daemon when Prometheus scrapes, so
they are never stale and cost nothing between scrapes. Each daemon has its own registry
(tests run several daemons in one process).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rota.core.lifecycle import JobState
from rota.core.snapshot import MILLI
from rota.server.access.auth import VIA_HEADER, VIA_KEY

if TYPE_CHECKING:
    from collections.abc import Sized

    from rota.core.snapshot import GpuView
    from rota.devices.base import GpuReading
    from rota.store.repo import Store


class Watched(Protocol):
    """What the gauges read from the daemon (which is one) at each scrape."""

    store: Store

    @property
    def readings(self) -> dict[int, GpuReading]: ...
    @property
    def paused(self) -> set[int]: ...
    @property
    def queue(self) -> Sized: ...
    def gpu_views(self) -> list[GpuView]: ...

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_WAIT_BUCKETS = (0.01, 0.1, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400)
_RUN_BUCKETS = (0.1, 1, 10, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 7 * 86400)
REQUESTS = "rota_api_request_duration_seconds"
_REQUESTS_HELP = "API requests, by route and status."
_REQUEST_LABELS = ("method", "route", "status")
REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5)
_REQUEST_LES = [*map(floatToGoString, REQUEST_BUCKETS), "+Inf"]
#: the daemon's route template of a request an API worker forwarded, in its answer
ROUTE_HEADER = "x-rota-route"
#: where a worker puts that template in the request's scope (see RequestTimer)
FORWARDED_ROUTE_KEY = "rota.forwarded_route"
_VIA = VIA_HEADER.encode()

#: a request histogram's running totals: (method, route, status) -> (cumulative counts by
#: bucket, the last one +Inf; sum of seconds)
Totals = dict[tuple[str, str, str], tuple[list[float], float]]


def request_histogram(registry: CollectorRegistry | None) -> Histogram:
    return Histogram(REQUESTS, _REQUESTS_HELP, _REQUEST_LABELS, buckets=REQUEST_BUCKETS,
                     registry=registry)


def totals_of(histogram: Histogram) -> Totals:
    out: Totals = {}
    for metric in histogram.collect():
        for s in metric.samples:
            key = (s.labels["method"], s.labels["route"], s.labels["status"])
            buckets = out.setdefault(key, ([], 0.0))[0]
            if s.name.endswith("_bucket"):
                buckets.append(s.value)
            elif s.name.endswith("_sum"):
                out[key] = (buckets, s.value)
    return out


def add_totals(parts: Iterable[Totals]) -> Totals:
    out: Totals = {}
    for part in parts:
        for key, (buckets, total) in part.items():
            if key in out:
                mine, so_far = out[key]
                out[key] = ([a + b for a, b in zip(mine, buckets, strict=True)], so_far + total)
            else:
                out[key] = (list(buckets), total)
    return out


class WorkerRequests:
    """The request totals the API workers report (each answers requests the daemon never
    sees), by worker slot. A restarted worker counts from zero again: the last totals of
    the one before are kept, so that what /metrics shows never goes down."""

    def __init__(self) -> None:
        self._latest: dict[int, tuple[int, Totals]] = {}
        self._retired: Totals = {}

    def report(self, slot: int, pid: int, totals: Totals) -> None:
        before = self._latest.get(slot)
        if before is not None and before[0] != pid:
            self._retired = add_totals([self._retired, before[1]])
        self._latest[slot] = (pid, totals)

    def parts(self) -> list[Totals]:
        return [self._retired, *(t for _, t in self._latest.values())]


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
        # the daemon's own requests; /metrics adds the workers' (_Requests)
        self.requests = request_histogram(None)
        self.worker_requests = WorkerRequests()
        r.register(_Requests(self.requests, self.worker_requests))

    def watch(self, daemon: Watched) -> None:
        """Add the gauges read from the daemon at scrape time."""
        self.registry.register(_DaemonCollector(daemon))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestTimer:
    """ASGI middleware timing every request by its route template (not its raw path, so
    job ids do not become labels). Plain ASGI: BaseHTTPMiddleware would cost more than
    many requests take.

    A request an API worker forwarded to the daemon's socket is timed by the worker (the
    time its client waited), not again by the daemon; the daemon's answer tells the worker
    the route template (ROUTE_HEADER), which the worker's own routing does not know."""

    def __init__(self, app: ASGIApp, histogram: Histogram) -> None:
        self.app, self.histogram = app, histogram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500
        # a worker's mark counts only on the socket (over TCP anyone could send it)
        forwarded = VIA_KEY not in scope and any(k == _VIA for k, _ in scope["headers"])

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if forwarded:
                    message = {**message, "headers": [*message.get("headers", ()), (
                        ROUTE_HEADER.encode(), _route(scope).encode("latin-1"))]}
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            if not forwarded:
                route = scope.get(FORWARDED_ROUTE_KEY) or _route(scope)
                self.histogram.labels(scope["method"], route, str(status)).observe(
                    time.perf_counter() - t0)


def _route(scope: Scope) -> str:
    return getattr(scope.get("route"), "path", "unmatched")


class _Requests(Collector):
    """The API request histogram: the daemon's own requests and its workers' together."""

    def __init__(self, own: Histogram, workers: WorkerRequests) -> None:
        self.own, self.workers = own, workers

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(REQUESTS, _REQUESTS_HELP, labels=_REQUEST_LABELS)
        for key, (buckets, total) in sorted(
                add_totals([totals_of(self.own), *self.workers.parts()]).items()):
            family.add_metric(list(key), list(zip(_REQUEST_LES, buckets, strict=True)), total)
        yield family


class _DaemonCollector(Collector):
    def __init__(self, daemon: Watched) -> None:
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
