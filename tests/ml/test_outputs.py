"""Reading a running job's output: metrics, progress, partial lines, rota.job's events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rota.ml.parse import LineParser
from rota.server.tracking.outputs import MAX_PER_TICK, OutputReader, Progress, events_path


def reader(tmp_path: Path, *, custom: list[str] | None = None, log_offset: int = 0,
           stored: dict[str, object] | None = None) -> OutputReader:
    progress = Progress.from_json(stored, 1)
    progress.log_offset = progress.log_offset or log_offset
    return OutputReader(job_id=7, log_path=tmp_path / "7.log",
                        events_path=events_path(tmp_path / "7-1.json"),
                        parser=LineParser(custom or []), progress=progress)


def write(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def test_lines_become_samples_with_their_step(tmp_path: Path) -> None:
    r = reader(tmp_path)
    write(r.log_path, b"=== rota: job 7 attempt 1 on GPUs 0\nstep 10/100: loss: 2.5\n"
                      b"lr=3e-4\nnot a metric line\n")
    r.read(1000.0)
    rows = r.drain()
    assert [(x["name"], x["value"], x["step"]) for x in rows] == \
        [("loss", 2.5, 10), ("lr", 3e-4, 10)]
    assert all(x["job_id"] == 7 and x["attempt"] == 1 and x["ts"] == 1000.0 for x in rows)
    p = r.progress
    assert (p.step, p.total_steps, p.fraction) == (10, 100, 0.1)
    assert r.drain() == []  # drained once


def test_a_json_only_job_gets_metrics_from_its_json_lines_alone(tmp_path: Path) -> None:
    """log_metrics: json (an evaluation): a harness's console (its settings, a table of
    unprefixed scores) is no metric; the runner's JSON line is."""
    r = reader(tmp_path)
    r.json_only = True
    write(r.log_path, b"hf (pretrained=m), gen_kwargs: (None), limit: 2.0, num_fewshot: None,"
                      b" batch_size: 8\n|tiny_mc|1|none|0|acc|0.75|\xc2\xb1 |0.25|\n"
                      b"{'acc': 0.75}\n"
                      b'{"tiny_mc/acc": 0.75, "tiny_mc/acc_stderr": 0.25}\n')
    r.read(1.0)
    assert {x["name"]: x["value"] for x in r.drain()} == {"tiny_mc/acc": 0.75,
                                                         "tiny_mc/acc_stderr": 0.25}


def test_a_half_written_line_waits_for_its_newline(tmp_path: Path) -> None:
    """Block-buffered output is cut anywhere: `loss: 1.` must not be stored as 1."""
    r = reader(tmp_path)
    write(r.log_path, b"loss: 1.")
    r.read(1.0)
    assert r.drain() == []
    write(r.log_path, b"234\n")
    r.read(2.0)
    assert [x["value"] for x in r.drain()] == [1.234]


def test_a_bar_redrawn_with_cr_is_read_as_it_stands_and_not_twice(tmp_path: Path) -> None:
    r = reader(tmp_path)
    bar = " {}%|####      | {}/1000 [00:30<00:37, 14.8it/s, loss=0.{}]"
    write(r.log_path, ("\r" + bar.format(45, 450, 5)).encode())
    r.read(1.0)
    assert (r.progress.step, r.progress.total_steps) == (450, 1000)
    assert [x["value"] for x in r.drain()] == [0.5]
    write(r.log_path, ("\r" + bar.format(46, 460, 4)).encode())
    r.read(2.0)
    assert r.progress.step == 460 and r.progress.rate == pytest.approx(14.8)
    assert [x["value"] for x in r.drain()] == [0.4]  # the 450 bar was not counted again
    write(r.log_path, b"\n")  # the bar finishes with a newline
    r.read(3.0)
    assert r.drain() == []


def test_the_final_read_takes_the_unfinished_last_line(tmp_path: Path) -> None:
    r = reader(tmp_path)
    write(r.log_path, b"loss: 0.75")
    r.read(1.0)
    assert r.drain() == []
    r.read(2.0, final=True)
    assert [x["value"] for x in r.drain()] == [0.75]


def test_a_flood_is_thinned_evenly_keeping_the_last(tmp_path: Path) -> None:
    r = reader(tmp_path)
    write(r.log_path, "".join(f"step {i}: loss={1000 - i}\n" for i in range(1000)).encode())
    r.read(1.0)
    rows = r.drain()
    assert len(rows) == MAX_PER_TICK
    assert rows[0]["step"] == 0 and rows[-1]["step"] == 999 and rows[-1]["value"] == 1.0
    steps = [x["step"] for x in rows]
    assert steps == sorted(steps)


def test_offsets_resume_after_a_restart_at_the_unfinished_line(tmp_path: Path) -> None:
    r = reader(tmp_path)
    write(r.log_path, b"loss: 1.0\nloss: 2")
    r.read(1.0)
    assert [x["value"] for x in r.drain()] == [1.0]
    stored = json.loads(json.dumps(r.progress.to_json()))
    assert stored["log_offset"] == len(b"loss: 1.0\n")  # at the start of the unfinished line
    again = reader(tmp_path, stored=stored)  # the daemon restarted
    write(r.log_path, b".5\n")
    again.read(2.0)
    assert [x["value"] for x in again.drain()] == [2.5]


def test_custom_patterns_are_applied(tmp_path: Path) -> None:
    r = reader(tmp_path, custom=[r"reward=(?P<reward>-?\d+(?:\.\d+)?)"])
    write(r.log_path, b"episode 3 reward=-12.5 done\n")
    r.read(1.0)
    assert {x["name"]: x["value"] for x in r.drain()}["reward"] == -12.5


def test_rate_and_eta_are_measured_when_the_output_does_not_say(tmp_path: Path) -> None:
    r = reader(tmp_path)
    write(r.log_path, b"step 100/1100\n")
    r.read(1000.0)
    write(r.log_path, b"step 300/1100\n")
    r.read(1010.0)
    assert r.progress.rate == pytest.approx(20.0)
    assert r.progress.eta_s == pytest.approx(40.0)


def test_rota_job_events_are_read_whole_lines_only(tmp_path: Path) -> None:
    r = reader(tmp_path)
    ev = r.events_path
    write(ev, json.dumps({"kind": "metrics", "step": 5, "total_steps": 50,
                          "metrics": {"loss": 0.5, "bad": "x", "flag": True}}).encode() + b"\n")
    write(ev, b'{"kind": "checkpoint", "path": "/ck/5.pt", "st')  # being written
    r.read(1.0)
    assert [(x["name"], x["value"], x["step"]) for x in r.drain()] == [("loss", 0.5, 5)]
    assert r.progress.checkpoint is None and r.progress.fraction == 0.1
    write(ev, b'ep": 5}\nnot json\n')
    r.read(2.0)
    assert r.progress.checkpoint == {"path": "/ck/5.pt", "step": 5, "ts": 2.0}


def test_a_new_attempt_keeps_the_reported_checkpoint_only() -> None:
    old = Progress(attempt=1, step=40, total_steps=100,
                   checkpoint={"path": "/c/40.pt", "step": 40, "ts": 1.0}, log_offset=99)
    new = Progress.from_json(old.to_json(), 2)
    assert (new.attempt, new.step, new.log_offset) == (2, None, 0)
    assert new.checkpoint == old.checkpoint


def test_rota_job_helper_writes_what_the_reader_reads(tmp_path: Path) -> None:
    """The in-job helper, run in a real child process as a job would."""
    r = reader(tmp_path)
    code = ("from rota import job\n"
            "assert job.report(step=3, total_steps=10, loss=0.25, acc=float('nan'))\n"
            "assert job.checkpoint_saved('ck/3.pt', step=3)\n"
            "assert not job.should_stop()\n"
            "print(job.resume_from(), job.grace_seconds())\n")
    env = {**os.environ, "ROTA_EVENTS_FILE": str(r.events_path), "ROTA_RESUME_FROM": "/x.pt",
           "ROTA_GRACE_SECONDS": "12"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["/x.pt", "12.0"]
    r.read(5.0)
    assert [(x["name"], x["value"], x["step"]) for x in r.drain()] == [("loss", 0.25, 3)]
    assert r.progress.checkpoint is not None
    assert r.progress.checkpoint["path"] == str(tmp_path / "ck" / "3.pt")


def test_rota_job_outside_rota_does_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROTA_")}
    code = ("from rota import job\n"
            "print(job.report(step=1, loss=1.0), job.checkpoint_saved('x'), job.resume_from())")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "None"]


def test_should_stop_turns_true_on_the_stop_signal_and_the_job_exits_cleanly(
        tmp_path: Path) -> None:
    code = ("import os, signal, time\n"
            "from rota import job\n"
            "assert not job.should_stop()\n"
            "os.kill(os.getpid(), signal.SIGTERM)\n"
            "deadline = time.time() + 60\n"  # a loaded machine is slow
            "while not job.should_stop() and time.time() < deadline:\n"
            "    time.sleep(0.01)\n"
            "print('saved and stopping', job.should_stop())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30, env={**os.environ, "ROTA_STOP_SIGNAL": "SIGTERM"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "saved and stopping True"
    flag = tmp_path / "stop"
    code = ("from rota import job\n"
            "a = job.should_stop()\n"
            f"open({str(flag)!r}, 'w').close()\n"
            "print(a, job.should_stop())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30, env={**os.environ, "ROTA_STOP_FILE": str(flag)})
    assert out.stdout.split() == ["False", "True"]


def test_the_training_loss_it_printed_last_is_its_progress(tmp_path: Path) -> None:
    r = reader(tmp_path)
    write(r.log_path, b"step 10/100: loss=2.5 val_loss=3.0\nstep 11/100: train/loss=2.25\n")
    r.read(1000.0)
    assert r.progress.loss == 2.25 and r.progress.step == 11
    write(r.log_path, b"step 12/100: val_loss=2.0 acc=0.5\n")  # no training loss: it stays
    r.read(1001.0)
    assert r.progress.loss == 2.25
    assert Progress.from_json(r.progress.to_json(), 1).loss == 2.25
