"""`rota logs JOB --since/--until` against a real daemon: a job prints a numbered line with
its wall time every 0.3 s, and a window cut from the daemon's time index holds every line
printed in it and nothing printed more than one read interval outside it (the index is
written at the daemon's reads of the log, every READ_EVERY_S)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import rota
from rota.server.tracking.log_times import index_path
from rota.server.tracking.outputs import READ_EVERY_S
from rota_testing import DaemonProcess, running_daemon, wait_until

#: a line's print time and when the daemon sees it differ by one read interval, and a
#: little more: the loop's own turn, the print and flush on a shared 2-core machine
SLACK = READ_EVERY_S + 1.0
PRINTER = ("import time\n"
           "for i in range({n}):\n"
           "    print(f'line {{i:02d}} {{time.time():.3f}}', flush=True)\n"
           "    time.sleep(0.3)\n")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with running_daemon(tmp_path_factory.mktemp("logs-window")) as d:
        yield d


def printer(d: DaemonProcess, n: int) -> int:
    return d.submit("--gpus", "0", "--", sys.executable, "-c", PRINTER.format(n=n))


@pytest.fixture(scope="module")
def printed(daemon: DaemonProcess) -> tuple[int, dict[int, float]]:
    """An ended job that printed 20 lines over ~6 s: its id and each line's print time."""
    job = printer(daemon, 20)
    r = daemon.cli("wait", str(job), "--timeout", "60")
    assert r.returncode == 0, r.stdout + r.stderr
    return job, times_in(daemon.cli("logs", str(job)).stdout)


def times_in(text: str) -> dict[int, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("line "):
            _, i, t = line.split()
            out[int(i)] = float(t)
    return out


def check_window(got: dict[int, float], every: dict[int, float], since: float | None,
                 until: float | None) -> None:
    lo, hi = since or 0.0, until or float("inf")
    assert {i for i, t in every.items() if lo <= t <= hi} <= set(got), (since, until, got)
    assert all(lo - SLACK <= t <= hi + SLACK for t in got.values()), (since, until, got)
    assert list(got) == list(range(min(got), max(got) + 1)) if got else True


def test_a_window_holds_the_lines_printed_in_it_give_or_take_a_read(
        daemon: DaemonProcess, printed: tuple[int, dict[int, float]]) -> None:
    job, every = printed
    assert sorted(every) == list(range(20))
    start = every[0]
    for since, until in ((every[7] - 0.1, every[12] + 0.1), (None, every[5] + 0.1),
                         (every[14] - 0.1, None), (every[9] - 0.1, every[9] + 0.1)):
        args = [*(["--since", f"@{since}"] if since else []),
                *(["--until", f"@{until}"] if until else [])]
        r = daemon.cli("logs", str(job), *args)
        assert r.returncode == 0, r.stderr
        got = times_in(r.stdout)
        check_window(got, every, since, until)
        # whole lines only, and the window is narrower than the job
        assert r.stdout.endswith("\n") and all(
            line.startswith(("line ", "=== rota:")) for line in r.stdout.splitlines())
        if since is not None and since - SLACK > start:
            assert 0 not in got
        with rota.Client(daemon.socket) as c:  # the SDK: the same window, the same text
            assert "".join(c.logs(job, since=since, until=until)) == r.stdout
            if until is None:  # following (server-sent events) from since: the same too
                assert "".join(c.logs(job, follow=True, since=since)) == r.stdout
        assert asyncio.run(async_logs(daemon, job, since, until)) == r.stdout
    far = every[19] + 60
    assert daemon.cli("logs", str(job), "--until", f"@{start - 60}").stdout == ""
    assert daemon.cli("logs", str(job), "--since", f"@{far}").stdout == ""
    assert sorted(times_in(daemon.cli("logs", str(job), "--since", "1h").stdout)) == list(
        range(20))


async def async_logs(d: DaemonProcess, job: int, since: float | None,
                     until: float | None) -> str:
    async with rota.AsyncClient(d.socket) as c:
        return "".join([t async for t in c.logs(job, since=since, until=until)])


def test_json_and_the_api_say_where_the_window_starts_and_ends(
        daemon: DaemonProcess, printed: tuple[int, dict[int, float]]) -> None:
    job, every = printed
    since, until = every[6], every[13]
    r = daemon.cli("logs", str(job), "--json", "--since", f"@{since}", "--until", f"@{until}")
    out = json.loads(r.stdout)
    assert out["id"] == job and out["next"] == out["offset"] + len(out["data"].encode())
    check_window(times_in(out["data"]), every, since, until)
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(daemon.socket)),
                      base_url="http://rota") as h:
        page = h.get(f"/v1/jobs/{job}/logs",
                     params={"since": since, "until": until, "limit": 10}).json()
        assert page["offset"] == out["offset"] and page["end"] == out["next"]
        assert page["next"] == page["offset"] + 10  # a page of the window; ask on from next
        rest = h.get(f"/v1/jobs/{job}/logs", params={"since": since, "until": until,
                                                      "offset": page["next"]}).json()
        assert page["data"] + rest["data"] == out["data"] and rest["next"] == rest["end"]
        followed = h.get(f"/v1/jobs/{job}/logs",
                         params={"since": since, "until": until, "follow": True})
        assert followed.text == out["data"]  # the window, as a stream that ends there
        empty = h.get(f"/v1/jobs/{job}/logs", params={"since": until, "until": since})
        assert empty.json()["data"] == ""  # the CLI and the SDK refuse it before asking


def test_follow_from_since_starts_there_and_goes_on_to_the_end(
        daemon: DaemonProcess) -> None:
    job = printer(daemon, 16)
    log = daemon.home / "logs" / f"{job}.log"
    wait_until(lambda: log.exists() and "line 06" in log.read_text(), 30,
               what="the job's first lines")
    every = times_in(log.read_text())
    since = every[4]
    r = daemon.cli("logs", "-f", str(job), "--since", f"@{since}")
    assert r.returncode == 0, r.stderr
    got = times_in(r.stdout)
    assert max(got) == 15 and set(range(4, 16)) <= set(got)  # followed to the job's end
    assert all(t >= since - SLACK for t in got.values())
    r = daemon.cli("logs", "-f", str(job), "--until", "5m")
    assert r.returncode != 0 and "--until: cannot be used with -f" in r.stderr, r.stderr


def test_bad_values_name_the_option(daemon: DaemonProcess,
                                    printed: tuple[int, dict[int, float]]) -> None:
    job = str(printed[0])
    r = daemon.cli("logs", job, "--since", "2x")
    assert r.returncode != 0 and "--since: '2x' is not a duration or a time" in r.stderr
    r = daemon.cli("logs", job, "--until", "yesterday-ish")
    assert r.returncode != 0 and "--until: 'yesterday-ish' is not a duration" in r.stderr
    r = daemon.cli("logs", job, "--since", "30m", "--until", "2h")
    assert r.returncode != 0 and "--since (" in r.stderr and "is after --until" in r.stderr
    with rota.Client(daemon.socket) as c:
        with pytest.raises(rota.InvalidSpec, match=r"since \(.*\) is after until"):
            list(c.logs(int(job), since="30m", until="2h"))
        with pytest.raises(rota.InvalidSpec, match="since: '2x' is not a duration"):
            list(c.logs(int(job), since="2x"))
        with pytest.raises(rota.InvalidSpec, match="until: a followed log has no end"):
            list(c.logs(int(job), follow=True, until="1m"))


def test_a_log_without_an_index_says_so_instead_of_printing_everything(
        daemon: DaemonProcess) -> None:
    job = daemon.submit("--gpus", "0", "--", "echo", "from before indexes")
    assert daemon.cli("wait", str(job), "--timeout", "30").returncode == 0
    log: Path = daemon.home / "logs" / f"{job}.log"
    index_path(log).unlink()  # as a log written by a Rota that kept no index
    r = daemon.cli("logs", str(job), "--since", "1h")
    assert r.returncode != 0 and r.stdout == ""
    assert f"job {job}'s log has no time index" in r.stderr, r.stderr
    assert "from before indexes" in daemon.cli("logs", str(job)).stdout  # whole: still there
