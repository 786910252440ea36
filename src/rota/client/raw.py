"""The dict-level client the CLI uses: the daemon's JSON as it comes, over the same
transport (socket or URL, token, error mapping) as the typed SDK, :class:`rota.Client`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rota.client._endpoint import DEFAULT_TIMEOUT, Endpoint
from rota.client._wire import Timeout, WireTransport

if TYPE_CHECKING:
    from pathlib import Path


class RawClient:
    """Plain dicts in and out, for code that passes the daemon's answers on unchanged
    (``rota ... --json``). Programs should use :class:`rota.Client`."""

    def __init__(self, socket_path: str | os.PathLike[str] | None = None, *,
                 url: str | None = None, token: str | None = None,
                 timeout: Timeout = DEFAULT_TIMEOUT) -> None:
        self._t = WireTransport(Endpoint.resolve(socket_path, url=url, token=token), timeout)

    @property
    def socket_path(self) -> Path | None:
        """The daemon's socket (None for a daemon reached by URL)."""
        return self._t.endpoint.socket_path

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def request(self, method: str, path: str, **kw: Any) -> Any:
        return self._t.request(method, path, **kw)

    # --- jobs ----------------------------------------------------------------------------
    def submit(self, jobs: list[dict[str, Any]], *, idempotency_key: str | None = None,
               dedup: bool = False, force: bool = False) -> list[dict[str, Any]]:
        return list(self.submit_full(jobs, idempotency_key=idempotency_key, dedup=dedup,
                                     force=force)["jobs"])

    def submit_full(self, jobs: list[dict[str, Any]], *, idempotency_key: str | None = None,
                    dedup: bool = False, force: bool = False) -> dict[str, Any]:
        """The whole answer: ``jobs``, and ``warnings`` about their sizes when there are any.
        ``force``: accept a job this machine cannot run now (it waits until the GPUs
        change) instead of refusing it."""
        body: dict[str, Any] = {"jobs": jobs, "idempotency_key": idempotency_key,
                                "dedup": dedup}
        if force:
            body["force"] = True
        return dict(self.request("POST", "/v1/jobs", json=body))

    def jobs(self, *, states: list[str] | None = None, user: str | None = None,
             name: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit}
        if states:
            params["state"] = states
        if user:
            params["user"] = user
        if name:
            params["name"] = name
        return list(self.request("GET", "/v1/jobs", params=params)["jobs"])

    def job(self, job_id: int) -> dict[str, Any]:
        return dict(self.request("GET", f"/v1/jobs/{job_id}"))

    def events(self, job_id: int) -> list[dict[str, Any]]:
        return list(self.request("GET", f"/v1/jobs/{job_id}/events")["events"])

    def why(self, job_id: int) -> dict[str, Any]:
        return dict(self.request("GET", f"/v1/jobs/{job_id}/why"))

    def cancel(self, job_id: int) -> dict[str, Any]:
        return dict(self.request("POST", f"/v1/jobs/{job_id}/cancel"))

    def preempt(self, job_id: int) -> dict[str, Any]:
        return dict(self.request("POST", f"/v1/jobs/{job_id}/preempt"))

    def requeue(self, job_id: int) -> dict[str, Any]:
        return dict(self.request("POST", f"/v1/jobs/{job_id}/requeue"))

    def hold(self, job_id: int) -> dict[str, Any]:
        return dict(self.request("POST", f"/v1/jobs/{job_id}/hold"))

    def release(self, job_id: int) -> dict[str, Any]:
        return dict(self.request("POST", f"/v1/jobs/{job_id}/release"))

    def wait(self, job_id: int, timeout: float | None = None) -> dict[str, Any]:
        """Block until the job ends (or the timeout passes); long-polls the daemon."""
        while True:
            step = 60.0 if timeout is None else min(timeout, 60.0)
            res = dict(self.request("GET", f"/v1/jobs/{job_id}/wait",
                                    params={"timeout": step}, timeout=step + 30))
            if res["done"]:
                return res
            if timeout is not None:
                timeout -= step
                if timeout <= 0:
                    return res

    def logs(self, job_id: int, offset: int = 0) -> dict[str, Any]:
        return dict(self.request("GET", f"/v1/jobs/{job_id}/logs", params={"offset": offset}))

    def metrics(self, job_id: int, names: list[str] | None = None) -> dict[str, Any]:
        """Every sample of the job's metrics (all pages), merged per metric."""
        out: dict[str, Any] = {"series": {}}
        after = 0
        while True:
            page = dict(self.request("GET", f"/v1/jobs/{job_id}/metrics",
                                     params={"name": names or [], "after": after}))
            for name, points in page["series"].items():
                out["series"].setdefault(name, []).extend(points)
            out.update(id=page["id"], progress=page["progress"])
            if not page["more"]:
                return out
            after = page["next"]

    def checkpoints(self, job_id: int) -> dict[str, Any]:
        return dict(self.request("GET", f"/v1/jobs/{job_id}/checkpoints"))

    def follow_logs(self, job_id: int, offset: int = 0) -> Iterator[bytes]:
        with self._t.stream("GET", f"/v1/jobs/{int(job_id)}/logs",
                            params={"offset": offset, "follow": True}) as resp:
            yield from resp.iter_bytes()

    def attach_argv(self, job_id: int) -> list[str]:
        return list(self.request("GET", f"/v1/jobs/{job_id}/attach")["argv"])

    # --- machine -------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return dict(self.request("GET", "/v1/health"))

    def gpus(self) -> dict[str, Any]:
        return dict(self.request("GET", "/v1/gpus"))

    def pause(self, index: int) -> dict[str, Any]:
        return dict(self.request("POST", f"/v1/gpus/{index}/pause"))

    def resume(self, index: int) -> dict[str, Any]:
        return dict(self.request("POST", f"/v1/gpus/{index}/resume"))

    def simulate(self, index: int, **fault: Any) -> dict[str, Any]:
        return dict(self.request("POST", f"/v1/gpus/{index}/simulate", json=fault))

    def drain(self, on: bool = True) -> dict[str, Any]:
        return dict(self.request("POST", "/v1/drain", params={"on": on}))

    def queue_summary(self) -> dict[str, Any]:
        return dict(self.request("GET", "/v1/queue"))

    def queue(self, *, limit: int = 200, offset: int = 0,
              counts: bool = True) -> dict[str, Any]:
        """Totals, the jobs on GPUs, ``limit`` waiting jobs from ``offset`` in the order
        they will start (with why they wait), and the oldest held ones; ``counts=False``
        leaves out the counts per state (they read every job's row)."""
        return dict(self.request("GET", "/v1/queue", params={
            "limit": limit, "offset": offset, "counts": counts}))

    def sessions(self) -> list[dict[str, Any]]:
        return list(self.request("GET", "/v1/sessions")["sessions"])

    def reload_jobs_file(self) -> dict[str, Any]:
        return dict(self.request("POST", "/v1/jobsfile/reload"))

    def stats(self) -> dict[str, Any]:
        return dict(self.request("GET", "/v1/stats"))

    def shutdown(self) -> dict[str, Any]:
        return dict(self.request("POST", "/v1/shutdown"))

