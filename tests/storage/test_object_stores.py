"""The store contract, run against a local root and against a real S3-protocol server
(moto's, in a thread, on a free port): atomic publish, verified fetch that is never half
present, republish, interrupted publishes and their cleanup, links, listing and usage.

The S3 store is skipped without boto3 and moto unless the run requires them
(ROTA_REQUIRE_TORCH, set by scripts/test.sh): there, their absence fails."""

from __future__ import annotations

import hashlib
import os
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from rota.errors import NotFound, StorageError
from rota.storage import (
    LocalStore,
    Manifest,
    ObjectStore,
    S3Store,
    build_manifest,
    open_store,
)
from rota.storage import _common as storage_common

try:
    import boto3
    from moto.server import ThreadedMotoServer
except ImportError:
    if os.environ.get("ROTA_REQUIRE_TORCH"):
        raise
    boto3 = None

BUCKET = "rota-storage-tests"
BIG = random.Random(7).randbytes(3 * (1 << 20) + 11)  # over the 1 MiB multipart threshold
FILES = {"a/b/c.txt": b"nested\n", "a/empty": b"", "top.json": b'{"x": 1}', "big.bin": BIG,
         ".hidden": b"dot"}


class Crash(BaseException):
    """A process dying mid-publish: no handler of the store's runs."""


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    if boto3 is None:
        pytest.skip("needs boto3 and moto[server] (pip install 'rota[test]')")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                 aws_access_key_id="testing", aws_secret_access_key="testing",
                 ).create_bucket(Bucket=BUCKET)
    try:
        yield endpoint
    finally:
        server.stop()


@pytest.fixture
def raw_s3(s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """boto3's client on the server; the environment gives every client dummy credentials
    and nothing from this machine's ~/.aws."""
    none = str(tmp_path / "no-aws-config")
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": none,
                        "AWS_SHARED_CREDENTIALS_FILE": none,
                        "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return LocalStore(tmp_path / "root")
    request.getfixturevalue("raw_s3")
    return S3Store(BUCKET, f"t/{uuid.uuid4().hex}", region="us-east-1",
                   endpoint_url=request.getfixturevalue("s3_endpoint"))


def stage(folder: Path, files: dict[str, bytes]) -> Path:
    for rel, body in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(body)
    return folder


def staged(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, Manifest]:
    folder = stage(tmp_path / f"staged-{uuid.uuid4().hex[:8]}", files)
    return folder, build_manifest(folder, now=time.time())


def contents(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in folder.rglob("*") if p.is_file()}


def stored_objects(store: ObjectStore, raw: Any) -> list[str]:
    """Everything the store holds, as paths under its root or prefix."""
    if isinstance(store, LocalStore):
        return sorted(p.relative_to(store.root).as_posix()
                      for p in store.root.rglob("*") if p.is_file())
    assert isinstance(store, S3Store)
    got = raw.list_objects_v2(Bucket=BUCKET, Prefix=f"{store.prefix}/").get("Contents", [])
    return sorted(o["Key"][len(store.prefix) + 1:] for o in got)


def overwrite(store: ObjectStore, raw: Any, key: str, path: str, body: bytes) -> None:
    """Damages a stored file behind the store's back."""
    m = store.manifest(key)
    assert m is not None
    rel = f"{key}/files/{m.digest()}/{path}"
    if isinstance(store, LocalStore):
        (store.root / rel).write_bytes(body)
    else:
        assert isinstance(store, S3Store)
        raw.put_object(Bucket=BUCKET, Key=f"{store.prefix}/{rel}", Body=body)


@pytest.fixture
def raw(store: ObjectStore, request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("raw_s3") if isinstance(store, S3Store) else None


def test_publish_then_fetch_gives_the_same_bytes_and_manifest(
        store: ObjectStore, raw: Any, tmp_path: Path) -> None:
    folder, m = staged(tmp_path, FILES)
    assert store.manifest("runs/1/out") is None
    store.publish("runs/1/out", folder, m)
    assert store.manifest("runs/1/out") == m
    dest = tmp_path / "got" / "out"
    assert store.fetch("runs/1/out", dest) == m
    assert contents(dest) == FILES
    assert os.listdir(dest.parent) == ["out"]  # no .part folder left behind
    assert contents(folder) == FILES  # copied, not moved
    if isinstance(store, S3Store):  # the big file really went up in parts
        big = f"{store.prefix}/runs/1/out/files/{m.digest()}/big.bin"
        assert raw.head_object(Bucket=BUCKET, Key=big)["ETag"].endswith('-1"')


def test_dest_appears_only_when_every_file_arrived(
        store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, m = staged(tmp_path, FILES)
    store.publish("k", folder, m)
    dest = tmp_path / "got"
    copy = storage_common.copy_verified
    seen: list[bool] = []

    def watched(*args: Any) -> None:
        seen.append(dest.exists())
        copy(*args)

    monkeypatch.setattr(storage_common, "copy_verified", watched)
    store.fetch("k", dest)
    assert seen == [False] * len(FILES) and contents(dest) == FILES


def test_local_publish_can_move_the_staged_files(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "root")
    folder, m = staged(tmp_path, FILES)
    store.publish("k", folder, m, move=True)
    assert contents(folder) == {}
    store.fetch("k", tmp_path / "got")
    assert contents(tmp_path / "got") == FILES


def test_fetch_of_some_paths_brings_only_those(store: ObjectStore, tmp_path: Path) -> None:
    folder, m = staged(tmp_path, FILES)
    store.publish("k", folder, m)
    assert store.fetch("k", tmp_path / "some", paths=["a/b/c.txt", "./a/empty"]) == m
    assert contents(tmp_path / "some") == {"a/b/c.txt": b"nested\n", "a/empty": b""}
    with pytest.raises(NotFound, match="no file 'nope' in its manifest"):
        store.fetch("k", tmp_path / "none", paths=["nope"])
    assert not (tmp_path / "none").exists()


def test_republish_replaces_the_old_version_and_readers_never_see_a_mix(
        store: ObjectStore, raw: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v1_files = {"model.bin": b"one" * 1000, "old-only.txt": b"old"}
    v2_files = {"model.bin": b"two" * 1000, "new-only.txt": b"new"}
    v1_folder, v1 = staged(tmp_path, v1_files)
    store.publish("ds/set", v1_folder, v1)
    v2_folder, v2 = staged(tmp_path, v2_files)
    seen: list[dict[str, bytes]] = []
    put = store._put  # type: ignore[attr-defined]

    def put_then_read(*args: Any, **kw: Any) -> None:
        put(*args, **kw)
        dest = tmp_path / f"during-{len(seen)}"
        assert store.manifest("ds/set") == v1
        store.fetch("ds/set", dest)  # mid-publish: the old version, whole
        seen.append(contents(dest))

    monkeypatch.setattr(store, "_put", put_then_read)
    store.publish("ds/set", v2_folder, v2)
    monkeypatch.undo()
    assert seen == [v1_files, v1_files]
    assert store.manifest("ds/set") == v2
    store.fetch("ds/set", tmp_path / "after")
    assert contents(tmp_path / "after") == v2_files
    with pytest.raises(NotFound, match=r"old-only\.txt"):
        store.open("ds/set", "old-only.txt")
    assert store.keys() == ["ds/set"]
    assert stored_objects(store, raw) == sorted(
        ["ds/set/MANIFEST.json"] + [f"ds/set/files/{v2.digest()}/{p}" for p in v2_files])
    # the same content again with other notes: the notes change, the files stay
    again = Manifest(files=v2.files, created_at=v2.created_at + 1, meta={"note": "again"})
    store.publish("ds/set", v2_folder, again)
    assert store.manifest("ds/set") == again
    store.fetch("ds/set", tmp_path / "again")
    assert contents(tmp_path / "again") == v2_files
    assert store.orphans(0, time.time() + 10) == []


def test_a_staged_file_that_is_not_its_manifest_is_refused_and_nothing_changes(
        store: ObjectStore, raw: Any, tmp_path: Path) -> None:
    v1_folder, v1 = staged(tmp_path, {"w.bin": b"v1"})
    store.publish("k", v1_folder, v1)
    before = stored_objects(store, raw)
    for name, body in [("big.bin", BIG[:-1] + b"!"), ("a/b/c.txt", b"longer than it was")]:
        folder, m = staged(tmp_path, FILES)
        (folder / name).write_bytes(body)  # changed after the manifest was made
        for key in ("k", "fresh"):
            with pytest.raises(StorageError, match=f"{name} does not match its manifest"):
                store.publish(key, folder, m)
    assert store.manifest("k") == v1 and store.manifest("fresh") is None
    assert store.keys() == ["k"]
    store.fetch("k", tmp_path / "got")
    assert contents(tmp_path / "got") == {"w.bin": b"v1"}
    assert stored_objects(store, raw) == before  # the publish cleaned up after itself
    assert store.orphans(0, time.time() + 10) == []


def test_a_staged_symlink_is_not_followed(store: ObjectStore, tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"secret")
    folder, m = staged(tmp_path, {"data": b"secret"})
    (folder / "data").unlink()
    (folder / "data").symlink_to(tmp_path / "secret")  # same bytes, but through a link
    with pytest.raises(StorageError, match=r"cannot read staged file .*data"):
        store.publish("k", folder, m)
    assert store.manifest("k") is None


def test_a_crash_mid_publish_leaves_the_previous_version_and_orphans_to_remove(
        store: ObjectStore, raw: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v1_folder, v1 = staged(tmp_path, {"a": b"1", "b": b"1"})
    store.publish("k", v1_folder, v1)
    v2_folder, v2 = staged(tmp_path, {"a": b"2", "b": b"2"})
    put = store._put  # type: ignore[attr-defined]
    calls: list[int] = []

    def put_then_die(*args: Any, **kw: Any) -> None:
        if calls:
            raise Crash
        calls.append(1)
        put(*args, **kw)

    monkeypatch.setattr(store, "_put", put_then_die)
    for key in ("k", "new"):
        calls.clear()
        with pytest.raises(Crash):
            store.publish(key, v2_folder, v2)
    monkeypatch.undo()
    assert store.manifest("k") == v1 and store.manifest("new") is None
    assert store.keys() == ["k"]
    store.fetch("k", tmp_path / "got")
    assert contents(tmp_path / "got") == {"a": b"1", "b": b"1"}
    assert store.orphans(3600, time.time()) == []  # a publish may still be under way
    left = store.orphans(1, time.time() + 5)
    if isinstance(store, LocalStore):
        assert len(left) == 2 and all(p.startswith(".staging/") for p in left)
    else:
        assert left == [f"k/files/{v2.digest()}/", f"new/files/{v2.digest()}/"]
    assert store.remove_orphans(1, time.time() + 5) == left
    assert store.orphans(0, time.time() + 5) == []
    assert stored_objects(store, raw) == sorted(
        ["k/MANIFEST.json", f"k/files/{v1.digest()}/a", f"k/files/{v1.digest()}/b"])
    store.fetch("k", tmp_path / "still")
    assert contents(tmp_path / "still") == {"a": b"1", "b": b"1"}


@pytest.mark.parametrize("damage", [b"X" * len(b"nested\n"), b"short", b""])
def test_a_damaged_object_fails_the_fetch_naming_it_and_leaves_no_dest(
        store: ObjectStore, raw: Any, tmp_path: Path, damage: bytes) -> None:
    folder, m = staged(tmp_path, FILES)
    store.publish("k", folder, m)
    overwrite(store, raw, "k", "a/b/c.txt", damage)
    dest = tmp_path / "got"
    with pytest.raises(StorageError, match=r"a/b/c\.txt does not match its manifest"):
        store.fetch("k", dest)
    assert not dest.exists()
    assert [p for p in os.listdir(tmp_path) if p.startswith(".got")] == []
    store.fetch("k", tmp_path / "other", paths=["top.json"])  # the rest still fetches
    assert contents(tmp_path / "other") == {"top.json": b'{"x": 1}'}


def test_fetch_refuses_an_existing_dest_and_a_missing_key(
        store: ObjectStore, tmp_path: Path) -> None:
    folder, m = staged(tmp_path, {"f": b"x"})
    store.publish("k", folder, m)
    (tmp_path / "there").mkdir()
    with pytest.raises(StorageError, match="there exists already: fetch into a new folder"):
        store.fetch("k", tmp_path / "there")
    assert os.listdir(tmp_path / "there") == []
    for call in (lambda: store.fetch("nope", tmp_path / "d"), lambda: store.open("nope", "f"),
                 lambda: store.delete("nope")):
        with pytest.raises(NotFound, match="no key 'nope'"):
            call()
    assert store.manifest("nope") is None
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(("key", "why"), [
    ("", "a key cannot be empty"),
    ("/abs", "empty segment"),
    ("a/", "empty segment"),
    ("a//b", "empty segment"),
    ("../up", "segment '..' is not allowed"),
    ("a/../b", "segment '..' is not allowed"),
    (".staging", "segment '.staging' is not allowed"),
    ("a/.hidden", "segment '.hidden' is not allowed"),
    ("sp ace", "segment 'sp ace' is not allowed"),
    ("a/files", "'files' is reserved"),
    ("a/MANIFEST.json/b", "'MANIFEST.json' is reserved"),
    ("x" * 513, "longer than 512 characters"),
])
def test_bad_keys_are_refused_with_the_reason(
        store: ObjectStore, tmp_path: Path, key: str, why: str) -> None:
    folder, m = staged(tmp_path, {"f": b"x"})
    for call in (lambda: store.publish(key, folder, m), lambda: store.manifest(key),
                 lambda: store.fetch(key, tmp_path / "d")):
        with pytest.raises(StorageError, match="key .*" + why.replace(".", r"\.")):
            call()


def test_nested_keys_live_side_by_side(store: ObjectStore, tmp_path: Path) -> None:
    outer_folder, outer = staged(tmp_path, {"o": b"outer", "inner/x": b"a file, not the key"})
    inner_folder, inner = staged(tmp_path, {"i": b"inner"})
    store.publish("ds/a", outer_folder, outer)
    store.publish("ds/a/inner", inner_folder, inner)
    assert store.keys() == ["ds/a", "ds/a/inner"]
    store.delete("ds/a")
    assert store.keys() == ["ds/a/inner"]
    store.fetch("ds/a/inner", tmp_path / "got")
    assert contents(tmp_path / "got") == {"i": b"inner"}


def test_keys_usage_open_and_delete(store: ObjectStore, raw: Any, tmp_path: Path) -> None:
    sizes = {}
    for key, files in {"ds/one": {"a": b"12345"}, "ds/two/x": {"b": b"1", "c/d": b"12"},
                       "dsx": {"e": b"123"}, "runs/7": {"big.bin": BIG}}.items():
        folder, m = staged(tmp_path, files)
        store.publish(key, folder, m)
        sizes[key] = m.total_size
    assert store.keys() == ["ds/one", "ds/two/x", "dsx", "runs/7"]
    assert store.keys("ds/") == ["ds/one", "ds/two/x"]
    assert store.keys("ds") == ["ds/one", "ds/two/x", "dsx"]
    assert store.keys("ds/two/x") == ["ds/two/x"]
    assert store.keys("nothing") == [] and store.keys("ds/one/") == []
    assert store.usage("ds/") == 5 + 3
    assert store.usage() == sum(sizes.values()) == 5 + 3 + 3 + len(BIG)
    with store.open("runs/7", "big.bin") as f:
        chunks = iter(lambda: f.read(100_000), b"")
        assert hashlib.sha256(b"".join(chunks)).hexdigest() == \
            hashlib.sha256(BIG).hexdigest()
    with pytest.raises(NotFound, match="no file 'nope' in its manifest"):
        store.open("runs/7", "nope")
    store.delete("ds/two/x")
    assert store.keys() == ["ds/one", "dsx", "runs/7"]
    assert store.manifest("ds/two/x") is None
    assert store.usage("ds/") == 5
    assert not [p for p in stored_objects(store, raw) if p.startswith("ds/two")]
    if isinstance(store, LocalStore):
        assert not (store.root / "ds" / "two").exists()  # its emptied folders went too


def test_link_downloads_the_exact_bytes_from_s3_and_is_none_for_a_local_root(
        store: ObjectStore, tmp_path: Path) -> None:
    folder, m = staged(tmp_path, {"w/model.bin": BIG[:200_000]})
    store.publish("k", folder, m)
    url = store.link("k", "w/model.bin", expires_s=90.7)
    if isinstance(store, LocalStore):
        assert url is None
        return
    assert url is not None and "testing" not in url.split("X-Amz-Credential")[0]
    got = httpx.get(url)
    assert got.status_code == 200 and got.content == BIG[:200_000]
    query = parse_qs(urlsplit(url).query)
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert query["X-Amz-Expires"] == ["90"]  # moto does not enforce expiry: see report
    signed_at = time.mktime(time.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ"))
    assert abs(signed_at - time.timezone - time.time()) < 60
    assert httpx.get(url.split("?")[0]).status_code == 403  # not without the signature
    with pytest.raises(NotFound, match="no file 'nope'"):
        store.link("k", "nope", 60)


@pytest.mark.parametrize(("url", "kind", "where"), [
    ("/srv/rota/data", LocalStore, "/srv/rota/data"),
    ("file:///srv/rota/da%20ta", LocalStore, "/srv/rota/da ta"),
    ("file://localhost/srv/x", LocalStore, "/srv/x"),
    ("s3://my-bucket", S3Store, "s3://my-bucket"),
    ("s3://my-bucket/team/runs/", S3Store, "s3://my-bucket/team/runs"),
])
def test_open_store_reads_paths_and_urls(url: str, kind: type, where: str) -> None:
    store = open_store(url, endpoint_url="http://127.0.0.1:1", region="eu-west-1")
    assert isinstance(store, kind) and store.url == where


@pytest.mark.parametrize(("url", "why"), [
    ("relative/path", "not a store URL: use an absolute path, file:///abs/path or s3://"),
    ("http://host/x", "not a store URL"),
    ("file://otherhost/x", "a file URL names a local absolute path"),
    ("s3://", "expected s3://bucket"),
    ("s3://b/x?versionId=1", "expected s3://bucket"),
    ("s3://bucket/../up", "prefix: key '../up': segment '..' is not allowed"),
])
def test_open_store_refuses_what_it_cannot_open(url: str, why: str) -> None:
    with pytest.raises(StorageError) as e:
        open_store(url)
    assert str(e.value).startswith(f"store {url!r}: ") and why in str(e.value)


def test_s3_errors_are_translated_without_credentials(
        raw_s3: Any, s3_endpoint: str, tmp_path: Path) -> None:
    store = S3Store("no-such-bucket-here", endpoint_url=s3_endpoint, region="us-east-1")
    with pytest.raises(StorageError) as e:
        store.manifest("k")
    assert str(e.value) == ("s3://no-such-bucket-here/k/MANIFEST.json: NoSuchBucket: "
                            "The specified bucket does not exist")
    assert not e.value.passing and "testing" not in str(e.value)
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url="http://127.0.0.1:9", region_name="us-east-1",
                          config=Config(retries={"max_attempts": 1}, connect_timeout=2))
    dead = S3Store(BUCKET, client=client)
    folder, m = staged(tmp_path, {"f": b"x"})
    with pytest.raises(StorageError) as e:
        dead.publish("k", folder, m)
    assert e.value.passing and "EndpointConnectionError" in str(e.value)


def test_a_missing_boto3_is_named_with_its_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_boto3(name: str, *args: Any, **kw: Any) -> Any:
        if name == "boto3":
            raise ImportError(name)
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_boto3)
    with pytest.raises(StorageError, match=r"s3://b-u-c needs boto3: pip install 'rota\[s3\]'"):
        _ = S3Store("b-u-c").client

