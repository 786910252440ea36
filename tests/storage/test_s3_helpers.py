"""rota.storage.s3's plain transfers (upload_file, upload_bytes, upload_prefix, presigned_get
beside download_prefix), the ones a pipeline's chunks and a merged model's publish go
through, against a real S3-protocol server (moto's, rota_testing.s3_server): a folder comes
back byte-equal with its nested folders, empty and hidden files; the objects named last
(a manifest) go up after every file and not at all when a file fails; a file over the
multipart threshold arrives whole; a missing bucket and missing credentials fail with a
sentence naming them.

Skipped without boto3 and moto unless the run requires them (ROTA_REQUIRE_TORCH, set by
scripts/test.sh): there, their absence fails."""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rota.errors import StorageError
from rota.storage import s3_transfers as storage_s3
from rota.storage.s3_transfers import (
    download_prefix,
    presigned_get,
    transfer_config,
    upload_bytes,
    upload_file,
    upload_prefix,
)

try:
    import boto3
    import moto.server  # noqa: F401 - s3_server's
except ImportError:
    if os.environ.get("ROTA_REQUIRE_TORCH"):
        raise
    pytest.skip("needs boto3 and moto[server] (pip install 'rota[test]')",
                allow_module_level=True)

BUCKET = "rota-s3-helpers"
FILES = {"config.json": b'{"model_type": "llama"}\n', "tokenizer/tokenizer.json": b"{}\n",
         "a/b/c/deep.bin": random.Random(5).randbytes(70_000), "a/empty": b"",
         ".hidden": b"dot", "every-byte.bin": bytes(range(256)) * 40}
#: the AWS variables that could hand boto3 credentials from this machine
AMBIENT = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ROLE_ARN",
           "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
           "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN")


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    from rota_testing import s3_server

    with s3_server(tmp_path_factory.mktemp("aws"), BUCKET) as env:
        yield env


@pytest.fixture
def env(aws: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The server's environment for every boto3 client made here (as a job's)."""
    for name, value in aws.items():
        monkeypatch.setenv(name, value)
    for name in AMBIENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # it keeps the keys it found first
    return aws


@pytest.fixture
def raw(env: dict[str, str]) -> Any:
    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL_S3"], region_name="us-east-1")


def prefix() -> str:
    return f"s3://{BUCKET}/t/{uuid.uuid4().hex[:12]}"


def folder_of(root: Path, files: dict[str, bytes]) -> Path:
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(body)
    return root


def contents(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in folder.rglob("*") if p.is_file()}


def test_a_folder_round_trips_byte_equal(env: dict[str, str], raw: Any,
                                         tmp_path: Path) -> None:
    src, uri = folder_of(tmp_path / "src", FILES), prefix()
    tried: list[str] = []

    def attempt(what: str, call: Callable[[], None]) -> None:
        tried.append(what)
        call()

    written = upload_prefix(src, uri, last={"MANIFEST.json": b'{"files": 6}'},
                            attempt=attempt)
    # every file in path order, then the objects named last
    assert written == [f"{uri}/{rel}" for rel in sorted(FILES)] + [f"{uri}/MANIFEST.json"]
    assert tried == [f"upload of {w}" for w in written]
    bucket, key = storage_s3.split_uri(uri)
    listed = {o["Key"]: o["Size"] for o in
              raw.list_objects_v2(Bucket=bucket, Prefix=f"{key}/")["Contents"]}
    assert listed == {f"{key}/{rel}": len(body) for rel, body in
                      {**FILES, "MANIFEST.json": b'{"files": 6}'}.items()}
    got = tmp_path / "got"
    assert download_prefix(uri, got) == len(FILES) + 1
    assert contents(got) == {**FILES, "MANIFEST.json": b'{"files": 6}'}


def test_a_bucket_root_and_a_trailing_slash_are_the_same_layout(env: dict[str, str],
                                                                raw: Any,
                                                                tmp_path: Path) -> None:
    src = folder_of(tmp_path / "src", {"x/y.txt": b"y", "z": b""})
    uri = prefix()
    assert upload_prefix(src, uri + "/") == [f"{uri}/x/y.txt", f"{uri}/z"]
    assert contents_of(uri, tmp_path / "a") == {"x/y.txt": b"y", "z": b""}
    bucket = f"root-{uuid.uuid4().hex[:8]}"
    raw.create_bucket(Bucket=bucket)
    assert upload_prefix(src, f"s3://{bucket}", last={"M": b"m"}) == \
        [f"s3://{bucket}/x/y.txt", f"s3://{bucket}/z", f"s3://{bucket}/M"]
    assert sorted(o["Key"] for o in raw.list_objects_v2(Bucket=bucket)["Contents"]) == \
        ["M", "x/y.txt", "z"]


def contents_of(uri: str, dst: Path) -> dict[str, bytes]:
    download_prefix(uri, dst)
    return contents(dst)


def test_a_file_named_last_is_not_uploaded_before_the_rest(env: dict[str, str], raw: Any,
                                                           tmp_path: Path) -> None:
    src = folder_of(tmp_path / "src", {"m.bin": b"weights", "rota-manifest.json": b"stale"})
    uri = prefix()
    written = upload_prefix(src, uri, last={"rota-manifest.json": b"fresh"})
    assert written == [f"{uri}/m.bin", f"{uri}/rota-manifest.json"]
    assert contents_of(uri, tmp_path / "got") == {"m.bin": b"weights",
                                                  "rota-manifest.json": b"fresh"}


def test_a_failed_file_leaves_no_manifest(env: dict[str, str], raw: Any,
                                          tmp_path: Path) -> None:
    src = folder_of(tmp_path / "src", {"a.bin": b"a", "b.bin": b"b", "c.bin": b"c"})
    uri = prefix()

    def attempt(what: str, call: Callable[[], None]) -> None:
        if what.endswith("/b.bin"):
            raise StorageError(f"{what}: InternalError: said so", passing=True)
        call()

    with pytest.raises(StorageError, match=r"/b\.bin: InternalError"):
        upload_prefix(src, uri, last={"MANIFEST.json": b"{}"}, attempt=attempt)
    bucket, key = storage_s3.split_uri(uri)
    keys = [o["Key"] for o in raw.list_objects_v2(Bucket=bucket, Prefix=key)["Contents"]]
    assert keys == [f"{key}/a.bin"]  # a reader waiting for the manifest never sees this


def test_a_file_over_the_multipart_threshold_arrives_whole(env: dict[str, str], raw: Any,
                                                           tmp_path: Path) -> None:
    from boto3.s3.transfer import TransferConfig

    big = random.Random(11).randbytes(11 * (1 << 20) + 7)  # three parts of 5 MiB
    src = folder_of(tmp_path / "src", {"model.safetensors": big, "small.json": b"{}"})
    uri = prefix()
    parts = TransferConfig(multipart_threshold=1 << 20, multipart_chunksize=5 << 20)
    upload_prefix(src, uri, config=parts)
    bucket, key = storage_s3.split_uri(uri)
    head = raw.head_object(Bucket=bucket, Key=f"{key}/model.safetensors")
    assert head["ETag"].strip('"').endswith("-3")  # a multipart upload's ETag
    assert head["ContentLength"] == len(big)
    assert raw.head_object(Bucket=bucket, Key=f"{key}/small.json")["ETag"].count("-") == 0
    assert contents_of(uri, tmp_path / "got") == {"model.safetensors": big,
                                                  "small.json": b"{}"}
    # the helpers' own default threshold (1 MiB) makes a 2 MiB file multipart too
    one = tmp_path / "two-mib.bin"
    one.write_bytes(big[:2 << 20])
    upload_file(one, f"{uri}/single/two-mib.bin")
    assert raw.head_object(Bucket=bucket, Key=f"{key}/single/two-mib.bin")["ETag"] \
        .strip('"').endswith("-1")
    assert transfer_config().multipart_threshold == storage_s3.MULTIPART_THRESHOLD


def test_bytes_with_a_content_type_and_their_presigned_url(env: dict[str, str], raw: Any
                                                           ) -> None:
    uri = prefix() + "/chunk_dataset.json"
    upload_bytes(b'[{"x": 1}]', uri, content_type="application/json")
    bucket, key = storage_s3.split_uri(uri)
    assert raw.head_object(Bucket=bucket, Key=key)["ContentType"] == "application/json"
    url = presigned_get(uri, 3600)
    assert "X-Amz-Expires=3600" in url or "Expires=" in url
    answer = httpx.get(url)
    assert answer.status_code == 200 and answer.json() == [{"x": 1}]


@pytest.mark.parametrize("call", ["upload_file", "upload_bytes", "upload_prefix",
                                  "download_prefix"])
def test_a_missing_bucket_is_named(env: dict[str, str], tmp_path: Path, call: str) -> None:
    src = folder_of(tmp_path / "src", {"f.txt": b"f"})
    uri = "s3://no-such-bucket-here/some/prefix"
    with pytest.raises(StorageError) as got:
        {"upload_file": lambda: upload_file(src / "f.txt", uri + "/f.txt"),
         "upload_bytes": lambda: upload_bytes(b"f", uri + "/f.txt"),
         "upload_prefix": lambda: upload_prefix(src, uri),
         "download_prefix": lambda: download_prefix(uri, tmp_path / "dst")}[call]()
    message = str(got.value)
    assert "s3://no-such-bucket-here/some/prefix" in message and "NoSuchBucket" in message
    assert not got.value.passing  # waiting will not make it


@pytest.mark.parametrize("call", ["upload_file", "upload_prefix", "presigned_get",
                                  "download_prefix"])
def test_missing_credentials_are_named(env: dict[str, str], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch, call: str) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    src = folder_of(tmp_path / "src", {"f.txt": b"f"})
    uri = prefix()
    with pytest.raises(StorageError) as got:
        {"upload_file": lambda: upload_file(src / "f.txt", uri + "/f.txt"),
         "upload_prefix": lambda: upload_prefix(src, uri),
         "presigned_get": lambda: presigned_get(uri + "/f.txt", 60),
         "download_prefix": lambda: download_prefix(uri, tmp_path / "dst")}[call]()
    message = str(got.value)
    assert uri in message
    assert "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in message
    assert not got.value.passing


def test_a_client_given_is_used_and_addresses_are_checked(
        env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the pipeline's client: its own endpoint and keys, not the environment's (nothing
    # listens on the environment's endpoint now)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    client = storage_s3.make_client(endpoint_url=env["AWS_ENDPOINT_URL_S3"],
                                    region="us-east-1", access_key="other",
                                    secret_key="other")
    uri = prefix() + "/via-client.txt"
    upload_bytes(b"hi", uri, client=client)
    assert client.get_object(Bucket=BUCKET, Key=storage_s3.split_uri(uri)[1])["Body"] \
        .read() == b"hi"
    for bad in ("http://b/k", "s3:///k"):
        with pytest.raises(StorageError, match=r"s3://bucket/key|no bucket"):
            upload_bytes(b"x", bad)
    with pytest.raises(StorageError, match="no such folder"):
        upload_prefix(tmp_path / "nowhere", prefix())
