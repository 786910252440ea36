"""A pipeline of three rounds, end to end, under a real daemon: a tiny Llama built here,
data read from and chunks uploaded to S3 (moto's server), local LoRA training, the merge,
the held-out evaluation; round 2 trains on a chunk of wrong answers and is rejected, so
round 3 trains from round 1's model. The daemon is SIGKILLed between rounds and inside one:
the schedule holds, and no step's job is submitted twice.

Which examples land in which chunk is found first, black-box, by running the prep step on
numbered rows (the shuffle depends on the seed and the count only); the real data then puts
wrong answers exactly in round 2's chunk, never in the held-out tail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from s3_testing import s3_client

from hf_testing import OFFLINE, build_tiny_llama
from rota_testing import DaemonProcess, kill_job_processes, wait_until

try:
    import boto3  # noqa: F401  (needed: skipped or failed without it)
    import peft  # noqa: F401
    import torch  # noqa: F401
    from moto.server import ThreadedMotoServer  # noqa: F401
except ImportError:
    if os.environ.get("ROTA_REQUIRE_TORCH"):
        raise
    pytest.skip("needs torch, peft, boto3 and moto (pip install 'rota[test,ml]')",
                allow_module_level=True)

N, SEED, TEST_SIZE, PER_ROUND = 120, 42, 0.2, 32  # 96 to train: 3 chunks of 32, 24 held out
DATA_BUCKET, CHUNK_BUCKET = "data-bucket", "chunk-bucket"
KEYS = {"S3_COMPATIBLE_ACCESS_KEY": "testing", "S3_COMPATIBLE_SECRET_KEY": "testing"}
ENDED = ("accepted", "rejected", "failed")


@pytest.fixture
def s3(s3_url: str) -> str:
    for bucket in (DATA_BUCKET, CHUNK_BUCKET):
        s3_client(s3_url).create_bucket(Bucket=bucket)
    return s3_url


def _aws_env(tmp: Path) -> dict[str, str]:
    none = str(tmp / "no-aws-config")
    return {"AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none,
            "AWS_EC2_METADATA_DISABLED": "true", "AWS_DEFAULT_REGION": "us-east-1"}


def good(i: int) -> dict[str, str]:
    a, b = 2 + i % 9, 3 + (i * 7) % 11
    return {"instruction": f"Add {a} and {b}.", "input": "", "output": f"{a} + {b} = {a + b}."}


def wrong(i: int) -> dict[str, str]:
    a, b = 2 + i % 9, 3 + (i * 7) % 11
    junk = "".join("qzxjvkw"[(i * k) % 7] for k in range(1, 14))
    return {"instruction": f"Add {a} and {b}.", "input": "", "output": f"{junk} {junk}."}


def chunks_of_rows(tmp: Path) -> dict[int, int]:
    """Row -> the round (1-3) whose chunk holds it, or 0 for the held-out tail: the prep
    step run on rows numbered in their instruction."""
    rows = tmp / "numbered.jsonl"
    rows.write_text("".join(json.dumps({"instruction": f"row-{i}", "output": "x"}) + "\n"
                            for i in range(N)))
    cfg = {"version": 1, "name": "numbered", "model_repo": "m",
           "datasets": [{"name": str(rows), "field_instruction": "instruction",
                         "field_output": "output"}],
           "samples_per_training": PER_ROUND, "final_test_size": TEST_SIZE,
           "random_seed": SEED}
    from rota.pipeline.config import PipelineConfig

    env = {**os.environ, "ROTA_PIPELINE_CONFIG": PipelineConfig.model_validate(cfg)
           .model_dump_json()}
    where: dict[int, int] = {}
    for n in (1, 2, 3):
        out = tmp / f"numbered-{n}"
        out.mkdir()
        subprocess.run([sys.executable, "-m", "rota.pipeline.prep", "--round", str(n),
                        "--out", str(out), "--cache", str(tmp / "numbered-cache")],
                       env=env, check=True, capture_output=True, timeout=300)
        prep = json.loads((out / "prep.json").read_text())
        for line in Path(prep["files"]["train"]).read_text().splitlines():
            where[int(json.loads(line)["instruction"].removeprefix("row-"))] = n
    heldout = json.loads((tmp / "numbered-1/prep.json").read_text())["heldout"]
    for line in Path(heldout).read_text().splitlines():
        where[int(json.loads(line)["instruction"].removeprefix("row-"))] = 0
    assert sorted(where) == list(range(N))
    return where


CONFIG = textwrap.dedent("""\
    version: 1
    name: tiny
    model_repo: {tiny}
    datasets:
      - {{name: "s3://{data}/qa/", field_instruction: instruction, field_input: input,
         field_output: output}}
    samples_per_training: {per_round}
    final_test_size: {test_size}
    random_seed: {seed}
    run_intervals: {{}}          # all 0: the next round as soon as one ends
    upload: {{bucket: {chunks}, endpoint_url: "{s3}", expires: 1h}}
    train: {{where: local, gpus: 0, device: cpu, steps: 16, batch_size: 4, lr: 0.03,
            lora_r: 4, lora_alpha: 8, max_len: 96, save_every: 100, retries: 0}}
    merge: {{gpus: 0, publish: "./published/{{name}}-{{round}}"}}
    evaluate: {{gpus: 0, margin: 0.05, limits: {{batch_size: 8, max_length: 96}}}}
    tracking: {{mlflow: true, experiment: tiny-pipeline}}
    """)


def show(d: DaemonProcess) -> dict[str, Any]:
    with d.client() as c:
        return dict(c.pipeline("tiny"))


def the_round(d: DaemonProcess, n: int) -> dict[str, Any] | None:
    return next((r for r in show(d)["rounds"] if r["number"] == n), None)


def ended(d: DaemonProcess, n: int, timeout: float) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        r = the_round(d, n)
        return r if r is not None and r["state"] in ENDED else None
    got: dict[str, Any] = wait_until(done, timeout=timeout, every=0.5,
                                     what=f"round {n} ended")
    return got


def recorded(d: DaemonProcess, n: int) -> None:
    """Round ``n``'s record for the trackers has run."""
    wait_until(lambda: (the_round(d, n) or {}).get("job_states", {}).get("record")
               == "completed", timeout=300, every=0.5, what=f"round {n} recorded")


# alone, after the workers: under their load (3 on 2 cores) its daemon, killed just after
# round 1, was twice found not to run round 2's training within 5 minutes (rounds 2-8 made
# their chunks meanwhile); alone it passes in about 2 minutes. To be understood: issue 39.
@pytest.mark.serial
@pytest.mark.timeout(900)
def test_three_rounds_train_merge_evaluate_and_one_is_rejected(s3: str, tmp_path: Path
                                                               ) -> None:
    where = chunks_of_rows(tmp_path)
    rows = [wrong(i) if where[i] == 2 else good(i) for i in range(N)]
    s3_client(s3).put_object(Bucket=DATA_BUCKET, Key="qa/train.jsonl",
                           Body="".join(json.dumps(r) + "\n" for r in rows).encode())
    tiny = build_tiny_llama(tmp_path / "tiny")
    project = tmp_path / "project"
    project.mkdir()
    (project / "p.yaml").write_text(CONFIG.format(
        tiny=tiny, data=DATA_BUCKET, chunks=CHUNK_BUCKET, s3=s3, per_round=PER_ROUND,
        test_size=TEST_SIZE, seed=SEED))
    d = DaemonProcess(tmp_path / "home", simulate="2x24G",
                      extra_env={**OFFLINE, **_aws_env(tmp_path)}).start()
    try:
        for name, value in KEYS.items():
            r = d.cli("secret", "set", name, stdin=value)
            assert r.returncode == 0, r.stderr
        r = d.cli("pipeline", "add", str(project / "p.yaml"))
        assert r.returncode == 0, r.stderr

        first = ended(d, 1, timeout=600)
        # between rounds: round 1 decided and recorded (MLflow's SQLite store is made by
        # then: MLflow cannot take a kill while it first makes it), round 2 just begun
        recorded(d, 1)
        d.kill()
        d.start()
        # inside a round: round 2's training runs when the daemon dies
        wait_until(lambda: (the_round(d, 2) or {}).get("job_states", {}).get("train")
                   == "running", timeout=300, every=0.2, what="round 2 training")
        d.kill()
        d.start()
        second, third = ended(d, 2, timeout=600), ended(d, 3, timeout=600)
        recorded(d, 3)
        p = show(d)["pipeline"]
        log = d.log_text()
        with d.client() as c:
            jobs = {n: c.request("GET", "/v1/jobs", params={"tag": f"round:tiny:{n}",
                                                            "limit": 500})["jobs"]
                    for n in (1, 2, 3)}
    finally:
        d.stop()
        kill_job_processes(tmp_path)

    assert (first["state"], second["state"], third["state"]) == (
        "accepted", "rejected", "accepted"), (first["reason"], second["reason"],
                                              third["reason"])
    # round 1: the base was measured on the held-out tail, the merge beat it
    assert first["base_metric"] is not None and first["metric"] < first["base_metric"]
    assert first["base_model"] == str(tiny)
    # round 2 trained from round 1's model on the wrong answers: worse, kept with both numbers
    assert second["base_model"] == first["merged_model"]
    assert second["metric"] > second["base_metric"] + 0.05
    assert f"{second['metric']:.6g} against the base's {second['base_metric']:.6g}" in \
        second["reason"]
    # ... and never became a base: round 3 trained from round 1's model again
    assert third["base_model"] == first["merged_model"]
    assert (p["base_model"], p["base_round"]) == (third["merged_model"], 3)
    assert p["base_metric"] == third["metric"]
    assert [r["chunk"] for r in (first, second, third)] == [0, 1, 2]
    assert {r["chunks"] for r in (first, second, third)} == {3}
    assert first["facts"]["heldout_rows"] == N - int(N * (1 - TEST_SIZE))
    # nothing twice: one job per step of each round, across both SIGKILLs
    for r in (first, second, third):
        steps = set(r["jobs"])
        assert {"prep", "train", "merge", "evaluate"} <= steps, r["jobs"]
        assert len(set(r["jobs"].values())) == len(r["jobs"])
    for n in (1, 2, 3):
        names = [j["name"] for j in jobs[n]]
        assert len(names) == len(set(names)), names  # no step submitted twice
    # the chunks went to S3, one upload per round; the URLs never reached a log
    keys = [o["Key"] for o in s3_client(s3).list_objects_v2(Bucket=CHUNK_BUCKET)["Contents"]]
    uploaded = [k.split("/")[2] for k in keys]  # (round 4 may have begun since)
    assert [uploaded.count(f"round-{n}") for n in (1, 2, 3)] == [1, 1, 1], keys
    assert "X-Amz-Signature" not in log
    # each merged model was published where the file said, relative to it
    for n in (1, 2, 3):
        assert (project / "published" / f"tiny-{n}" / "config.json").is_file()
    # the lineage reached MLflow: a run per round with the verdict
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'home' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("tiny-pipeline")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    verdicts = sorted((r.data.params["round"], r.data.params["state"]) for r in runs
                      if "round" in r.data.params)
    assert verdicts == [("1", "accepted"), ("2", "rejected"), ("3", "accepted")]

