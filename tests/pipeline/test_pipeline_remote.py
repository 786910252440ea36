"""A round trained remotely, under a real daemon: the chunk uploaded to S3 (moto's
server), the task created on a local fake of the Gradients API (tests/pipeline/
fake_gradients.py) with the user's stored key, followed across a daemon SIGKILL, its
winner (the best entry that has a repo) merged and evaluated; then a round whose task
fails is a failed round, backed off, and no second task is created for it; then a round
whose merge fails (retried) fails too, and its adapter never becomes a base."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from fake_gradients import KEY, FakeGradients, Script, entry
from s3_testing import s3_client

from hf_testing import OFFLINE, build_tiny_llama
from rota_testing import DaemonProcess, kill_job_processes, wait_until

try:
    import boto3  # noqa: F401  (needed: skipped or failed without it)
    import peft
    import torch
    from moto.server import ThreadedMotoServer  # noqa: F401
    from transformers import AutoModelForCausalLM
except ImportError:
    if os.environ.get("ROTA_REQUIRE_TORCH"):
        raise
    pytest.skip("needs torch, peft, boto3 and moto", allow_module_level=True)

CONFIG = textwrap.dedent("""\
    version: 1
    name: remote
    model_repo: {tiny}
    task_type: InstructText
    hours_to_complete: 2
    datasets:
      - {{name: {data}, field_instruction: q, field_output: a}}
    samples_per_training: 40
    final_test_size: 0.2
    upload: {{bucket: chunks, endpoint_url: "{s3}", expires: 2h}}
    train: {{where: gradients, api_url: "{api}", poll_interval: 0.2}}
    merge: {{gpus: 0, retries: 1}}
    evaluate: {{gpus: 0, margin: 1000, limits: {{max_length: 64}}}}
    tracking: {{mlflow: false}}
    on_failure: {{backoff: 2h}}
    """)


@pytest.fixture
def s3(s3_url: str) -> str:
    s3_client(s3_url).create_bucket(Bucket="chunks")
    return s3_url


def adapter_of(tiny: Path, where: Path) -> Path:
    """What a miner would publish: a LoRA adapter for the base (here a folder)."""
    lora = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(tiny), peft.LoraConfig(
        r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.fill_(0.01)
    lora.save_pretrained(where)
    return where


def rounds(d: DaemonProcess) -> dict[int, dict[str, Any]]:
    with d.client() as c:
        return {r["number"]: dict(r) for r in c.pipeline("remote")["rounds"]}


def test_a_remote_round_a_failed_task_and_a_failed_merge(s3: str, tmp_path: Path) -> None:
    tiny = build_tiny_llama(tmp_path / "tiny")
    adapter = adapter_of(tiny, tmp_path / "miner-adapter")
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(f'{{"q": "Add {i} and 2.", "a": "{i} + 2 = {i + 2}."}}\n'
                            for i in range(50)))
    script = Script(statuses=["pending", "training", "training", "training", "training",
                              "training", "evaluating", "success"],
                    auditing=[entry("best-no-repo", 0.2, None),
                              entry("miner", 0.4, str(adapter), rank=2)])
    none = str(tmp_path / "none")
    with FakeGradients(script) as api:
        (tmp_path / "p.yaml").write_text(CONFIG.format(tiny=tiny, data=data, s3=s3,
                                                       api=api.url))
        d = DaemonProcess(tmp_path / "home", simulate="2x24G", extra_env={
            **OFFLINE, "AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none,
            "AWS_EC2_METADATA_DISABLED": "true"}).start()
        try:
            for name, value in (("GRADIENTS_API_KEY", KEY), ("S3_COMPATIBLE_ACCESS_KEY", "k"),
                                ("S3_COMPATIBLE_SECRET_KEY", "s")):
                assert d.cli("secret", "set", name, stdin=value).returncode == 0
            r = d.cli("pipeline", "add", str(tmp_path / "p.yaml"))
            assert r.returncode == 0, r.stderr
            # the daemon dies while the task is followed; the job goes on, and after the
            # restart the round does too
            wait_until(lambda: sum(script.reads.values()) >= 2, timeout=120, every=0.1,
                       what="the task followed")
            d.kill()
            d.start()
            first = wait_until(lambda: rounds(d).get(1) if rounds(d).get(1, {}).get(
                "state") in ("accepted", "rejected", "failed") else None, timeout=300,
                every=0.5, what="round 1")
            assert first["state"] == "accepted", first["reason"]
            [(task, body)] = script.creates
            assert body["model_repo"] == str(tiny) and body["hours_to_complete"] == 2
            assert body["ds_repo"].startswith(f"{s3}/chunks/rota-pipelines/remote/round-1/")
            assert first["remote_task"] == task
            assert first["adapter"] == str(adapter)  # the best entry with a repo
            assert first["facts"]["winner"]["hotkey"] == "miner"
            assert first["facts"]["task_id"] == task
            # the next round's task fails: a failed round, backed off two hours
            script.statuses = ["pending", "node_training_failure"]
            with d.client() as c:
                c.pipeline_action("remote", "run-now")
            second = wait_until(lambda: rounds(d).get(2) if rounds(d).get(2, {}).get(
                "state") in ("accepted", "rejected", "failed") else None, timeout=300,
                every=0.5, what="round 2")
            assert second["state"] == "failed"
            assert second["reason"].startswith(f"train: job {second['jobs']['train']} "
                                               "failed"), second["reason"]
            with d.client() as c:
                p = c.pipeline("remote")["pipeline"]
            assert p["next_at"] - second["ended_at"] == pytest.approx(7200)
            assert p["base_model"] == first["merged_model"]  # a failed round changes nothing
            time.sleep(3)  # no new paid task: the failed one is not created again
            assert len(script.creates) == 2
            # a merge that fails (the winner's adapter is not there), retried: the round
            # fails, and the adapter never becomes the next base
            script.statuses = ["training", "success"]
            script.auditing = [entry("gone", 0.1, str(tmp_path / "no-such-adapter"))]
            with d.client() as c:
                c.pipeline_action("remote", "run-now")
            third = wait_until(lambda: rounds(d).get(3) if rounds(d).get(3, {}).get(
                "state") in ("accepted", "rejected", "failed") else None, timeout=300,
                every=0.5, what="round 3")
            assert third["state"] == "failed" and third["reason"].startswith(
                f"merge: job {third['jobs']['merge']} failed"), third["reason"]
            with d.client() as c:
                merge = c.job(third["jobs"]["merge"])
                p = c.pipeline("remote")["pipeline"]
            assert merge["attempts"] == 2  # its retry ran too
            assert "no-such-adapter: no such folder" in (
                d.home / "logs" / f"{third['jobs']['merge']}.log").read_text()
            assert p["base_model"] == first["merged_model"] and p["failures"] == 2
            assert p["next_at"] - third["ended_at"] == pytest.approx(2 * 7200)
            assert KEY not in d.log_text()
            for job in second["jobs"].values():
                assert KEY not in (d.home / "logs" / f"{job}.log").read_text()
        finally:
            d.stop()
            kill_job_processes(tmp_path)
    assert set(script.auth) == {f"Bearer {KEY}"}
