"""The workspace a cluster job brings itself (``ROTA_WORKSPACE_SYNC``): through
``python -m rota.storage.job_fetch -- CMD...`` as a job runs it, against a real
S3-protocol server (moto's, rota_testing.s3_server; skipped without boto3 and moto unless
the run requires them). Its copy is brought before the command, and what the command
changed is sent back after it: when it fails, when the engine stops it (the signal passed
on to it), and not when the bucket cannot be reached (the command does not run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rota.storage import job_fetch as jf
from rota.storage import job_workspace as jw
from rota_testing import moto_s3, s3_client

BUCKET = "rota-job-workspace"
SRC = Path(__file__).resolve().parents[2] / "src"
# reads seed.txt, writes out/new.txt, removes gone.txt, then exits with argv[1]
EDIT = ("import os, sys; w = os.environ['ROTA_WORKSPACE']; "
        "print('seed:', open(os.path.join(w, 'seed.txt')).read()); "
        "os.makedirs(os.path.join(w, 'out'), exist_ok=True); "
        "open(os.path.join(w, 'out', 'new.txt'), 'w').write('written by the job'); "
        "os.remove(os.path.join(w, 'gone.txt')); "
        "print('sync setting seen:', 'ROTA_WORKSPACE_SYNC' in os.environ); "
        "sys.exit(int(sys.argv[1]))")
# says it is ready, then on SIGTERM writes stopped.txt and exits 0 (a checkpoint on stop)
STOPPABLE = ("import os, signal, sys, time; w = os.environ['ROTA_WORKSPACE']\n"
             "def stop(*_):\n"
             "    open(os.path.join(w, 'stopped.txt'), 'w').write('checkpoint')\n"
             "    sys.exit(0)\n"
             "signal.signal(signal.SIGTERM, stop)\n"
             "print('ready', flush=True)\n"
             "time.sleep(120)\n")


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    yield from moto_s3(tmp_path_factory, BUCKET)


@pytest.fixture
def s3(aws: dict[str, str]) -> Any:
    return s3_client(aws)


def sync_env(aws: dict[str, str], prefix: str, node: Path,
             endpoint: str | None = None) -> dict[str, str]:
    plan = jw.WorkspacePlan(f"s3://{BUCKET}/{prefix}/alice/proj", "alice/proj",
                            endpoint_url=endpoint or aws["AWS_ENDPOINT_URL_S3"],
                            region="us-east-1")
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("ROTA_", "XDG_CACHE", "AWS_"))}
    return {**base, **{k: v for k, v in aws.items() if k != "AWS_ENDPOINT_URL_S3"},
            "PYTHONPATH": str(SRC), **plan.env(), jw.CACHE_ENV: str(node)}


def wrapped(*command: str) -> list[str]:
    return [sys.executable, "-m", "rota.storage.job_fetch", "--", *command]


def keys(s3: Any, prefix: str) -> dict[str, bytes]:
    got = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/alice/proj/")
    return {o["Key"].rpartition("/alice/proj/")[2]:
            s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
            for o in got.get("Contents", [])}


def seed(s3: Any, prefix: str) -> None:
    for name, body in (("seed.txt", b"from the bucket"), ("gone.txt", b"to be removed")):
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/alice/proj/{name}", Body=body)


def test_the_plan_says_which_workspace_and_names_what_is_wrong(tmp_path: Path) -> None:
    plan = jw.WorkspacePlan("s3://b/p/alice/proj", "alice/proj", region="eu-west-1")
    assert jw.read_plan(plan.env()[jw.SYNC_ENV]) == plan
    for text, why in (
            ("{x", "ROTA_WORKSPACE_SYNC is not JSON: "),
            ("[]", "ROTA_WORKSPACE_SYNC is not a JSON object"),
            ('{"url": "/p", "name": "a/b"}', "'url' '/p' is not an s3:// URL"),
            ('{"url": "s3:///p", "name": "a/b"}', "s3:///p: no bucket in the address"),
            ('{"url": "s3://b/p", "name": "../etc"}', "'name' '../etc' is not USER/PROJECT"),
            ('{"url": "s3://b/p", "name": "a/b", "region": 1}', "'region' is not text")):
        with pytest.raises(ValueError) as e:
            jw.read_plan(text)
        assert why in str(e.value), (text, str(e.value))
    assert jw.cache_root({jw.CACHE_ENV: str(tmp_path)}) == tmp_path
    assert jw.cache_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "rota" / "workspaces"


def test_a_bad_plan_exits_2_and_the_command_does_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    done = subprocess.run(wrapped("touch", str(marker)), capture_output=True, text=True,
                          env={"PATH": os.defpath, "PYTHONPATH": str(SRC),
                               jw.SYNC_ENV: '{"url": "s3://b/p", "name": "x"}'}, timeout=60)
    assert done.returncode == 2 and not marker.exists()
    assert done.stderr == ("rota: cannot bring the workspace: ROTA_WORKSPACE_SYNC: 'name' "
                           "'x' is not USER/PROJECT\n")


def test_the_job_brings_its_copy_and_sends_back_what_it_changed_even_when_it_fails(
        tmp_path: Path, aws: dict[str, str], s3: Any) -> None:
    prefix = uuid.uuid4().hex
    seed(s3, prefix)
    node = tmp_path / "node"
    done = subprocess.run(wrapped(sys.executable, "-c", EDIT, "5"), capture_output=True,
                          text=True, env=sync_env(aws, prefix, node), timeout=120)
    assert done.returncode == 5, done.stderr  # the command's own status
    assert done.stdout == "seed: from the bucket\nsync setting seen: False\n"
    copy = node / "alice" / "proj"
    assert done.stderr.splitlines() == [
        f"rota: workspace alice/proj at {copy} (2 downloaded)",
        "rota: workspace alice/proj sent back (1 uploaded, 1 removed there)"]
    assert keys(s3, prefix) == {"seed.txt": b"from the bucket",
                                "out/new.txt": b"written by the job"}
    assert sorted(os.listdir(copy)) == ["out", "seed.txt"]
    assert (node / ".sync" / "alice" / "proj.json").exists()  # what both sides held
    # the next job on the node: only what changed in the bucket comes, nothing goes
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/alice/proj/seed.txt", Body=b"changed")
    again = subprocess.run(wrapped("cat", "seed.txt"), capture_output=True, text=True,
                           cwd=copy, env=sync_env(aws, prefix, node), timeout=120)
    assert again.returncode == 0 and again.stdout == "changed", again.stderr
    assert again.stderr.splitlines() == [
        f"rota: workspace alice/proj at {copy} (1 downloaded)",
        "rota: workspace alice/proj sent back (nothing to do)"]


@pytest.mark.parametrize("handled", [True, False], ids=["checkpoints-on-stop", "killed"])
def test_a_stop_signal_reaches_the_command_and_what_it_wrote_is_sent_back(
        tmp_path: Path, aws: dict[str, str], s3: Any, handled: bool) -> None:
    prefix = uuid.uuid4().hex
    script = STOPPABLE if handled else (
        "import os, time; w = os.environ['ROTA_WORKSPACE']; "
        "open(os.path.join(w, 'partial.txt'), 'w').write('so far'); "
        "print('ready', flush=True); time.sleep(120)")
    proc = subprocess.Popen(wrapped(sys.executable, "-c", script), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=sync_env(aws, prefix, tmp_path / "node"))
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)  # to the wrapper alone, as a pod's PID 1 gets it
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - start < 30, err  # the command stopped: it did not sleep on
    if handled:
        assert proc.returncode == 0, err
        assert keys(s3, prefix) == {"stopped.txt": b"checkpoint"}
    else:
        assert proc.returncode == 128 + signal.SIGTERM, err  # as a shell tells it
        assert keys(s3, prefix) == {"partial.txt": b"so far"}
    assert "rota: workspace alice/proj sent back (1 uploaded)" in err, err


def test_an_unreachable_bucket_exits_75_before_the_command(
        tmp_path: Path, aws: dict[str, str]) -> None:
    marker = tmp_path / "ran"
    env = sync_env(aws, "p", tmp_path / "node", endpoint="http://127.0.0.1:9")
    env["AWS_MAX_ATTEMPTS"] = "1"
    done = subprocess.run(wrapped("touch", str(marker)), capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == jf.EX_TEMPFAIL, done.stderr
    assert not marker.exists()
    assert done.stderr.startswith("rota: cannot bring workspace alice/proj: "), done.stderr


def test_a_command_that_succeeded_but_whose_workspace_cannot_go_back_fails_saying_so(
        tmp_path: Path, aws: dict[str, str], s3: Any) -> None:
    """The bucket vanished while the job ran: the job does not end as a success, and the
    node's copy, which still holds its work, is named."""
    bucket = f"gone-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    plan = jw.WorkspacePlan(f"s3://{bucket}/ws/alice/proj", "alice/proj",
                            endpoint_url=aws["AWS_ENDPOINT_URL_S3"], region="us-east-1")
    env = {**sync_env(aws, "p", tmp_path / "node"), **plan.env()}
    endpoint = aws["AWS_ENDPOINT_URL_S3"]
    drop = (f"import boto3, os; s3 = boto3.client('s3', endpoint_url={endpoint!r}, "
            "region_name='us-east-1'); "
            "open(os.path.join(os.environ['ROTA_WORKSPACE'], 'result.txt'), 'w').write('r'); "
            f"s3.delete_bucket(Bucket={bucket!r})")
    done = subprocess.run(wrapped(sys.executable, "-c", drop), capture_output=True, text=True,
                          env=env, timeout=120)
    copy = tmp_path / "node" / "alice" / "proj"
    assert done.returncode == 2, done.stderr
    assert "rota: cannot send workspace alice/proj back: " in done.stderr, done.stderr
    assert f"its copy stays at {copy} on this node" in done.stderr
    assert (copy / "result.txt").read_text() == "r"


def test_a_node_copy_lives_under_the_cache_root_with_its_index_beside() -> None:
    plan = jw.read_plan(json.dumps({"url": "s3://b/team/bob/default", "name": "bob/default",
                                    "endpoint_url": None, "region": None}))
    copy = jw.NodeCopy(plan, Path("/node"))
    assert copy.folder == Path("/node/bob/default")
    assert copy.remote.url == "s3://b/team/bob/default"
    assert copy.index_path == Path("/node/.sync/bob/default.json")
