"""A small synchronous client over the daemon's Unix socket (httpx)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from rota.errors import Conflict, DaemonUnavailable, InvalidSpec, NotFound, RotaError

_BY_STATUS: dict[int, type[RotaError]] = {404: NotFound, 409: Conflict, 422: InvalidSpec}


class Client:
    def __init__(self, socket_path: Path, *, timeout: float = 30.0) -> None:
        self.socket_path = socket_path
        self._http = httpx.Client(transport=httpx.HTTPTransport(uds=str(socket_path)),
                                  base_url="http://rota", timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- plumbing ------------------------------------------------------------------------
    def request(self, method: str, path: str, **kw: Any) -> Any:
        try:
            resp = self._http.request(method, path, **kw)
        except (httpx.ConnectError, FileNotFoundError, ConnectionRefusedError) as e:
            raise DaemonUnavailable(
                f"no Rota daemon is answering on {self.socket_path}. Start one with "
                "`rota server --detach` (or `rota server` in another terminal).") from e
        except httpx.TimeoutException as e:
            raise DaemonUnavailable(f"the daemon did not answer in time ({e})") from e
        if resp.status_code >= 400:
            raise _error_from(resp)
        return resp.json()

    # --- jobs ----------------------------------------------------------------------------
    def submit(self, jobs: list[dict[str, Any]], *, idempotency_key: str | None = None,
               dedup: bool = False) -> list[dict[str, Any]]:
        body = {"jobs": jobs, "idempotency_key": idempotency_key, "dedup": dedup}
        return list(self.request("POST", "/v1/jobs", json=body)["jobs"])

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

    def follow_logs(self, job_id: int, offset: int = 0) -> Iterator[bytes]:
        try:
            with self._http.stream("GET", f"/v1/jobs/{job_id}/logs",
                                   params={"offset": offset, "follow": True},
                                   timeout=None) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise _error_from(resp)
                yield from resp.iter_bytes()
        except httpx.ConnectError as e:
            raise DaemonUnavailable(f"no Rota daemon is answering on {self.socket_path}") from e

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

    def sessions(self) -> list[dict[str, Any]]:
        return list(self.request("GET", "/v1/sessions")["sessions"])

    def reload_jobs_file(self) -> dict[str, Any]:
        return dict(self.request("POST", "/v1/jobsfile/reload"))

    def stats(self) -> dict[str, Any]:
        return dict(self.request("GET", "/v1/stats"))

    def shutdown(self) -> dict[str, Any]:
        return dict(self.request("POST", "/v1/shutdown"))


def _error_from(resp: httpx.Response) -> RotaError:
    try:
        body = resp.json()
        detail = body.get("detail") or resp.text
        field = body.get("field")
    except ValueError:
        detail, field = resp.text, None
    cls = _BY_STATUS.get(resp.status_code, RotaError)
    if cls is InvalidSpec:
        return InvalidSpec(str(detail), field=field)
    return cls(str(detail))
