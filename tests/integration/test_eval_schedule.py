"""`rota eval schedule | schedules | unschedule` against a real daemon: --every runs
again and again, and after a SIGKILL and a restart the schedule is still there and fires,
once per due time; --after-job runs once when the job completes and not when it fails;
--on-checkpoint evaluates each checkpoint of a running job once, whose model it is; a bad
config is refused naming its fields; unschedule stops it. An --on-checkpoint and an
--after-job schedule hold across a SIGKILL too: nothing evaluated twice, nothing missed.

The evaluations wait behind a job holding every GPU: what is checked is what was submitted
(their specs and events), not a harness's run."""

from __future__ import annotations

import json
import re
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rota.errors import InvalidSpec
from rota_testing import DaemonProcess, kill_job_processes, wait_until

CONFIG = textwrap.dedent("""\
    version: 1
    name: nightly
    model: {{uri: {model}}}
    harness: {{kind: heldout, tasks: [heldout.jsonl]}}
    compute: {{gpus: 1}}
    tracking:
      tags: {{creator: ana, lifecycle: candidate}}
    """)


def _start(home: Path) -> DaemonProcess:
    d = DaemonProcess(home, simulate="2x24G").start()
    d.submit("--gpus", "2", "--name", "blocker", "--", "sleep", "600")  # evaluations wait
    return d


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    d = _start(tmp_path / "home")
    try:
        yield d
    finally:
        d.stop()
        kill_job_processes(tmp_path)


def config_file(folder: Path, model: str = "/models/tiny") -> Path:
    path = folder / "eval.yaml"
    path.write_text(CONFIG.format(model=model))
    return path


def schedule(d: DaemonProcess, *args: str) -> dict[str, Any]:
    r = d.cli("eval", "schedule", "--json", *args)
    assert r.returncode == 0, r.stdout + r.stderr
    return dict(json.loads(r.stdout))


def the_schedule(d: DaemonProcess, sid: int) -> dict[str, Any]:
    with d.client() as c:
        return next(s for s in c.eval_schedules()["schedules"] if s["id"] == sid)


def jobs_of(d: DaemonProcess, sid: int) -> list[dict[str, Any]]:
    """The jobs schedule ``sid`` submitted, oldest first, with their specs."""
    with d.client() as c:
        got = c.request("GET", "/v1/jobs", params={"tag": f"eval-schedule:{sid}",
                                                     "limit": 500})
        return [dict(c.job(j["id"])) for j in sorted(got["jobs"], key=lambda j: j["id"])]


def schedule_notes(d: DaemonProcess, job_id: int) -> list[str]:
    with d.client() as c:
        events = c.request("GET", f"/v1/jobs/{job_id}/events")["events"]
    return [e["message"] for e in events if e["kind"] == "eval_schedule"]


def test_every_runs_again_and_again_and_once_per_due_time_across_a_sigkill(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    d = _start(home)
    try:
        made = schedule(d, str(config_file(tmp_path)), "--every", "2s")
        sid = made["id"]
        assert (made["trigger"], made["every_s"], made["enabled"]) == ("every", 2.0, True)
        wait_until(lambda: len(jobs_of(d, sid)) >= 2, timeout=20, what="two runs")
        first = jobs_of(d, sid)[0]
        spec = first["spec"]
        assert spec["command"] == [sys.executable, "-m", "rota.eval.run"]
        assert spec["cwd"].startswith(str(home / "eval" / "nightly-"))
        assert {"eval", "eval:nightly", f"eval-schedule:{sid}"} <= set(spec["tags"])
        assert spec["env"]["ROTA_EVAL_MODEL"] == "/models/tiny"
        assert first["source"] == "schedule" and first["state"] == "pending"
        with d.client() as c:  # `rota eval results` finds them
            assert first["id"] in {r["id"] for r in c.eval_results(name="nightly")["runs"]}

        d.kill()  # no cleanup; two or three due times pass while it is down
        before = len(jobs_of_stored(home, sid))
        time.sleep(5)
        d.start()
        assert the_schedule(d, sid)["enabled"]
        wait_until(lambda: len(jobs_of(d, sid)) > before, timeout=20, what="a run after "
                   "the restart")
        after = jobs_of(d, sid)[before]
        assert "missed while the daemon was down: one run for all" in \
            schedule_notes(d, after["id"])[0]

        r = d.cli("eval", "unschedule", str(sid))
        assert r.returncode == 0 and f"evaluation schedule {sid} removed" in r.stdout
        count = len(jobs_of(d, sid))
        time.sleep(3)  # longer than a period and a tick: nothing more comes
        assert len(jobs_of(d, sid)) == count
        due = [re.search(r"the run due at (.*? UTC)", n).group(1)  # type: ignore[union-attr]
               for j in jobs_of(d, sid) for n in schedule_notes(d, j["id"])]
        assert len(due) == count and len(set(due)) == count  # none twice for one due time
        assert the_schedule_gone(d, sid)
    finally:
        d.stop()
        kill_job_processes(tmp_path)


def jobs_of_stored(home: Path, sid: int) -> list[int]:
    """The schedule's jobs as the store has them (the daemon is down)."""
    from rota.store.repo import Store

    store = Store.open(f"sqlite:///{home / 'rota.db'}")
    try:
        return [r.id for r in store.list_jobs(tag=f"eval-schedule:{sid}")]
    finally:
        store.close()


def the_schedule_gone(d: DaemonProcess, sid: int) -> bool:
    with d.client() as c:
        return all(s["id"] != sid for s in c.eval_schedules()["schedules"])


def test_after_job_runs_once_when_it_completes_and_not_when_it_fails(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    ok = daemon.submit("--gpus", "0", "--hold", "--", "true")
    bad = daemon.submit("--gpus", "0", "--hold", "--", "false")
    on_ok = schedule(daemon, str(config_file(tmp_path)), "--after-job", str(ok))["id"]
    on_bad = schedule(daemon, str(config_file(tmp_path)), "--after-job", str(bad))["id"]
    with daemon.client() as c:
        c.release(ok)
        c.release(bad)
    wait_until(lambda: not the_schedule(daemon, on_ok)["enabled"], timeout=20)
    wait_until(lambda: not the_schedule(daemon, on_bad)["enabled"], timeout=20)
    done = the_schedule(daemon, on_ok)
    [job] = jobs_of(daemon, on_ok)
    assert done["runs"] == 1 and done["last_job"] == job["id"]
    assert done["disabled_reason"] == f"done: evaluated after job {ok} completed"
    assert schedule_notes(daemon, job["id"]) == [
        f"submitted by evaluation schedule {on_ok} (nightly): job {ok} completed"]
    failed = the_schedule(daemon, on_bad)
    assert failed["runs"] == 0 and jobs_of(daemon, on_bad) == []
    assert failed["disabled_reason"].startswith(f"job {bad} failed: nothing evaluated")
    r = daemon.cli("eval", "schedules")
    assert r.returncode == 0 and f"{on_bad}: off: job {bad} failed" in r.stdout, r.stdout


TRAINER = textwrap.dedent("""
    import os, time, zipfile
    def save(step):
        os.makedirs("checkpoints", exist_ok=True)
        with zipfile.ZipFile(f"checkpoints/step_{step:05d}.pt", "w") as z:  # torch.save's
            z.writestr("archive/data.pkl", str(step))
    save(1)
    while not os.path.exists("go"):
        time.sleep(0.05)
    save(2)
""")


def test_each_checkpoint_is_evaluated_once_as_the_model(daemon: DaemonProcess,
                                                        tmp_path: Path) -> None:
    work = tmp_path / "train"
    work.mkdir()
    trainer = daemon.submit("--gpus", "0", "--hold", "--cwd", str(work), "--checkpoint-dir",
                            "checkpoints", "--", sys.executable, "-c", TRAINER)
    sid = schedule(daemon, str(config_file(tmp_path)), "--on-checkpoint", str(trainer))["id"]
    with daemon.client() as c:
        c.release(trainer)
    one = str(work / "checkpoints" / "step_00001.pt")
    wait_until(lambda: the_schedule(daemon, sid)["evaluated"] == [one], timeout=20,
               what="the first checkpoint evaluated while the job runs")
    with daemon.client() as c:
        assert c.job(trainer)["state"] == "running"
    (work / "go").touch()
    wait_until(lambda: not the_schedule(daemon, sid)["enabled"], timeout=20)
    two = str(work / "checkpoints" / "step_00002.pt")
    done = the_schedule(daemon, sid)
    assert done["evaluated"] == [one, two] and done["runs"] == 2
    assert done["disabled_reason"].startswith(f"done: job {trainer} completed")
    runs = jobs_of(daemon, sid)
    assert [j["spec"]["env"]["ROTA_EVAL_MODEL"] for j in runs] == [one, two]
    for j, path in zip(runs, (one, two), strict=True):
        config = yaml.safe_load(j["spec"]["env"]["ROTA_EVAL_CONFIG"])
        assert config["model"] == {"uri": path}
        assert schedule_notes(daemon, j["id"])[0].endswith(
            f"checkpoint {path} (step {int(path[-8:-3])}) of job {trainer}")


def test_a_bad_config_or_trigger_is_refused_naming_what_is_wrong(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: x\nmodel: {uri: /m}\nharness: {kind: nope, tasks: [a]}\n"
                   "trackin: {}\n")
    r = daemon.cli("eval", "schedule", str(bad), "--every", "1d")
    assert r.returncode == 2
    assert f"{bad}:4: harness.kind:" in r.stderr and \
        f"{bad}:5: trackin: unknown key: did you mean tracking?" in r.stderr, r.stderr
    good = str(config_file(tmp_path))
    r = daemon.cli("eval", "schedule", good)
    assert r.returncode == 2 and "exactly one of every, after_job and on_checkpoint" in r.stderr
    r = daemon.cli("eval", "schedule", good, "--every", "1d", "--after-job", "1")
    assert r.returncode == 2 and "(not every and after_job)" in r.stderr
    r = daemon.cli("eval", "schedule", good, "--every", "soon")
    assert r.returncode == 2 and "every" in r.stderr
    from rota import Client

    with Client(daemon.socket) as c, pytest.raises(InvalidSpec, match=r"harness\.kind"):
        c.schedule_eval(bad.read_text(), every="1d")  # the daemon checks it too
    with daemon.client() as c:
        assert c.eval_schedules()["schedules"] == []


def test_checkpoint_and_after_job_schedules_hold_across_a_sigkill(tmp_path: Path) -> None:
    """Killed after the first checkpoint was evaluated and while the trainer still runs
    (the runner outlives the daemon): after the restart the second checkpoint is evaluated
    once, the first never again, and the --after-job schedule fires once for the trainer."""
    home, work = tmp_path / "home", tmp_path / "train"
    work.mkdir()
    d = _start(home)
    try:
        trainer = d.submit("--gpus", "0", "--hold", "--cwd", str(work), "--checkpoint-dir",
                           "checkpoints", "--", sys.executable, "-c", TRAINER)
        on_ckpt = schedule(d, str(config_file(tmp_path)), "--on-checkpoint",
                           str(trainer))["id"]
        after = schedule(d, str(config_file(tmp_path)), "--after-job", str(trainer))["id"]
        with d.client() as c:
            c.release(trainer)
        one = str(work / "checkpoints" / "step_00001.pt")
        wait_until(lambda: the_schedule(d, on_ckpt)["evaluated"] == [one], timeout=20,
                   what="the first checkpoint evaluated")
        d.kill()
        assert len(jobs_of_stored(home, on_ckpt)) == 1
        (work / "go").touch()  # the trainer saves its second checkpoint and ends meanwhile
        time.sleep(1)
        d.start()
        two = str(work / "checkpoints" / "step_00002.pt")
        wait_until(lambda: not the_schedule(d, on_ckpt)["enabled"], timeout=30,
                   what="the checkpoint schedule done after the restart")
        wait_until(lambda: not the_schedule(d, after)["enabled"], timeout=30,
                   what="the after-job schedule done after the restart")
        done = the_schedule(d, on_ckpt)
        assert done["evaluated"] == [one, two] and done["runs"] == 2
        models = [j["spec"]["env"]["ROTA_EVAL_MODEL"] for j in jobs_of(d, on_ckpt)]
        assert models == [one, two]
        fired = the_schedule(d, after)
        assert fired["runs"] == 1 and len(jobs_of(d, after)) == 1
        assert fired["disabled_reason"] == f"done: evaluated after job {trainer} completed"
    finally:
        d.stop()
        kill_job_processes(tmp_path)
