"""Experiment trackers and stored secrets on a real daemon: an MLflow run per job in a real
local MLflow store, W&B runs named through the environment (W&B offline mode), and
secrets that reach a job's environment and nothing else."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rota_testing import DaemonProcess, free_port, wait_until

mlflow = pytest.importorskip("mlflow", reason="needs mlflow (pip install 'rota[trackers]')")

# Prints its progress, saves a checkpoint, and logs one metric itself through the run Rota
# made (MLFLOW_RUN_ID in its environment); exits with the code it is given.
TRAIN = textwrap.dedent("""
    import os, sys, time
    for i in range(1, 4):
        print(f"step {i}/3 loss: {3.0 - i * 0.5}", flush=True)
        time.sleep(0.2)
    os.makedirs("ckpt", exist_ok=True)
    with open("ckpt/model-step3.pt", "wb") as f:
        f.write(b"weights")
    from mlflow import MlflowClient
    MlflowClient().log_metric(os.environ["MLFLOW_RUN_ID"], "from_job", 7.0)
    sys.exit(int(sys.argv[1]))
""")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), "-c", "user.email=t@e", "-c", "user.name=t",
                           *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git working tree with a committed file changed since (dirty)."""
    w = tmp_path / "work"
    w.mkdir()
    git(w, "init", "-q")
    (w / "train.py").write_text(TRAIN)
    git(w, "add", "train.py")
    git(w, "commit", "-qm", "first")
    git(w, "remote", "add", "origin", "https://someone:s3cr3t@example.com/lab/repo.git")
    (w / "train.py").write_text(TRAIN + "\n# edited\n")
    return w


def ended(d: DaemonProcess, job_id: int) -> dict[str, Any]:
    with d.client() as c:
        return c.wait(job_id, timeout=60)


def test_each_job_is_an_mlflow_run(daemon_factory: type[DaemonProcess], repo: Path,
                                   tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    d = daemon_factory(extra_env={"ROTA_MLFLOW_TRACKING_URI": uri}).start()
    ok = d.submit("--mlflow", "--name", "tiny", "--gpus", "0.5", "--checkpoint-dir", "ckpt",
                  "--env", "LR=3e-4", "--secret-env", "TOKEN=hunter2", "--tag", "sweep1",
                  "--", sys.executable, "train.py", "0", cwd=repo)
    bad = d.submit("--mlflow", "--mlflow-experiment", "other", "--gpus", "0", "--",
                   sys.executable, "train.py", "3", cwd=repo)
    plain = d.submit("--gpus", "0", "--", "true", cwd=repo)
    assert ended(d, ok)["state"] == "completed"
    assert ended(d, bad)["state"] == "failed"
    assert ended(d, plain)["state"] == "completed"

    client = mlflow.MlflowClient(tracking_uri=uri)
    with d.client() as c:
        job = c.job(ok)
        assert "tracking" not in c.job(plain)  # only the jobs that asked
    run_id = job["tracking"]["mlflow"]["run_id"]
    wait_until(lambda: client.get_run(run_id).info.status == "FINISHED", 30,
               what="the run to be finished")
    run = client.get_run(run_id)
    assert run.info.run_name == "tiny"
    assert job["tracking"]["mlflow"]["experiment"] == "rota"
    assert client.get_experiment(run.info.experiment_id).name == "rota"
    # the spec as params; a secret's value nowhere
    p = run.data.params
    assert p["command"] == f"{sys.executable} train.py 0"
    assert (p["gpus"], p["checkpoint_dir"], p["env.LR"], p["cwd"]) == ("0.5", "ckpt", "3e-4",
                                                                        str(repo))
    assert "env.TOKEN" not in p and "hunter2" not in json.dumps(run.data.to_dictionary())
    # who and which code: the commit, dirty, and the remote without its credentials
    t = run.data.tags
    assert t["rota.job_id"] == str(ok) and t["rota.user"] and t["mlflow.user"] == t["rota.user"]
    assert t["mlflow.source.git.commit"] == git(repo, "rev-parse", "HEAD")
    assert t["rota.git.dirty"] == "true"
    assert t["mlflow.source.git.repoURL"] == "https://example.com/lab/repo.git"
    assert t["rota.tag.sweep1"] == "true" and t["rota.state"] == "completed"
    # metrics mirrored as read from the log, next to the one the job logged itself
    assert [m.value for m in client.get_metric_history(run_id, "loss")] == [2.5, 2.0, 1.5]
    assert [m.step for m in client.get_metric_history(run_id, "loss")] == [1, 2, 3]
    assert run.data.metrics["from_job"] == 7.0
    # the log, the checkpoint list and the job's card as artifacts
    arts = {a.path for a in client.list_artifacts(run_id, "rota")}
    assert arts == {f"rota/{ok}.log", "rota/checkpoints.json", "rota/card.md",
                    "rota/card.html", "rota/loss.svg"}
    local = Path(client.download_artifacts(run_id, "rota", str(tmp_path / "dl")))
    assert "step 3/3 loss: 1.5" in (local / f"{ok}.log").read_text()
    listed = json.loads((local / "checkpoints.json").read_text())["checkpoints"]
    assert [(Path(c["path"]).name, c["step"], c["size"]) for c in listed] == \
        [("model-step3.pt", 3, len(b"weights"))]
    # the failed job: its own experiment, status FAILED
    with d.client() as c:
        bad_run = c.job(bad)["tracking"]["mlflow"]
    wait_until(lambda: client.get_run(bad_run["run_id"]).info.status == "FAILED", 30,
               what="the failed run's status")
    assert client.get_experiment(bad_run["experiment_id"]).name == "other"
    # `rota show` says where the run is
    shown = d.cli("show", str(ok)).stdout
    assert f"MLflow: run {run_id}" in shown and "experiment 'rota'" in shown


def test_a_finished_run_holds_the_jobs_card(daemon_factory: type[DaemonProcess], repo: Path,
                                           tmp_path: Path) -> None:
    """Its command, the dataset version it read and the commit its run was made with (the
    tags of submit, not the tree when it ended), beside its loss curve."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    d = daemon_factory(extra_env={"ROTA_MLFLOW_TRACKING_URI": uri}).start()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.txt").write_text("the quick brown fox\n" * 100)
    r = d.cli("dataset", "add", "corpus", str(corpus), "--json")
    assert r.returncode == 0, r.stderr
    version = json.loads(r.stdout)["version"]
    head = git(repo, "rev-parse", "HEAD")
    job_id = d.submit("--mlflow", "--name", "carded", "--gpus", "0", "--dataset", "corpus",
                      "--output", "ckpt", "--", sys.executable, "train.py", "0", cwd=repo)
    with d.client() as c:
        wait_until(lambda: "run_id" in c.job(job_id)["tracking"]["mlflow"], 30,
                   what="the run to be made")
        git(repo, "commit", "-qam", "after submit")  # the tree moves on while it runs
        assert ended(d, job_id)["state"] == "completed"
        run_id = c.job(job_id)["tracking"]["mlflow"]["run_id"]
    client = mlflow.MlflowClient(tracking_uri=uri)
    wait_until(lambda: client.get_run(run_id).info.status == "FINISHED", 30,
               what="the run to be finished")
    local = Path(client.download_artifacts(run_id, "rota", str(tmp_path / "dl")))
    card = (local / "card.md").read_text()
    assert card.startswith(f"# carded (job {job_id})")
    assert f"| Command | `{sys.executable} train.py 0` |" in card
    data = card[card.index("## Data"):card.index("## Saved outputs")]
    assert f"| {version['ref']} | 1 | 2.0K | `{version['digest'][:16]}` |" in data
    code = card[card.index("## Git"):card.index("## Data")]
    assert f"| Commit | `{head}` |" in code and "| Uncommitted changes | yes |" in code
    assert "| Remote | https://example.com/lab/repo.git |" in code and "s3cr3t" not in card
    assert "Recorded at submit" in code
    assert "| loss | 1.5 | 1.5 | 2.5 | 3 |" in card and "![loss by step](loss.svg)" in card
    assert (local / "loss.svg").read_text().startswith("<svg")
    assert f"<h1>carded (job {job_id})</h1>" in (local / "card.html").read_text()
    assert "its output folders (ckpt) are saved" in card  # (being saved as the run ends)
    # the card saved with its outputs tells the same, and lists them
    saved = tmp_path / "saved-card.md"
    wait_until(lambda: d.cli("artifacts", "get", str(job_id), "rota-card/card.md", "-o",
                             str(saved)).returncode == 0, 60, what="its outputs to be saved")
    with_outputs = saved.read_text()
    assert data in with_outputs and code in with_outputs
    assert "| ckpt/model-step3.pt | 7 |" in with_outputs


def test_a_job_is_not_held_back_when_mlflow_cannot_be_reached(
        daemon_factory: type[DaemonProcess], tmp_path: Path) -> None:
    d = daemon_factory(extra_env={
        "ROTA_MLFLOW_TRACKING_URI": f"http://127.0.0.1:{free_port()}",
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "3"}).start()
    job_id = d.submit("--mlflow", "--gpus", "0", "--", "true")
    assert ended(d, job_id)["state"] == "completed"
    with d.client() as c:
        job, events = c.job(job_id), c.events(job_id)
    assert "MLflow" in job["tracking"]["mlflow"]["error"]
    assert any(e["kind"] == "mlflow_error" and "runs without an MLflow run" in e["message"]
               for e in events)
    assert "MLflow: " in d.cli("show", str(job_id)).stdout


def test_a_job_waits_for_its_run_and_survives_a_daemon_restart(
        daemon_factory: type[DaemonProcess], tmp_path: Path) -> None:
    """A held job gets its run at submit; the run is kept across a SIGKILL of the daemon and
    used when the job is released (one run, not two)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    d = daemon_factory(extra_env={"ROTA_MLFLOW_TRACKING_URI": uri}).start()
    job_id = d.submit("--mlflow", "--hold", "--gpus", "0", "--", sys.executable, "-c",
                      "import os; print('run', os.environ['MLFLOW_RUN_ID'])")
    with d.client() as c:
        wait_until(lambda: "run_id" in c.job(job_id)["tracking"]["mlflow"], 30,
                   what="the run to be made")
        run_id = c.job(job_id)["tracking"]["mlflow"]["run_id"]
    d.kill()
    d.start()
    with d.client() as c:
        c.release(job_id)
    assert ended(d, job_id)["state"] == "completed"
    with d.client() as c:
        assert f"run {run_id}" in c.logs(job_id)["data"]
    client = mlflow.MlflowClient(tracking_uri=uri)
    wait_until(lambda: client.get_run(run_id).info.status == "FINISHED", 30,
               what="the run to be finished")
    assert len(client.search_runs([client.get_experiment_by_name("rota").experiment_id])) == 1


def test_refusals_name_what_is_missing(daemon: DaemonProcess) -> None:
    r = daemon.cli("submit", "--secret", "NOT_STORED", "--", "true")
    assert r.returncode != 0
    assert "no stored secret NOT_STORED" in r.stderr and "rota secret set NOT_STORED" in r.stderr
    r = daemon.cli("secret", "set", "bad-name", stdin="x\n")
    assert r.returncode != 0 and "bad-name" in r.stderr
    r = daemon.cli("secret", "set", "EMPTY", stdin="\n")
    assert r.returncode != 0 and "no value" in r.stderr


def wandb_records(path: Path) -> list[Any]:
    """The records of a run's ``.wandb`` transaction log (wandb 0.31 ships no reader of
    its own in Python): after a 7-byte header, LevelDB's log format, 32 KiB blocks of
    chunks (crc32, length, type: 1 full, 2 first, 3 middle, 4 last), each record a
    ``wandb_internal_pb2.Record``."""
    from wandb.proto.wandb_internal_pb2 import Record

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", data[:8]
    out, part, pos = [], b"", 7
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk: padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        part += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = Record()
            record.ParseFromString(part)
            out.append(record)
            part = b""
        elif kind == 0:  # zeros: the rest of the block is unused
            pos += block - pos % block if pos % block else 0
    return out


WANDB_JOB = textwrap.dedent("""
    import hashlib, os
    import wandb
    run = wandb.init()
    print("run", run.id, run.project, run.name, run.entity, flush=True)
    for step in range(3):
        wandb.log({"loss": 1.0 / (step + 1)}, step=step)
    print("key", hashlib.sha256(os.environ["WANDB_API_KEY"].encode()).hexdigest(), flush=True)
    print("hf", hashlib.sha256(os.environ["HF_TOKEN"].encode()).hexdigest(), flush=True)
    wandb.finish()
""")


def test_wandb_offline_run_named_by_rota_with_the_stored_key(daemon: DaemonProcess,
                                                              tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    key, hf = "k" * 40, "hf_" + "x" * 30
    assert daemon.cli("secret", "set", "WANDB_API_KEY", stdin=key + "\n").returncode == 0
    r = daemon.cli("secret", "set", "hf_token", stdin=hf + "\n")
    assert r.returncode == 0 and "stored" in r.stdout
    listed = json.loads(daemon.cli("secret", "list", "--json").stdout)
    assert [s["name"] for s in listed["secrets"]] == ["WANDB_API_KEY", "hf_token"]
    work = tmp_path / "w"
    work.mkdir()
    (work / "job.py").write_text(WANDB_JOB)
    job_id = daemon.submit("--wandb", "--wandb-project", "tiny-proj", "--wandb-entity", "lab",
                           "--name", "wb-run", "--secret", "HF_TOKEN=hf_token", "--gpus", "0",
                           "--env", "WANDB_MODE=offline", "--env", f"WANDB_DIR={work}", "--",
                           sys.executable, "job.py", cwd=work)
    assert ended(daemon, job_id)["state"] == "completed", daemon.cli("logs", str(job_id)).stdout
    with daemon.client() as c:
        job = c.job(job_id)
        log_text = c.logs(job_id)["data"]
        events = json.dumps(c.events(job_id))
    wb = job["tracking"]["wandb"]
    assert wb["run_id"].startswith("rota-") and wb["run_id"].endswith(f"-{job_id}")
    assert f"run {wb['run_id']} tiny-proj wb-run lab" in log_text
    # the job had both secrets; no answer, event or log carries either
    assert f"key {hashlib.sha256(key.encode()).hexdigest()}" in log_text
    assert f"hf {hashlib.sha256(hf.encode()).hexdigest()}" in log_text
    for text in (json.dumps(job), events, log_text, json.dumps(listed), daemon.log_text(),
                 daemon.cli("show", str(job_id)).stdout):
        assert key not in text and hf not in text
    # nor the database: the values are encrypted at rest
    db = (daemon.home / "rota.db").read_bytes() + (daemon.home / "rota.db-wal").read_bytes()
    assert key.encode() not in db and hf.encode() not in db
    # W&B wrote the run offline under the id Rota chose, and Rota found where
    rid = wb["run_id"]
    assert wb["url"] == f"https://wandb.ai/lab/tiny-proj/runs/{rid}"
    job_run = Path(wait_until(
        lambda: daemon.client().job(job_id)["tracking"]["wandb"].get("offline_dir"), 10,
        what="the offline dir to be read from the log"))
    assert job_run.parent == work / "wandb" and (job_run / f"run-{rid}.wandb").exists()
    # its card went to the same run: a second offline run folder beside the job's, which
    # the same `wandb sync` of that wandb folder uploads
    card = wait_until(lambda: daemon.client().job(job_id)["tracking"]["wandb"].get("card"),
                      60, what="the card to be added to the W&B run")
    assert card == "attached", card
    runs = sorted((work / "wandb").glob(f"offline-run-*-{rid}*"))
    assert len(runs) == 2 and job_run in runs
    card_run = next(r for r in runs if r != job_run)
    files = card_run / "files" / "rota"
    assert sorted(p.name for p in files.iterdir()) == ["card.html", "card.md", "loss.svg"]
    assert "wb-run" in (files / "card.md").read_text()
    assert "<svg" in (files / "loss.svg").read_text()
    records = wandb_records(card_run / f"run-{rid}.wandb")
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert (run.run_id, run.project, run.entity) == (rid, "tiny-proj", "lab")
    saved = {f.path for r in records if r.WhichOneof("record_type") == "files"
             for f in r.files.files}
    assert {"rota/card.md", "rota/card.html", "rota/loss.svg"} <= saved
    assert [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"] == [0]
    sync = subprocess.run([sys.executable, "-m", "wandb", "sync", "--dry-run",
                           str(work / "wandb")], capture_output=True, text=True, cwd=work)
    assert "Would sync 2 run(s)" in sync.stdout + sync.stderr, sync.stdout + sync.stderr
    shown = daemon.cli("show", str(job_id)).stdout
    assert wb["url"] in shown and "wandb sync" in shown and "card attached" in shown
    with daemon.client() as c:
        assert "card added to its W&B run" in json.dumps(c.events(job_id))
    # the key went to that process through its environment only: never to the log
    assert key not in (daemon.home / "daemon-test.log").read_text(errors="replace")
    # a deleted secret: a job that needs it fails to start and says which
    held = daemon.submit("--hold", "--secret", "HF_TOKEN=hf_token", "--gpus", "0", "--", "true")
    assert daemon.cli("secret", "rm", "hf_token").returncode == 0
    with daemon.client() as c:
        c.release(held)
        wait_until(lambda: c.job(held)["state"] == "failed", 20, what="the launch to fail")
        assert "no longer has the secret hf_token" in c.job(held)["end_reason"]
