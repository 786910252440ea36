"""Following a job's log as server-sent events, over the API and through the SDK."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import httpx
from httpx_sse import EventSource

import rota
from rota_testing import DaemonProcess, wait_until

# Prints whole lines, a multi-byte character split across two writes, and a last partial
# line (a progress bar's), with pauses so the stream sees them arrive one by one.
SCRIPT = r"""
import os, sys, time
out = sys.stdout.buffer
for i in range(3):
    out.write(f"line {i}\n".encode()); out.flush(); time.sleep(0.4)
e = "é".encode()
out.write(b"split " + e[:1]); out.flush(); time.sleep(0.4)
out.write(e[1:] + b" done\n"); out.flush(); time.sleep(0.2)
out.write(b"45%|####"); out.flush()
sys.exit(3)
"""




def raw(d: DaemonProcess) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(d.socket)), base_url="http://rota",
                        timeout=httpx.Timeout(30, read=None))


def submit(d: DaemonProcess, argv: list[str]) -> int:
    with d.client() as c:
        [job] = c.submit([{"command": argv, "gpus": 0}])
    return int(job["id"])


def events(c: httpx.Client, job_id: int, **kw: Any) -> Iterator[tuple[str, str, dict[str, Any]]]:
    with c.stream("GET", f"/v1/jobs/{job_id}/logs/stream", **kw) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        for ev in EventSource(resp).iter_sse():
            if ev.data:  # the opening `retry:` block carries no data
                yield ev.event, ev.id, json.loads(ev.data)


def test_the_stream_follows_the_job_and_ends_with_its_state(daemon: DaemonProcess) -> None:
    job_id = submit(daemon, [sys.executable, "-u", "-c", SCRIPT])
    got: list[tuple[str, str, dict[str, Any]]] = []
    state_at_first_line = None
    with raw(daemon) as c:
        for ev in events(c, job_id):
            got.append(ev)
            if state_at_first_line is None and ev[0] == "log" and "line 0" in ev[2]["text"]:
                state_at_first_line = c.get(f"/v1/jobs/{job_id}").json()["state"]
    # it streamed live, not after the end (a started job is stored as running a few ms
    # after its process exists, so its first line may come while it still reads starting)
    assert state_at_first_line in ("starting", "running")
    kinds = [k for k, _, _ in got]
    assert kinds[-1] == "end" and set(kinds[:-1]) == {"log"} and len(kinds) >= 5
    end = got[-1][2]
    assert (end["id"], end["state"], end["exit_code"]) == (job_id, "failed", 3)
    logs = [(i, b) for k, i, b in got if k == "log"]
    # offsets chain with no gap or overlap, each id is the event's `next`
    assert logs[0][1]["offset"] == 0
    for (_, a), (_, b) in pairwise(logs):
        assert b["offset"] == a["next"]
    assert all(int(i) == b["next"] for i, b in logs)
    text = "".join(b["text"] for _, b in logs)
    log_file = (daemon.home / "logs" / f"{job_id}.log").read_bytes()
    assert text.encode() == log_file and logs[-1][1]["next"] == len(log_file)
    assert "split é done\n" in text and text.endswith("45%|####")  # the partial line came
    assert "\ufffd" not in text  # the split character was never cut in two


def test_last_event_id_resumes_where_the_client_left_off(daemon: DaemonProcess) -> None:
    job_id = submit(daemon, ["sh", "-c", "printf 'abc\\ndef\\n'; printf 'ghi'"])
    with raw(daemon) as c:
        wait_until(lambda: c.get(f"/v1/jobs/{job_id}").json()["state"] == "completed", 30)
        whole = "".join(b["text"] for k, _, b in events(c, job_id) if k == "log")
        mid = whole.index("def")
        resumed = list(events(c, job_id, headers={"Last-Event-ID": str(mid)}))
        assert "".join(b["text"] for k, _, b in resumed if k == "log") == whole[mid:]
        assert resumed[-1][0] == "end"
        # the header wins over ?offset=, and a bad one is named
        again = list(events(c, job_id, params={"offset": 0},
                            headers={"Last-Event-ID": str(len(whole.encode()))}))
        assert [k for k, _, _ in again] == ["end"]
        r = c.get(f"/v1/jobs/{job_id}/logs/stream", headers={"Last-Event-ID": "12abc"})
        assert r.status_code == 422 and r.json()["field"] == "Last-Event-ID"
        assert c.get("/v1/jobs/99999/logs/stream").status_code == 404


def test_the_sdk_follows_across_a_daemon_crash(daemon: DaemonProcess) -> None:
    """The daemon is killed while a client follows a log: the client reconnects to the
    restarted daemon and gets the rest, nothing twice and nothing missed."""
    script = ("import time\n"
              "for i in range(12):\n"
              "    print(f'tick {i}', flush=True); time.sleep(0.35)\n")
    job_id = submit(daemon, [sys.executable, "-u", "-c", script])
    chunks: list[str] = []
    failure: list[BaseException] = []

    def follow() -> None:
        try:
            with rota.Client(daemon.socket) as c:
                chunks.extend(c.logs(job_id, follow=True))
        except BaseException as e:  # reported by the test below
            failure.append(e)

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    wait_until(lambda: "tick 2" in "".join(chunks), 30)
    daemon.kill()
    time.sleep(0.5)
    daemon.start()
    t.join(60)
    assert not t.is_alive() and not failure, failure
    text = "".join(chunks)
    ticks = [line for line in text.splitlines() if line.startswith("tick")]
    assert ticks == [f"tick {i}" for i in range(12)], text
    with rota.Client(daemon.socket) as c:
        assert c.get(job_id).state == "completed"
