"""Fetching a model from S3 against a real S3 server (moto's, in a thread, on a free port):
``python -m rota.eval.run --fetch-only`` as the fetch job runs it, and the Kubernetes init
container's program (rota.backends.kubernetes.pod._S3_FETCH) as the pod runs it. Files
arrive byte-equal with their folders, nothing half-fetched is left, a key that climbs out
of the prefix is not written, and an empty prefix fails with a sentence.

boto3 finds the server through AWS_ENDPOINT_URL_S3, as it would a MinIO or Ceph one.
Skipped without boto3 and moto unless the run requires them (ROTA_REQUIRE_TORCH, set by
scripts/test.sh): there, their absence fails."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from eval_testing import config_text, run_eval

try:
    import boto3
    import moto.server  # noqa: F401 - s3_server's
except ImportError:
    if os.environ.get("ROTA_REQUIRE_TORCH"):
        raise
    pytest.skip("needs boto3 and moto[server] (pip install 'rota[test]')",
                allow_module_level=True)

from rota.backends.kubernetes.pod import _S3_FETCH
from rota_testing import s3_server

BUCKET = "models-bucket"
MODEL = {"config.json": b'{"model_type": "llama", "hidden_size": 16}\n',
         "model.safetensors": bytes(range(256)) * 300,  # ~75 KiB, every byte value
         "tokenizer/tokenizer.json": b'{"version": "1.0"}\n'}
OTHER = {"models/tiny/../evil": b"must not be written",  # climbs out of the prefix
         "models/tiny2/config.json": b"another model",  # shares the prefix's letters
         "models/tiny/": b""}  # a folder marker


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment a job gets: dummy credentials and the server's endpoint."""
    with s3_server(tmp_path_factory.mktemp("aws"), BUCKET) as env:
        s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL_S3"],
                          region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
        for rel, body in MODEL.items():
            s3.put_object(Bucket=BUCKET, Key=f"models/tiny/{rel}", Body=body)
        for key, body in OTHER.items():
            s3.put_object(Bucket=BUCKET, Key=key, Body=body)
        assert "models/tiny/../evil" in [o["Key"] for o in s3.list_objects_v2(
            Bucket=BUCKET, Prefix="models/tiny")["Contents"]]  # the server kept the key as is
        yield env


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, hidden ones included, by relative path."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in folder.rglob("*") if p.is_file()}


def fetch_only(work: Path, uri: str, aws: dict[str, str]):  # type: ignore[no-untyped-def]
    work.mkdir(parents=True, exist_ok=True)
    return run_eval(work, "--fetch-only", timeout=120, env={
        **aws, "ROTA_EVAL_CONFIG": config_text(model={"uri": uri}),
        "ROTA_MODEL_DIR": str(work / "model")})


def test_the_fetch_job_brings_the_model_byte_equal_and_nothing_else(
        aws: dict[str, str], tmp_path: Path) -> None:
    work = tmp_path / "work"
    ran = fetch_only(work, f"s3://{BUCKET}/models/tiny", aws)
    assert ran.code == 0, ran.stdout + ran.stderr
    assert f"rota-eval: model ready: {work / 'model'}" in ran.stdout
    assert f"skipped s3://{BUCKET}/models/tiny/../evil: outside" in ran.stdout
    assert files(work) == {f"model/{k}": v for k, v in MODEL.items()}  # no .part, no evil
    assert not (tmp_path / "evil").exists() and not (work / "evil").exists()
    again = fetch_only(work, f"s3://{BUCKET}/models/tiny/", aws)  # filled: not fetched again
    assert again.code == 0 and "fetching" not in again.stdout, again.stdout + again.stderr
    assert files(work) == {f"model/{k}": v for k, v in MODEL.items()}


def test_an_adapter_on_a_local_base_is_fetched_from_s3_by_the_fetch_job(
        aws: dict[str, str], tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    work = tmp_path / "work"
    work.mkdir()
    text = config_text(model={"uri": str(base), "adapter": {"uri": f"s3://{BUCKET}/models/tiny"}})
    ran = run_eval(work, "--fetch-only", timeout=120, env={
        **aws, "ROTA_EVAL_CONFIG": text, "ROTA_ADAPTER_DIR": str(work / "adapter")})
    assert ran.code == 0, ran.stdout + ran.stderr
    assert f"rota-eval: model ready: {base} (adapter {work / 'adapter'})" in ran.stdout
    assert files(work) == {f"adapter/{k}": v for k, v in MODEL.items()}


@pytest.mark.parametrize(("uri", "why"), [
    (f"s3://{BUCKET}/models/none", f"no model at s3://{BUCKET}/models/none: no objects "
                                   "under that prefix"),
    ("s3://no-such-bucket/models/tiny", "cannot fetch s3://no-such-bucket/models/tiny: "
                                        "NoSuchBucket: "),
])
def test_an_empty_prefix_or_a_missing_bucket_fails_with_a_sentence(
        aws: dict[str, str], tmp_path: Path, uri: str, why: str) -> None:
    ran = fetch_only(tmp_path, uri, aws)
    assert ran.code == 1
    assert ran.failure.startswith(f"rota-eval: FAILED: {why}"), ran.failure
    assert files(tmp_path) == {}  # no model folder taken for a model, no partial download


def test_the_pods_init_container_program_fetches_the_same_way(
        aws: dict[str, str], tmp_path: Path) -> None:
    """The program as the init container runs it (``python3 -c PROGRAM URI DST``), DST an
    empty volume; an empty prefix fails the init container (and so the pod) with a
    sentence."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **aws}

    def pod(uri: str, dst: Path) -> subprocess.CompletedProcess[str]:
        dst.mkdir(parents=True)
        return subprocess.run([sys.executable, "-c", _S3_FETCH, uri, str(dst)], env=env,
                              capture_output=True, text=True, timeout=120, check=False)

    dst = tmp_path / "volume" / "model"
    r = pod(f"s3://{BUCKET}/models/tiny/", dst)
    assert r.returncode == 0, r.stderr
    assert f"skipped s3://{BUCKET}/models/tiny/../evil: outside" in r.stdout
    assert f"fetched 3 file(s) from s3://{BUCKET}/models/tiny/ into {dst}" in r.stdout
    assert files(tmp_path) == {f"volume/model/{k}": v for k, v in MODEL.items()}
    empty = pod(f"s3://{BUCKET}/models/none", tmp_path / "empty")
    assert empty.returncode == 1
    assert empty.stderr.strip().splitlines()[-1] == \
        f"no model at s3://{BUCKET}/models/none: no objects under that prefix"
    assert files(tmp_path / "empty") == {}
