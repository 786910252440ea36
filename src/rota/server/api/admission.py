"""Point requests before bulk reads.

A request about one job, or one that changes something (submit, get, cancel, wait, ...),
goes ahead of a waiting bulk read: a job list page, the queue summary or /metrics, whose
cost grows with the store. Under load the operations programs block on stay quick, and
the pages and summaries take the wait. The Kubernetes API server does the same in its
priority and fairness (a LIST takes more seats than a GET); here a bulk read gives up its
turn.

A server process runs one request's handler at a time (the store is read synchronously
on the event loop), so the order in which the loop starts requests decides who waits. A
bulk read yields the loop turn after turn while point requests keep starting, and goes
when a turn starts none or after ``max_yields`` turns: under a flood of point requests a
bulk read still goes, after at most ``max_yields`` turns for itself and for each bulk read
ahead of it, and one turn per hand-over (they go one at a time, in arrival order).
Nothing here reads a clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

#: paths whose GET reads the whole store, or a page of it
BULK_READ_PATHS = frozenset({"/v1/jobs", "/v1/queue", "/v1/summary", "/metrics"})

#: the most loop turns a bulk read yields to point requests once it is next in line
MAX_YIELDS = 8


def is_bulk_read(scope: Scope) -> bool:
    return scope["method"] in ("GET", "HEAD") and scope["path"] in BULK_READ_PATHS


class PointRequestsFirst:
    """ASGI middleware: bulk reads wait while point requests are being started."""

    def __init__(self, app: ASGIApp, *, max_yields: int = MAX_YIELDS,
                 is_bulk: Callable[[Scope], bool] = is_bulk_read) -> None:
        if max_yields < 1:
            raise ValueError(f"max_yields must be at least 1, not {max_yields}")
        self.app, self.max_yields, self.is_bulk = app, max_yields, is_bulk
        self.point_requests = 0  # started so far: a bulk read watches it change
        self._next_in_line = asyncio.Lock()  # FIFO: bulk reads go in arrival order

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if self.is_bulk(scope):
                await self._wait_turn()
            else:
                self.point_requests += 1
        await self.app(scope, receive, send)

    async def _wait_turn(self) -> None:
        async with self._next_in_line:
            for _ in range(self.max_yields):
                seen = self.point_requests
                await asyncio.sleep(0)  # to the back of the loop's ready queue
                if self.point_requests == seen:
                    return  # a turn started no point request: the bulk read's turn
