"""Tiers and reports through a real daemon on simulated GPUs: each attempt records its tier
and price when it starts, the report adds up to the attempts' own GPU-seconds, and a later
change of prices (a restart with a new rota.toml) leaves what was spent as it was."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from rota.errors import InvalidSpec
from rota.store.repo import Store
from rota_testing import DaemonProcess, kill_job_processes, wait_until

TOML = """
[tiers.small]
price = {small}
time_limit = "1h"

[tiers.big]
price = 5.0
gpu_mem = "40G"
"""


def _ended(d: DaemonProcess, ids: list[int]) -> bool:
    with d.client() as c:
        return all(c.job(i)["state"] == "completed" for i in ids)


def test_attempts_are_charged_at_their_tiers_price_and_the_report_adds_up(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "rota.toml").write_text(TOML.format(small=2.0))
    d = DaemonProcess(home).start()
    try:
        small = d.submit("--gpus", "1", "--time-limit", "10m", "--", "sleep", "0.2")
        big = d.submit("--gpus", "2", "--", "sleep", "0.1")  # no time limit: only big fits
        named = d.submit("--gpus", "0.5", "--time-limit", "1m", "--tier", "big", "--", "true")
        refused = d.cli("submit", "--tier", "small", "--time-limit", "2h", "--", "true")
        assert refused.returncode != 0
        assert "does not fit tier small: time limit at most 1h00m, the job gives 2h00m" in (
            refused.stderr)
        wait_until(lambda: _ended(d, [small, big, named]), timeout=60, what="the jobs end")
        said = json.loads(d.cli("tiers", "--json").stdout)
        tiers = said["tiers"]
        assert [(t["name"], t["price"]) for t in tiers] == [("small", 2.0), ("big", 5.0)]
        assert said["default_prices"] is False  # set here: no label
        text = d.cli("report", "--by", "tier", "--since", "0").stdout
        assert " cost " in text and "cost*" not in text and "default prices" not in text

        store = Store.open(f"sqlite:///{home / 'rota.db'}")
        records = {r.job_id: r for r in store.usage(0.0, 1e12)}
        store.close()
        assert {j: (r.tier, r.price) for j, r in records.items()} == {
            small: ("small", 2.0), big: ("big", 5.0), named: ("big", 5.0)}
        # the kind of GPU each ran on, for fair share's GPU weights
        assert {r.gpu_type for r in records.values()} == {
            next(iter(records.values())).gpu_type}
        assert str(next(iter(records.values())).gpu_type).startswith("Rota simulated GPU")
        seconds = {j: r.gpus * (r.ended_at - r.started_at)  # type: ignore[operator]
                   for j, r in records.items()}

        out = d.cli("report", "--by", "tier", "--period", "day", "--since", "0", "--json")
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        totals = {t["group"]: t for t in report["totals"]}
        assert totals["small"]["gpu_hours"] * 3600 == pytest.approx(seconds[small], rel=1e-9)
        assert totals["big"]["gpu_hours"] * 3600 == pytest.approx(
            seconds[big] + seconds[named], rel=1e-9)
        assert totals["small"]["cost"] == pytest.approx(totals["small"]["gpu_hours"] * 2.0)
        assert totals["big"]["cost"] == pytest.approx(totals["big"]["gpu_hours"] * 5.0)

        out = d.cli("report", "--by", "user", "--period", "week", "--since", "0", "--csv")
        assert out.returncode == 0, out.stderr
        rows = list(csv.DictReader(io.StringIO(out.stdout)))
        assert all(r["week"].startswith("20") and "-W" in r["week"] for r in rows)
        # the CSV rounds (hours to 3 decimals, costs to cents): the JSON's figures, rounded
        whole = json.loads(d.cli("report", "--by", "user", "--period", "week", "--since",
                                 "0", "--json").stdout)["rows"]
        assert [(r["user"], r["week"], r["gpu_hours"], r["cost"], r["wasted_gpu_hours"])
                for r in rows] == [
            (w["group"], w["bucket"], f"{w['gpu_hours']:.3f}", f"{w['cost']:.2f}",
             f"{w['wasted_gpu_hours']:.3f}") for w in whole]
        assert sum(w["gpu_hours"] for w in whole) * 3600 == pytest.approx(
            sum(seconds.values()), rel=1e-6)
        assert sum(w["cost"] for w in whole) == pytest.approx(
            totals["small"]["cost"] + totals["big"]["cost"], rel=1e-6)

        # times it cannot read, or a window that ends before it starts, are named
        bad = d.cli("report", "--since", "yesterday")
        assert bad.returncode != 0 and "since: cannot read 'yesterday' as a date" in bad.stderr
        bad = d.cli("report", "--since", "2026-11-02", "--until", "2026-11-01")
        assert bad.returncode != 0 and "since (2026-11-02T00:00:00+00:00) is after until" \
            in bad.stderr, bad.stderr
        with d.client() as c, pytest.raises(InvalidSpec, match=r"until: .*pattern"):
            c.request("GET", "/v1/report", params={"until": "\u00de"})  # past the client
        d.stop()

        # the price of small goes up: what was spent stays, a new attempt pays the new price
        (home / "rota.toml").write_text(TOML.format(small=3.0))
        d = DaemonProcess(home).start()
        again = json.loads(d.cli("report", "--by", "tier", "--since", "0", "--json").stdout)
        assert {t["group"]: t["cost"] for t in again["totals"]} == pytest.approx(
            {t["group"]: t["cost"] for t in report["totals"]})
        later = d.submit("--gpus", "1", "--time-limit", "10m", "--", "true")
        wait_until(lambda: _ended(d, [later]), timeout=60, what="the new job ends")
        store = Store.open(f"sqlite:///{home / 'rota.db'}")
        prices = {r.job_id: r.price for r in store.usage(0.0, 1e12)}
        store.close()
        assert (prices[small], prices[later]) == (2.0, 3.0)
    finally:
        d.stop()
        kill_job_processes(home)


def test_costs_at_the_shipped_prices_say_so(tmp_path: Path) -> None:
    """With no [tiers] in rota.toml, jobs are charged at Rota's shipped prices: every cost
    shown says nobody here set them."""
    d = DaemonProcess(tmp_path / "home").start()
    try:
        job = d.submit("--gpus", "1", "--time-limit", "1h", "--", "sleep", "0.2")
        wait_until(lambda: _ended(d, [job]), timeout=60, what="the job ends")
        report = json.loads(d.cli("report", "--since", "0", "--json").stdout)
        assert report["default_prices"] is True and report["totals"][0]["cost"] > 0
        text = " ".join(d.cli("report", "--since", "0").stdout.split())
        assert "cost*" in text and "* at Rota's default prices" in text, text
        assert "rota.toml [tiers] sets yours" in text
        tiers = d.cli("tiers")
        assert "these are Rota's default tiers and prices" in " ".join(tiers.stdout.split())
        assert json.loads(d.cli("tiers", "--json").stdout)["default_prices"] is True
        card = d.cli("card", str(job)).stdout
        assert "Cost (default prices)" in card, card
        assert json.loads(d.cli("card", str(job), "--json").stdout)["default_prices"] is True
    finally:
        d.stop()
