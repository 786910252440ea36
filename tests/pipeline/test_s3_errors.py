"""The pipeline's S3 calls judge a failure by the storage layer's rules (rota.storage.s3):
what may pass by waiting (a 5xx, throttling, a lost connection) is tried again; a refusal,
a missing bucket or missing credentials fails at once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

botocore_exceptions = pytest.importorskip("botocore.exceptions")

from rota.pipeline import data, merge  # noqa: E402


def client_error(code: str, status: int) -> Exception:
    return botocore_exceptions.ClientError(
        {"Error": {"Code": code, "Message": "said so"},
         "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")


@pytest.mark.parametrize(("error", "passing"), [
    (client_error("InternalError", 500), True),
    (client_error("SlowDown", 503), True),
    (botocore_exceptions.EndpointConnectionError(endpoint_url="http://s3.invalid"), True),
    (client_error("AccessDenied", 403), False),
    (client_error("NoSuchBucket", 404), False),
    (botocore_exceptions.NoCredentialsError(), False),
])
def test_s3_failures_are_judged_by_one_set_of_rules(error: Exception, passing: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    err = data.s3_error("upload of s3://b/k", error)
    assert isinstance(err, data.DataUnavailable if passing else data.DataError)
    assert str(err).startswith("upload of s3://b/k: ")

    waits: list[float] = []
    monkeypatch.setattr(merge.time, "sleep", waits.append)
    calls: list[int] = []

    def failing() -> Any:
        calls.append(1)
        raise error

    with pytest.raises(merge.PublishUnavailable if passing else merge.MergeFailed,
                       match="upload of s3://b/k: "):
        merge._retrying("upload of s3://b/k", failing)
    assert len(calls) == (len(merge.RETRY_WAITS_S) + 1 if passing else 1)
    assert waits == (list(merge.RETRY_WAITS_S) if passing else [])


def test_the_publish_retries_each_file_alone_and_puts_the_manifest_last(
        tmp_path: Path, s3_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """merge --publish s3://... through rota.storage.s3.upload_prefix: a passing error on
    one file retries that file only; the manifest goes up after every file."""
    pytest.importorskip("moto.server")
    from s3_testing import s3_client

    from rota.storage import s3_transfers as storage_s3

    none = str(tmp_path / "none")
    for name, value in {"AWS_ENDPOINT_URL_S3": s3_url, "AWS_ACCESS_KEY_ID": "t",
                        "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1",
                        "AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none,
                        "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setattr("boto3.DEFAULT_SESSION", None)  # the keys of this environment
    s3 = s3_client(s3_url)
    s3.create_bucket(Bucket="models")
    out = tmp_path / "merged"
    (out / "sub").mkdir(parents=True)
    (out / "config.json").write_bytes(b"{}")
    (out / "sub" / "model.safetensors").write_bytes(bytes(range(256)) * 10)
    (out / merge.MERGE_RECORD).write_bytes(b'{"base": "b"}')

    real, order = storage_s3.upload_file, []

    def flaky(local: Path, uri: str, **kw: Any) -> None:
        order.append(uri)
        if uri.endswith("model.safetensors") and order.count(uri) == 1:
            raise client_error("SlowDown", 503)
        real(local, uri, **kw)

    real_bytes = storage_s3.upload_bytes

    def manifest(body: bytes, uri: str, **kw: Any) -> None:
        order.append(uri)
        real_bytes(body, uri, **kw)

    monkeypatch.setattr(storage_s3, "upload_file", flaky)
    monkeypatch.setattr(storage_s3, "upload_bytes", manifest)
    waits: list[float] = []
    monkeypatch.setattr(merge.time, "sleep", waits.append)
    assert merge._to_s3(out, "s3://models/tiny/r1") == "s3://models/tiny/r1"
    base = "s3://models/tiny/r1/"
    assert [u.removeprefix(base) for u in order] == [
        "config.json", merge.MERGE_RECORD, "sub/model.safetensors", "sub/model.safetensors",
        merge.MANIFEST]
    assert waits == [merge.RETRY_WAITS_S[0]]
    listed = json.loads(s3.get_object(Bucket="models", Key=f"tiny/r1/{merge.MANIFEST}")
                        ["Body"].read())["files"]
    assert [f["name"] for f in listed] == ["config.json", merge.MERGE_RECORD,
                                           "sub/model.safetensors"]
    for f in listed:
        body = s3.get_object(Bucket="models", Key=f"tiny/r1/{f['name']}")["Body"].read()
        assert body == (out / f["name"]).read_bytes()


def test_a_reused_merge_published_to_s3_and_its_refusals(tmp_path: Path,
                                                         s3_url: str) -> None:
    """``python -m rota.pipeline.merge --publish s3://...`` as the job runs it, without
    torch: the merge is found already made (rota-merge.json), so only the publish runs.
    Every file arrives with the manifest; a missing bucket and missing credentials fail
    the step (exit 2) with a sentence naming them."""
    pytest.importorskip("moto.server")
    import os
    import subprocess
    import sys

    from s3_testing import s3_client

    adapter, out = tmp_path / "adapter", tmp_path / "merged"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "adapter_model.safetensors").write_bytes(b"lora")
    args = ["--base", "some/base", "--adapter", str(adapter), "--out", str(out)]
    (out / "tok").mkdir(parents=True)
    (out / "model.safetensors").write_bytes(bytes(range(256)) * 50)
    (out / "tok" / "tokenizer.json").write_bytes(b"{}")
    (out / merge.MERGE_RECORD).write_text(json.dumps(merge._identity(merge.parse_args(
        [*args, "--round-dir", "r"]))))
    s3 = s3_client(s3_url)
    s3.create_bucket(Bucket="models")
    none = str(tmp_path / "none")
    aws = {"AWS_ENDPOINT_URL_S3": s3_url, "AWS_ACCESS_KEY_ID": "t",
           "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none,
           "AWS_EC2_METADATA_DISABLED": "true"}
    ambient = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}

    def run(dest: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        rnd = tmp_path / f"round-{len(list(tmp_path.glob('round-*')))}"
        rnd.mkdir()
        return subprocess.run([sys.executable, "-m", "rota.pipeline.merge", *args,
                               "--round-dir", str(rnd), "--publish", dest],
                              env={**ambient, **env}, capture_output=True, text=True,
                              timeout=120, check=False)

    r = run("s3://models/tiny/round-1", aws)
    assert r.returncode == 0, r.stderr
    assert "already holds this merge; reused" in r.stdout
    assert "merge: published to s3://models/tiny/round-1 (3 files, manifest last)" in r.stdout
    listed = json.loads(s3.get_object(Bucket="models", Key="tiny/round-1/rota-manifest.json")
                        ["Body"].read())["files"]
    assert sorted(f["name"] for f in listed) == sorted(
        [merge.MERGE_RECORD, "model.safetensors", "tok/tokenizer.json"])
    for f in listed:
        body = s3.get_object(Bucket="models", Key=f"tiny/round-1/{f['name']}")["Body"].read()
        assert body == (out / f["name"]).read_bytes()
    assert json.loads((tmp_path / "round-0" / "merge.json").read_text())["published"] == \
        "s3://models/tiny/round-1"

    r = run("s3://no-such-bucket/tiny", aws)
    assert r.returncode == 2
    assert r.stderr.startswith("merge: upload of s3://no-such-bucket/tiny/"), r.stderr
    assert "NoSuchBucket" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "round-1" / "merge.json").exists()

    r = run("s3://models/tiny/round-2",
            {k: v for k, v in aws.items() if k not in ("AWS_ACCESS_KEY_ID",
                                                       "AWS_SECRET_ACCESS_KEY")})
    assert r.returncode == 2
    assert r.stderr.startswith("merge: upload of s3://models/tiny/round-2/"), r.stderr
    assert "no S3 credentials: set AWS_ACCESS_KEY_ID" in r.stderr
