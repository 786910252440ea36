"""Issue 38, a newcomer's first week: what the CLI says reads true and whole (numbers that
differ look different, "waits" said once, a time limit's early stop told as it is, yes/no,
rounded CSV, a unit file flush-left, a declined prompt's line ended, flags not API fields,
`rota share` in 80 columns, workspaces in words)."""

from __future__ import annotations

import configparser
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from rota.client.raw import RawClient
from rota.core.fairshare import FairShare, Standing
from rota.core.snapshot import PendingJob
from rota_testing import free_port, running_daemon

PY = sys.executable


def cli(daemon: Any, *args: str, columns: int = 80, stdin: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`rota ARGS` as a user runs it, its output a pipe (no terminal) COLUMNS wide."""
    env = {**os.environ, **(env if env is not None else daemon.env), "COLUMNS": str(columns)}
    return subprocess.run([PY, "-m", "rota", *args], env=env, capture_output=True, text=True,
                          timeout=60, input=stdin, check=False)


def _ids(rota: Any, *args: str) -> list[int]:
    r = rota("submit", "--json", *args)
    assert r.exit_code == 0, r.output
    return [int(j["id"]) for j in json.loads(r.stdout)["jobs"]]


def _flat(text: str) -> str:
    return " ".join(text.split())


# --- 1. fair-share factors that differ look different ---------------------------------------

def _standing(**factors: float) -> Standing:
    return Standing(users={name: FairShare(name, 1.0, 0.5, 0.0, 0.5, f)
                           for name, f in factors.items()}, projects={})


def _wait_text(mine: float, theirs: float) -> str:
    from rota.server.policy.shares_view import fair_share_wait

    job = PendingJob(1, 0, 1, 1000, user="bob")
    other = PendingJob(2, 0, 2, 1000, user="alice")
    return fair_share_wait(job, other, _standing(bob=mine, alice=theirs), 3.0)


def test_why_never_shows_two_equal_fair_share_factors_with_less_than() -> None:
    said = _wait_text(0.4951, 0.4987)
    assert "bob's fair-share factor 0.495 < alice's 0.499" in said, said
    assert "0.50 < alice's 0.50" not in said
    said = _wait_text(0.5000001, 0.5000002)  # equal to 4 digits: in words
    assert "bob's fair-share factor 0.50, slightly lower than alice's" in said, said
    assert "<" not in said
    said = _wait_text(0.31, 0.88)  # two digits tell them apart: two digits
    assert "bob's fair-share factor 0.31 < alice's 0.88 (bob used 3.0 GPU-h" in said, said


# --- 2. "waits" said once -------------------------------------------------------------------

def test_why_and_show_say_waits_once(rota: Any, daemon: Any, until: Any) -> None:
    first = _ids(rota, "--hold", "--gpus", "0", "--", "true")[0]
    second = _ids(rota, "--gpus", "0", "--after", str(first), "--", "true")[0]
    try:
        until(lambda: daemon.client.why(second).get("code") == "dependency", 20,
              "the dependency's reason")
        why = rota("why", str(second)).stdout
        assert why == f"job {second} waits for job {first} (held) to complete\n", why
        shown = rota("show", str(second)).stdout
        row = next(line for line in shown.splitlines() if line.startswith("waits"))
        assert _flat(row) == f"waits for job {first} (held) to complete", row
    finally:
        for j in (second, first):
            daemon.client.cancel(j)


def test_a_reason_that_says_waits_colon_is_not_prefixed_again() -> None:
    from rota.cli.job_view import why_sentence

    said = why_sentence({"id": 7, "state": "pending",  # type: ignore[typeddict-item]
                         "message": "waits: its workspace alice/default holds 12G, over its "
                                    "quota 10G"})
    assert said == "job 7 waits: its workspace alice/default holds 12G, over its quota 10G"
    said = why_sentence({"id": 7, "state": "pending",  # type: ignore[typeddict-item]
                         "message": "not yet looked at by a pass"})
    assert said == "job 7 waits: not yet looked at by a pass"


# --- 3. a time limit's early stop, told as it is -------------------------------------------

def test_a_job_stopped_before_its_time_limit_is_not_said_to_have_reached_it(
        rota: Any, daemon: Any, until: Any) -> None:
    # limit 6 s, grace 2 s: asked to stop at 4 s, so that it has ended by 6 s
    jid = _ids(rota, "--gpus", "0", "--time-limit", "6s", "--grace", "2s", "--",
               "sleep", "60")[0]
    until(lambda: daemon.client.job(jid)["state"] == "timeout", 30, "the time limit")
    stopping = [e["message"] for e in daemon.client.events(jid)
                if e["kind"] == "stopping:timeout"]
    assert len(stopping) == 1
    assert re.fullmatch(r"asked to stop after \d+s so that it ends within its time limit of "
                        r"6s \(grace 2s\); sent SIGTERM, then SIGKILL \d+s later",
                        stopping[0]), stopping[0]
    assert "asked to stop after" in _flat(rota("show", str(jid)).stdout)


# --- 4. yes/no, not True/False --------------------------------------------------------------

def test_show_says_yes_not_pythons_true(rota: Any, daemon: Any) -> None:
    jid = _ids(rota, "--hold", "--preemptible", "--gpus", "0", "--", "true")[0]
    try:
        out = rota("show", str(jid)).stdout
        spec = out.split("\nspec\n", 1)[1]
        rows = {line.split()[0]: line.split()[1:] for line in spec.splitlines() if line.strip()}
        assert rows["preemptible"] == ["yes"] and rows["hold"] == ["yes"], spec
        assert "True" not in spec and "False" not in spec
    finally:
        daemon.client.cancel(jid)


# --- 5. the report's CSV rounded to what its figures mean -----------------------------------

def test_report_csv_gives_hours_to_3_6_seconds_and_costs_to_cents() -> None:
    from rota.cli.usage import report_csv

    data: Any = {"by": "user", "period": "day", "rows": [
        {"group": "alice", "bucket": "2026-12-01", "gpu_hours": 0.1 + 0.2,
         "cost": 1 / 3, "wasted_gpu_hours": 2 / 3}]}
    assert report_csv(data) == ("user,day,gpu_hours,cost,wasted_gpu_hours\n"
                                "alice,2026-12-01,0.300,0.33,0.667\n")


# --- 6. the unit file, flush-left -----------------------------------------------------------

def test_server_install_print_prints_the_unit_flush_left(tmp_path: Path) -> None:
    env = {"ROTA_HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    r = cli(None, "server", "install", "--print", env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "[Unit]" and not [x for x in lines if x[:1].isspace()], r.stdout
    parsed = configparser.ConfigParser(interpolation=None, strict=True)
    parsed.read_string(r.stdout)
    assert parsed.sections() == ["Unit", "Service", "Install"]
    assert not (tmp_path / "cfg").exists()


# --- 7. a declined prompt ends its line -----------------------------------------------------

def test_a_declined_confirmation_ends_the_prompts_line(rota: Any, daemon: Any) -> None:
    assert cli(daemon, "user", "add", "carol-no").returncode == 0
    held = _ids(rota, "--hold", "--gpus", "0", "--name", "declined-cancel", "--", "true")[0]
    try:
        for answer in ("", "n\n"):  # stdin closed, or "n" from a pipe
            r = cli(daemon, "user", "rm", "carol-no", stdin=answer)
            assert r.returncode == 1
            assert r.stderr.splitlines() == [
                "remove user carol-no (revoke their tokens, delete their secrets; their "
                "ended jobs stay as history)? [y/N]: ",
                "error: user carol-no not removed (--yes removes without asking)"], r.stderr
            r = cli(daemon, "cancel", "--name", "declined-cancel", stdin=answer)
            assert r.returncode == 1
            assert r.stderr.splitlines() == [
                f"cancel 1 job: {held} declined-cancel (held)? [y/N]: ",
                "error: nothing cancelled (--yes cancels without asking)"], r.stderr
            assert r.stdout == ""
        assert daemon.client.job(held)["state"] == "held"
        r = cli(daemon, "user", "rm", "carol-no", stdin="y\n")
        assert r.returncode == 0 and "user carol-no removed" in r.stdout, r.stderr
    finally:
        daemon.client.cancel(held)


# --- 8. the flag, not the API's field -------------------------------------------------------

def test_user_rm_with_active_jobs_names_the_flag(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "home").mkdir()
    with running_daemon(tmp_path / "home", toml=f'listen = "127.0.0.1:{port}"\n') as d:
        with d.client() as owner:
            owner.add_user("dana")
            token = owner.create_token("dana", None)["token"]
        with RawClient(url=f"http://127.0.0.1:{port}", token=token) as dana:
            job = dana.submit([{"command": ["true"], "gpus": 0, "hold": True}])[0]["id"]
        r = d.cli("user", "rm", "dana", "--yes")
        assert r.returncode == 1
        assert r.stderr == (f"error: dana has 1 active job ({job}); cancel them first, or "
                            "remove the user and cancel them at once (rota user rm "
                            "--cancel-jobs; cancel_jobs=true over the API)\n"), r.stderr
        r = d.cli("user", "rm", "dana", "--yes", "--cancel-jobs")
        assert r.returncode == 0, r.stderr
        assert "1 job(s) cancelled" in r.stdout


# --- 9. `rota share` in 80 columns ----------------------------------------------------------

def test_share_fits_80_columns_with_its_header_on_one_line(daemon: Any) -> None:
    daemon.client.set_share("newcomer-ann", 2)
    daemon.client.set_share("vision-team", 3, project=True)
    r = cli(daemon, "share")
    assert r.returncode == 0, r.stderr
    for line in r.stdout.splitlines():
        assert len(line) <= 80, f"{len(line)} > 80: {line!r}"
    assert "…" not in r.stdout  # nothing cut short
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["kind", "name", "shares", "share", "usage", "used", "factor",
                                "day", "week"], r.stdout
    assert re.search(r"^user +newcomer-ann +2 +\d+% ", r.stdout, re.M), r.stdout
    assert re.search(r"^project +vision-team +3 +100% ", r.stdout, re.M), r.stdout
    assert "usage: decayed GPU-hours" in _flat(r.stdout)


# --- 10, 11. `rota workspace` in words, its flag named --------------------------------------

def test_an_unmeasured_workspace_reads_as_words() -> None:
    from rota.cli.artifacts import workspaces_text

    data: Any = {"default_quota": 100 << 30, "workspaces": [
        {"name": "alice/default", "bytes": None, "quota": 100 << 30, "own_quota": False,
         "over": False, "path": "/w/alice/default", "sync": None},
        {"name": "bob/vision", "bytes": 12 << 30, "quota": 100 << 30, "own_quota": False,
         "over": False, "path": "/w/bob/vision", "sync": None}]}
    assert workspaces_text(data).splitlines() == [
        "alice/default  not measured yet; quota 100G  /w/alice/default",
        "bob/vision          12G of 100G  /w/bob/vision"]


def test_workspace_clean_days_names_the_flag(rota: Any) -> None:
    for days in ("0", "-3", "40000"):
        r = rota("workspace", "clean", "root/default", "--days", days)
        assert r.exit_code == 2, r.output
        assert r.stderr == ("error: --days must be more than 0 and at most 36500 (a number "
                            f"of days, e.g. 30), not {float(days):g}\n"), r.stderr


# --- an existing user mapped to a Unix account ----------------------------------------------

def test_an_existing_user_is_mapped_to_a_unix_account_with_user_set(daemon: Any) -> None:
    assert cli(daemon, "user", "add", "dora").returncode == 0
    again = cli(daemon, "user", "add", "dora", "--unix", "nobody")
    assert again.returncode != 0 and "rota user set dora --unix ACCOUNT" in again.stderr
    r = cli(daemon, "user", "set", "dora", "--unix", "nobody", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["unix_account"] == "nobody"
    users = {u["name"]: u for u in json.loads(cli(daemon, "user", "list", "--json").stdout)
             ["users"]}
    assert users["dora"]["unix_account"] == "nobody" and users["dora"]["admin"] is False
    r = cli(daemon, "user", "set", "dora", "--admin")  # the account stays
    assert r.returncode == 0 and "admin, jobs run as nobody" in r.stdout, r.stdout
    r = cli(daemon, "user", "set", "dora", "--own-account", "--json")
    assert json.loads(r.stdout)["unix_account"] is None
    assert "nothing to change" in cli(daemon, "user", "set", "dora").stderr
    bad = cli(daemon, "user", "set", "dora", "--unix", "no-such-account-x")
    assert bad.returncode != 0 and "no Unix account 'no-such-account-x'" in bad.stderr
    gone = cli(daemon, "user", "set", "nobody-here", "--admin")
    assert gone.returncode != 0 and "no user 'nobody-here'" in gone.stderr
    assert cli(daemon, "user", "rm", "dora", "--yes").returncode == 0
