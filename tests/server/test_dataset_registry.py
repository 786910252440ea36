"""The dataset registry (rota.server.storage.datasets.Datasets) against a real store (SQLite) and a
real local object store: names, the chunked upload and its checks, versions by content
(numbers never reused, a removed version's content revived under its number), which
version a name finds for whom, what a submit may name, removal, and jobs held until their
versions are fetched to this machine's cache (by the registry's own worker thread)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rota.backends.base import RunAs
from rota.config import Settings, StorageSettings
from rota.core.lifecycle import JobState
from rota.core.plan import ReasonCode
from rota.core.spec import JobSpec
from rota.errors import Conflict, Forbidden, InvalidSpec, NotFound, StorageError
from rota.server.storage.dataset_names import env_name
from rota.server.storage.dataset_uploads import Upload
from rota.server.storage.datasets import RETRY_OTHER_S, Datasets
from rota.storage import FileEntry, LocalStore, Manifest
from rota.store.repo import Store

NOW = 1_000_000.0


class Loop:
    """What the daemon's loop gives the registry: ``post`` from the worker thread (kept,
    run here by ``run_posted``), ``later`` (kept with its delay), ``kick`` (counted)."""

    def __init__(self) -> None:
        self.posted: list[tuple[Callable[..., None], tuple[object, ...]]] = []
        self.timers: list[tuple[float, Callable[[], None]]] = []
        self.kicks = 0
        self._lock = threading.Lock()

    def post(self, fn: Callable[..., None], *args: object) -> None:
        with self._lock:
            self.posted.append((fn, args))

    def later(self, delay: float, fn: Callable[[], None]) -> None:
        self.timers.append((delay, fn))

    def kick(self) -> None:
        self.kicks += 1

    def run_posted(self, n: int = 1, timeout: float = 30.0) -> None:
        """Wait (bounded) for ``n`` outcomes from the worker, and run them on this thread."""
        deadline = time.monotonic() + timeout
        done = 0
        while done < n:
            with self._lock:
                got, self.posted = self.posted, []
            for fn, args in got:
                fn(*args)
                done += 1
            if done < n:
                assert time.monotonic() < deadline, f"{done} of {n} fetches came back"
                time.sleep(0.01)


class Registry:
    """A Datasets with its store, object store, loop and the jobs' states."""

    def __init__(self, tmp: Path, **storage: Any) -> None:
        self.home, self.objects_root = tmp / "home", tmp / "objects"
        self.settings = Settings(home=self.home, storage=StorageSettings(
            url=str(self.objects_root), **storage))
        self.store = Store.open(f"sqlite:///{tmp / 'rota.db'}")
        self.objects = LocalStore(self.objects_root)
        self.loop = Loop()
        self.states: dict[int, JobState] = {}
        self.ds = self.make()

    def make(self) -> Datasets:
        """A registry as a (re)started daemon makes it: start() reads the store."""
        ds = Datasets(self.settings, self.store, lambda: NOW, post=self.loop.post,
                      kick=self.loop.kick, later=self.loop.later, objects=lambda: self.objects,
                      state=self.states.get, run_as=lambda user: None)
        ds.start()
        return ds

    def close(self) -> None:
        self.ds.close()
        self.store.close()


@pytest.fixture
def reg(tmp_path: Path) -> Iterator[Registry]:
    r = Registry(tmp_path)
    yield r
    r.close()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def entries(files: dict[str, bytes]) -> list[FileEntry]:
    return [FileEntry(path=p, size=len(d), sha256=sha(d)) for p, d in sorted(files.items())]


def begin(ds: Datasets, owner: str, name: str, files: dict[str, bytes], *,
          shared: bool = False) -> dict[str, Any]:
    return asyncio.run(ds.begin_upload(owner=owner, name=name, shared=shared,
                                       description=None, source="/data/" + name,
                                       files=entries(files)))


def send_all(ds: Datasets, up: Upload, files: dict[str, bytes], chunk: int = 1000) -> None:
    for path, data in files.items():
        for at in range(0, len(data), chunk):
            asyncio.run(ds.put_chunk(up, path, at, data[at:at + chunk]))


def add(ds: Datasets, owner: str, name: str, files: dict[str, bytes], *,
        shared: bool = False) -> dict[str, Any]:
    """The whole upload, as the CLI makes it: the manifest, each file's bytes, the commit."""
    began = begin(ds, owner, name, files, shared=shared)
    if began["upload"] is None:
        return began
    up = ds.upload(began["upload"]["id"], owner)
    send_all(ds, up, files)
    got: dict[str, Any] = asyncio.run(ds.commit(up, owner))
    return got


def corpus(salt: str = "") -> dict[str, bytes]:
    return {"train.txt": f"the quick brown fox {salt}\n".encode() * 200,
            "sub/valid.jsonl": b'{"text": "hello"}\n' * 30,
            "empty": b""}


def digest_of(files: dict[str, bytes]) -> str:
    return Manifest(files=tuple(entries(files)), created_at=0.0).digest()


# --- names ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["Text", "-lead", ".hidden", "has space", "a/b", "x" * 65,
                                 "", "ünï"])
def test_a_bad_name_is_refused_naming_the_name(reg: Registry, bad: str) -> None:
    with pytest.raises(InvalidSpec) as e:
        begin(reg.ds, "alice", bad, corpus())
    assert e.value.field == "name" and "is not a dataset name" in str(e.value)
    with pytest.raises(InvalidSpec) as e:
        asyncio.run(reg.ds.import_s3(owner="alice", name=bad, source="s3://bucket/p",
                                     shared=False, description=None, by="alice"))
    assert e.value.field == "name"
    assert reg.ds.uploads == {} and reg.store.dataset_versions() == []


def test_good_names_are_taken(reg: Registry) -> None:
    for name in ("text-mini", "a", "0day", "v1.2_final", "x" * 64):
        assert begin(reg.ds, "alice", name, corpus())["upload"] is not None


def test_env_name_is_the_name_in_capitals() -> None:
    assert env_name("text-mini") == env_name("text_mini") == env_name("text.mini") \
        == "ROTA_DATASET_TEXT_MINI"


# --- the upload -------------------------------------------------------------------------


def test_an_upload_of_no_file_is_refused(reg: Registry) -> None:
    with pytest.raises(InvalidSpec) as e:
        begin(reg.ds, "alice", "nothing", {})
    assert e.value.field == "files" and "holds no file" in str(e.value)


def test_a_path_listed_as_a_file_and_a_folder_is_refused(reg: Registry) -> None:
    for files, clash in (({"a": b"1", "a/b": b"2"}, "a"),
                         ({"x/y": b"1", "x/y/z/w": b"2", "q": b"3"}, "x/y")):
        with pytest.raises(InvalidSpec) as e:
            begin(reg.ds, "alice", "clash", files)
        assert e.value.field == "files"
        assert f"{clash!r} is listed as a file and as a folder" in str(e.value)
    assert reg.ds.uploads == {}
    # a folder and a file that share a prefix of their names are no clash
    assert begin(reg.ds, "alice", "fine", {"a": b"1", "ab/c": b"2"})["upload"] is not None


def test_an_upload_over_max_dataset_bytes_is_refused(tmp_path: Path) -> None:
    r = Registry(tmp_path, max_dataset_bytes=1000)
    try:
        with pytest.raises(InvalidSpec) as e:
            begin(r.ds, "alice", "big", {"a": b"x" * 600, "b": b"y" * 401})
        assert e.value.field == "files" and "max_dataset_bytes" in str(e.value)
        assert r.ds.uploads == {}
        exactly = add(r.ds, "alice", "big", {"a": b"x" * 600, "b": b"y" * 400})
        assert exactly["made"] is True and exactly["version"]["bytes"] == 1000
    finally:
        r.close()


def test_chunks_are_taken_in_order_and_again_on_a_retry(reg: Registry) -> None:
    data = bytes(range(256)) * 4  # 1024 bytes
    began = begin(reg.ds, "alice", "blob", {"blob.bin": data})
    assert began["made"] is False and began["version"] is None
    view = began["upload"]
    assert view["files"] == 1 and view["bytes"] == 1024 and view["received"] == 0
    up = reg.ds.upload(view["id"], "alice")

    def put(offset: int, chunk: bytes, path: str = "blob.bin") -> int:
        return asyncio.run(reg.ds.put_chunk(up, path, offset, chunk))

    assert put(0, data[:400]) == 400
    assert put(0, data[:400]) == 400  # the same chunk sent again: a retry
    with pytest.raises(Conflict) as e:  # past what arrived: says where to send from
        put(800, data[800:])
    assert "400 bytes received so far" in str(e.value) and "(offset 400)" in str(e.value)
    assert put(400, data[400:800]) == 800
    with pytest.raises(InvalidSpec) as e2:  # more bytes than the manifest said
        put(800, data[800:] + b"extra")
    assert e2.value.field == "offset" and "more than the 1024 its manifest said" in str(e2.value)
    with pytest.raises(NotFound):
        put(0, b"x", path="other.bin")
    assert reg.ds.upload_view(up)["received"] == 800
    # the upload is the owner's alone
    with pytest.raises(NotFound):
        reg.ds.upload(view["id"], "bob")
    assert put(800, data[800:]) == 1024
    got = asyncio.run(reg.ds.commit(up, "alice"))
    assert got["made"] is True
    key = got["version"]["key"]
    fetched = reg.objects.fetch(key, reg.home.parent / "back")
    assert fetched.digest() == got["version"]["digest"] == digest_of({"blob.bin": data})
    assert (reg.home.parent / "back" / "blob.bin").read_bytes() == data


def tar_of(members: list[tuple[str, bytes]], link: str | None = None) -> bytes:
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if link is not None:
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
    return out.getvalue()


def test_small_files_arrive_whole_many_in_one_tar(reg: Registry) -> None:
    """Each member a regular file named by its manifest path at its manifest size; any
    other member refuses the whole request, naming it, and nothing of it is written."""
    files = corpus()
    up = reg.ds.upload(begin(reg.ds, "alice", "text-mini", files)["upload"]["id"], "alice")
    valid, train = files["sub/valid.jsonl"], files["train.txt"]

    def put(tar: bytes) -> dict[str, int]:
        return asyncio.run(reg.ds.put_files(up, tar))

    for bad, said, kind in (
            (tar_of([("sub/valid.jsonl", valid), ("other.txt", b"x")]),
             "'other.txt' is not one of its files", NotFound),
            (tar_of([("sub/valid.jsonl", valid), ("train.txt", train[:10])]),
             "train.txt: not the whole file (10 bytes; its manifest says", InvalidSpec),
            (tar_of([("sub/valid.jsonl", valid)], link="train.txt"),
             "train.txt: not a regular file", InvalidSpec),
            (b"not a tar at all" * 40, "the body is not a tar", InvalidSpec)):
        with pytest.raises(kind) as e:
            put(bad)
        assert said in str(e.value), str(e.value)
        assert up.received == {}  # nothing of a refused request is written
    assert put(tar_of([("sub/valid.jsonl", valid), ("train.txt", train)])) == {
        "sub/valid.jsonl": len(valid), "train.txt": len(train)}
    got = asyncio.run(reg.ds.commit(up, "alice"))  # every sha256 checked
    assert got["made"] is True and got["version"]["digest"] == digest_of(files)


def test_a_commit_while_a_file_is_short_is_refused_and_the_upload_goes_on(
        reg: Registry) -> None:
    files = corpus()
    began = begin(reg.ds, "alice", "text-mini", files)
    up = reg.ds.upload(began["upload"]["id"], "alice")
    train = files["train.txt"]
    asyncio.run(reg.ds.put_chunk(up, "train.txt", 0, train[:100]))
    with pytest.raises(Conflict) as e:
        asyncio.run(reg.ds.commit(up, "alice"))
    assert "not complete yet" in str(e.value)
    assert reg.store.dataset_versions() == [] and reg.ds.upload(up.id, "alice") is up
    asyncio.run(reg.ds.put_chunk(up, "train.txt", 100, train[100:]))
    asyncio.run(reg.ds.put_chunk(up, "sub/valid.jsonl", 0, files["sub/valid.jsonl"]))
    got = asyncio.run(reg.ds.commit(up, "alice"))  # the empty file is never sent
    assert got["made"] is True and got["version"]["ref"] == "alice/text-mini:v1"
    assert got["version"]["files"] == 3
    assert got["version"]["bytes"] == sum(len(d) for d in files.values())
    # committed: another client of the same content may still commit it (the version,
    # not made again); what it sends is dropped, the published files untouched
    assert reg.ds.upload(up.id, "alice") is up and up.sealed
    assert asyncio.run(reg.ds.put_chunk(up, "train.txt", 0, b"late bytes")) == len(train)
    again = asyncio.run(reg.ds.commit(up, "alice"))
    assert again["made"] is False and again["version"] == got["version"]
    with pytest.raises(NotFound):  # nor anyone else's
        reg.ds.upload(up.id, "bob")


def test_an_upload_of_the_same_content_cut_off_goes_on_from_what_arrived(
        reg: Registry) -> None:
    """`rota dataset add` again after a cut: the same owner, name and content get the
    upload that has part of it, which says what it has; other content or another owner
    gets a new one."""
    files = corpus()
    first = begin(reg.ds, "alice", "text-mini", files)["upload"]
    up = reg.ds.upload(first["id"], "alice")
    asyncio.run(reg.ds.put_chunk(up, "train.txt", 0, files["train.txt"][:100]))
    again = begin(reg.ds, "alice", "text-mini", files, shared=True)["upload"]
    assert again["id"] == first["id"] and again["received"] == 100
    assert again["received_files"] == {"train.txt": 100}
    assert up.shared is True  # the latest call's settings
    assert begin(reg.ds, "bob", "text-mini", files)["upload"]["id"] != first["id"]
    other = {**files, "train.txt": files["train.txt"] + b"more"}
    assert begin(reg.ds, "alice", "text-mini", other)["upload"]["id"] != first["id"]
    assert first["received_files"] == {}


def test_an_upload_a_restart_cut_off_goes_on_and_others_are_dropped(reg: Registry) -> None:
    """A restarted daemon takes its uploads up again, each with what its files received
    (read from the staged files); one older than a day, one whose content made a version
    (the daemon stopped in its commit) and an import's leftovers are dropped."""
    from rota.server.storage import dataset_uploads

    files = corpus()
    first = begin(reg.ds, "alice", "text-mini", files)["upload"]
    up = reg.ds.upload(first["id"], "alice")
    asyncio.run(reg.ds.put_chunk(up, "train.txt", 0, files["train.txt"][:100]))
    valid = files["sub/valid.jsonl"]
    asyncio.run(reg.ds.put_files(up, tar_of([("sub/valid.jsonl", valid)])))
    old = begin(reg.ds, "bob", "old", corpus("b"))["upload"]
    record = reg.ds.uploads_dir / old["id"] / "upload.json"
    record.write_text(json.dumps({**json.loads(record.read_text()),
                                  "made_at": NOW - 25 * 3600}))
    committed = corpus("c")
    add(reg.ds, "carol", "done", committed)
    late = begin(reg.ds, "carol", "done", committed)  # (its version answers)
    assert late["upload"] is None
    stale = dataset_uploads.Upload(  # the record a daemon killed in the commit left
        id="f" * 32, owner="carol", name="done", shared=False, description=None,
        source="/data/done", manifest=Manifest(files=tuple(entries(committed)),
                                               created_at=NOW),
        dir=reg.ds.uploads_dir / ("f" * 32), made_at=NOW)
    dataset_uploads.save(stale)
    leftover = reg.ds.uploads_dir / "0123abcd"  # an S3 import's staging
    leftover.mkdir()
    (leftover / "part").write_bytes(b"x")

    reg.ds.close()
    reg.ds = reg.make()  # the restart
    assert sorted(p.name for p in reg.ds.uploads_dir.iterdir()) == [first["id"]]
    again = begin(reg.ds, "alice", "text-mini", files)["upload"]
    assert again["id"] == first["id"] and again["received"] == 100 + len(valid)
    assert again["received_files"] == {"train.txt": 100, "sub/valid.jsonl": len(valid)}
    with pytest.raises(NotFound):
        reg.ds.upload(old["id"], "bob")
    up = reg.ds.upload(first["id"], "alice")
    with pytest.raises(Conflict, match="offset 100"):  # in order, from what it has
        asyncio.run(reg.ds.put_chunk(up, "train.txt", 200, files["train.txt"][200:]))
    asyncio.run(reg.ds.put_chunk(up, "train.txt", 100, files["train.txt"][100:]))
    got = asyncio.run(reg.ds.commit(up, "alice"))
    assert got["made"] is True and got["version"]["digest"] == digest_of(files)
    assert list(reg.ds.uploads_dir.iterdir()) == []


def test_content_that_does_not_match_its_sha256_is_refused_and_nothing_is_published(
        reg: Registry) -> None:
    announced = {"a.txt": b"what was announced\n", "b.txt": b"fine\n"}
    sent = {"a.txt": b"what was sent, alas\n"[:len(announced["a.txt"])], "b.txt": b"fine\n"}
    assert len(sent["a.txt"]) == len(announced["a.txt"]) and sent != announced
    began = begin(reg.ds, "alice", "wrong", announced)
    up = reg.ds.upload(began["upload"]["id"], "alice")
    send_all(reg.ds, up, sent)
    with pytest.raises(StorageError) as e:
        asyncio.run(reg.ds.commit(up, "alice"))
    assert "do not match what was announced" in str(e.value) and "a.txt" in str(e.value)
    key = f"datasets/alice/wrong/{digest_of(announced)}"
    assert reg.objects.manifest(key) is None
    assert reg.objects.keys("datasets/") == []
    assert reg.store.dataset_versions() == [] and reg.ds.versions == {}
    assert not up.staged.exists()  # its staged files are gone too
    with pytest.raises(NotFound):
        reg.ds.upload(up.id, "alice")


def test_the_same_content_twice_is_the_same_version(reg: Registry) -> None:
    first = add(reg.ds, "alice", "text-mini", corpus())
    assert first["made"] is True and first["version"]["version"] == 1
    again = begin(reg.ds, "alice", "text-mini", corpus())  # found at once: nothing to send
    assert again["upload"] is None and again["made"] is False
    assert again["version"] == first["version"]
    # two clients adding the same content at once (two terminals): one upload, which
    # both send to and both commit; one version, made once
    a = begin(reg.ds, "alice", "other", corpus("x"))
    b = begin(reg.ds, "alice", "other", corpus("x"))
    assert a["upload"]["id"] == b["upload"]["id"]
    ups = [reg.ds.upload(x["upload"]["id"], "alice") for x in (a, b)]
    for up in ups:
        send_all(reg.ds, up, corpus("x"))
    made = [asyncio.run(reg.ds.commit(up, "alice")) for up in ups]
    assert [m["made"] for m in made] == [True, False]
    assert made[0]["version"]["ref"] == made[1]["version"]["ref"] == "alice/other:v1"
    assert reg.objects.manifest(made[0]["version"]["key"]) is not None
    # the same content under another name or owner is a version of that one
    assert add(reg.ds, "bob", "text-mini", corpus())["made"] is True
    assert [(r.owner, r.name, r.version) for r in reg.store.dataset_versions()] == [
        ("alice", "other", 1), ("alice", "text-mini", 1), ("bob", "text-mini", 1)]


# --- which version a name finds ---------------------------------------------------------


def test_a_name_alone_is_the_callers_own_before_a_shared_one(reg: Registry) -> None:
    add(reg.ds, "alice", "corpus", corpus("alice's"))
    bobs = add(reg.ds, "bob", "corpus", corpus("bob's"), shared=True)["version"]
    assert reg.ds.find("corpus", "alice").owner == "alice"
    assert reg.ds.find("corpus", "bob").owner == "bob"
    assert reg.ds.find("corpus", "carol").digest == bobs["digest"]  # the one shared
    assert reg.ds.find("bob/corpus", "alice").digest == bobs["digest"]  # named: bob's


def test_another_users_private_dataset_is_not_found(reg: Registry) -> None:
    add(reg.ds, "alice", "secret", corpus())
    for given in ("secret", "alice/secret", "alice/secret:v1", "secret:latest"):
        with pytest.raises(NotFound) as e:
            reg.ds.find(given, "bob")
        assert "you may read" in str(e.value), given
    assert [v["name"] for v in reg.ds.views("bob", admin=False)] == []
    assert [v["name"] for v in reg.ds.views("alice", admin=False)] == ["secret"]
    assert [v["name"] for v in reg.ds.views("root", admin=True)] == ["secret"]
    with pytest.raises(NotFound):
        asyncio.run(reg.ds.show("alice/secret", "bob", admin=False))
    shown = asyncio.run(reg.ds.show("alice/secret", "root", admin=True))
    assert shown["owner"] == "alice" and shown["in_store"] is True
    assert {f["path"]: f["sha256"] for f in shown["contents"]} == {
        p: sha(d) for p, d in corpus().items()}


def test_two_shared_datasets_of_one_name_need_their_owner(reg: Registry) -> None:
    add(reg.ds, "alice", "common", corpus("a"), shared=True)
    add(reg.ds, "bob", "common", corpus("b"), shared=True)
    with pytest.raises(InvalidSpec) as e:
        reg.ds.find("common", "carol")
    assert "'common' is shared by alice, bob" in str(e.value)
    assert "OWNER/common" in str(e.value) and e.value.field == "datasets"
    assert reg.ds.find("alice/common", "carol").owner == "alice"
    assert reg.ds.find("bob/common", "carol").owner == "bob"
    assert reg.ds.find("common", "alice").owner == "alice"  # her own comes first


def test_versions_by_number_digest_prefix_and_latest(reg: Registry) -> None:
    made = [add(reg.ds, "alice", "corpus", corpus(str(n)))["version"] for n in range(3)]
    assert [v["version"] for v in made] == [1, 2, 3]
    find = reg.ds.find
    assert find("corpus", "alice").version == 3
    assert find("corpus:latest", "alice").version == 3
    assert find("corpus:v2", "alice").digest == made[1]["digest"]
    assert find(f"corpus:{made[0]['digest'][:6]}", "alice").version == 1
    assert find(f"alice/corpus:{made[2]['digest']}", "alice").version == 3
    with pytest.raises(NotFound) as e:
        find("corpus:v9", "alice")
    assert "no version 'v9' of alice/corpus (it has v1, v2, v3)" in str(e.value)
    with pytest.raises(InvalidSpec) as e2:
        find("corpus:v", "alice")
    assert "is not [OWNER/]NAME[:VERSION]" in str(e2.value)
    with pytest.raises(InvalidSpec):
        find("corpus:ABCDEF", "alice")  # digests are lower-case hex


def two_contents_of_one_digest_prefix(digits: int = 6) -> tuple[dict[str, bytes],
                                                                   dict[str, bytes]]:
    """Two real folders whose manifests' digests share their first ``digits`` hex digits
    (a birthday search: some thousand tries for 6)."""
    seen: dict[str, dict[str, bytes]] = {}
    for n in range(1_000_000):
        files = {"data.txt": f"sample {n}\n".encode()}
        prefix = digest_of(files)[:digits]
        if prefix in seen:
            return seen[prefix], files
        seen[prefix] = files
    raise AssertionError("no two digests shared a prefix")


def test_a_digest_prefix_of_two_versions_is_refused(reg: Registry) -> None:
    one, two = two_contents_of_one_digest_prefix()
    v1 = add(reg.ds, "alice", "twins", one)["version"]
    v2 = add(reg.ds, "alice", "twins", two)["version"]
    prefix = v1["digest"][:6]
    assert v2["digest"].startswith(prefix) and v1["digest"] != v2["digest"]
    with pytest.raises(NotFound) as e:
        reg.ds.find(f"twins:{prefix}", "alice")
    assert f"more than one version {prefix!r}" in str(e.value)
    longer = v2["digest"][:7] if v1["digest"][:7] != v2["digest"][:7] else v2["digest"]
    assert reg.ds.find(f"twins:{longer}", "alice").version == 2
    with pytest.raises(InvalidSpec) as e2:  # at submit: the spec's field
        reg.ds.resolve(JobSpec(command=["true"], datasets=[f"twins:{prefix}"]), "alice",
                       "", engine=None)
    assert e2.value.field == "datasets" and "more than one version" in str(e2.value)


# --- what a submit may name -------------------------------------------------------------


def test_resolve_names_each_version_exactly(reg: Registry) -> None:
    add(reg.ds, "alice", "corpus", corpus("1"))
    add(reg.ds, "alice", "corpus", corpus("2"))
    add(reg.ds, "bob", "images", corpus("img"), shared=True)
    spec = JobSpec(command=["true"], datasets=["corpus:v1", "images"])
    got = reg.ds.resolve(spec, "alice", "", engine=None)
    assert got.datasets == ["alice/corpus:v1", "bob/images:v1"]
    assert spec.datasets == ["corpus:v1", "images"]  # a copy: the given spec is as it was
    assert reg.ds.resolve(JobSpec(command=["true"]), "alice", "", engine=None).datasets == []
    with pytest.raises(InvalidSpec) as e:
        reg.ds.resolve(JobSpec(command=["true"], datasets=["nope"]), "alice", "jobs[2]: ",
                       engine=None)
    assert e.value.field == "datasets" and str(e.value).startswith("jobs[2]: datasets: ")


def test_two_datasets_of_one_variable_are_refused(reg: Registry) -> None:
    add(reg.ds, "alice", "text-mini", corpus("a"))
    add(reg.ds, "alice", "text_mini", corpus("b"))
    add(reg.ds, "bob", "corpus", corpus("c"), shared=True)
    add(reg.ds, "carol", "corpus", corpus("d"), shared=True)
    for pair in (["text-mini", "text_mini"], ["bob/corpus", "carol/corpus"]):
        with pytest.raises(InvalidSpec) as e:
            reg.ds.resolve(JobSpec(command=["true"], datasets=pair), "alice", "",
                           engine=None)
        var = env_name(pair[0].rpartition("/")[2])
        assert f"{pair[0]!r} and {pair[1]!r} would both be {var}" in str(e.value)
        assert e.value.field == "datasets"


def test_more_than_the_cache_holds_is_refused_here_but_not_on_a_cluster(
        tmp_path: Path) -> None:
    r = Registry(tmp_path, dataset_cache_limit=5000)
    try:
        a = add(r.ds, "alice", "a", {"f": b"a" * 3000})["version"]
        add(r.ds, "alice", "b", {"f": b"b" * 3000})
        spec = JobSpec(command=["true"], datasets=["a", "b"])
        with pytest.raises(InvalidSpec) as e:
            r.ds.resolve(spec, "alice", "", engine=None)
        assert "dataset_cache_limit" in str(e.value) and e.value.field == "datasets"
        # one fits; a cluster pool's job fetches its own, whatever this machine holds
        assert r.ds.resolve(spec.model_copy(update={"datasets": ["a"]}), "alice", "",
                            engine=None).datasets == [a["ref"]]
        assert r.ds.resolve(spec, "alice", "", engine="slurm").datasets == [
            "alice/a:v1", "alice/b:v1"]
        # a kubernetes pool's pods read an S3 store, and this one is a local folder
        with pytest.raises(InvalidSpec) as e2:
            r.ds.resolve(spec.model_copy(update={"datasets": ["a"]}), "alice", "",
                         engine="kubernetes")
        assert "kubernetes" in str(e2.value) and "S3" in str(e2.value)
        # a cluster job is told where to fetch each version from
        doc = json.loads(next(iter(r.ds.engine_env(
            r.ds.resolve(spec, "alice", "", engine="slurm")).values())))
        assert [(d["env"], d["ref"]) for d in doc["datasets"]] == [
            ("ROTA_DATASET_A", "alice/a:v1"), ("ROTA_DATASET_B", "alice/b:v1")]
        assert doc["store"] == str(r.objects_root)
    finally:
        r.close()


# --- removal ----------------------------------------------------------------------------


def a_job(store: Store, *refs: str, user: str = "alice") -> int:
    [row] = store.add_jobs([JobSpec(command=["true"], datasets=list(refs))], user=user,
                           source="cli", now=NOW)
    return int(row.id)


def remove(reg: Registry, owner: str, name: str, version: str | None = None, *,
           user: str | None = None, admin: bool = False) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = asyncio.run(reg.ds.remove(
        owner=owner, name=name, version=version, user=user or owner, admin=admin))
    return got


def test_a_version_a_job_not_ended_reads_is_not_removed(reg: Registry) -> None:
    v1 = add(reg.ds, "alice", "corpus", corpus())["version"]
    job = a_job(reg.store, "alice/corpus:v1")
    assert reg.store.jobs_using(["alice/corpus:v1"]) == [(job, "alice/corpus:v1", "pending")]
    with pytest.raises(Conflict) as e:
        remove(reg, "alice", "corpus")
    assert f"{job} (pending)" in str(e.value)
    with pytest.raises(Conflict):
        remove(reg, "alice", "corpus", "v1")
    assert reg.objects.manifest(v1["key"]) is not None
    assert [r.version for r in reg.store.dataset_versions()] == [1]
    reg.store.transition(job, JobState.PENDING, JobState.CANCELLED, now=NOW)
    assert [v["ref"] for v in remove(reg, "alice", "corpus")] == ["alice/corpus:v1"]
    assert reg.objects.manifest(v1["key"]) is None
    assert reg.store.dataset_versions() == [] and reg.ds.versions == {}
    # the ended job still names what it read
    assert reg.store.jobs_using(["alice/corpus:v1"], live=False) == [
        (job, "alice/corpus:v1", "cancelled")]
    with pytest.raises(NotFound):
        remove(reg, "alice", "corpus")


def test_only_the_owner_or_an_admin_removes(reg: Registry) -> None:
    add(reg.ds, "alice", "corpus", corpus(), shared=True)
    with pytest.raises(Forbidden) as e:
        remove(reg, "alice", "corpus", user="bob")
    assert "only they or an admin" in str(e.value)
    assert len(reg.store.dataset_versions()) == 1
    assert [v["ref"] for v in remove(reg, "alice", "corpus", user="root", admin=True)] == [
        "alice/corpus:v1"]


def test_numbers_are_never_reused_and_a_removed_versions_content_revives_it(
        reg: Registry) -> None:
    made = [add(reg.ds, "alice", "corpus", corpus(str(n)))["version"] for n in range(3)]
    gone = remove(reg, "alice", "corpus", "v2")
    assert [v["ref"] for v in gone] == ["alice/corpus:v2"]
    assert reg.objects.manifest(made[1]["key"]) is None
    assert reg.objects.manifest(made[0]["key"]) is not None
    assert reg.objects.manifest(made[2]["key"]) is not None
    assert [r.version for r in reg.store.dataset_versions()] == [1, 3]
    with pytest.raises(NotFound):
        reg.ds.find("corpus:v2", "alice")
    new = add(reg.ds, "alice", "corpus", corpus("new"))
    assert new["made"] is True and new["version"]["version"] == 4  # not 2
    back = add(reg.ds, "alice", "corpus", corpus("1"))  # v2's content again
    assert back["made"] is True and back["version"]["version"] == 2
    assert back["version"]["digest"] == made[1]["digest"]
    assert reg.objects.manifest(back["version"]["key"]) is not None
    assert reg.ds.find("corpus:v2", "alice").digest == made[1]["digest"]
    assert [r.version for r in reg.store.dataset_versions()] == [1, 2, 3, 4]
    # all of it: every version goes; a later add starts after the highest number ever
    assert len(remove(reg, "alice", "corpus")) == 4
    assert add(reg.ds, "alice", "corpus", corpus("later"))["version"]["version"] == 5
    # a restarted registry reads the same versions from the store
    again = reg.make()
    try:
        assert sorted(again.versions) == ["alice/corpus:v5"]
    finally:
        again.close()


# --- jobs held until their versions are here --------------------------------------------


def test_a_waiting_job_is_held_until_its_version_is_fetched(reg: Registry) -> None:
    files = corpus()
    v1 = add(reg.ds, "alice", "text-mini", files)["version"]
    spec = reg.ds.resolve(JobSpec(command=["true"], datasets=["text-mini"]), "alice", "",
                          engine=None)
    assert spec.datasets == ["alice/text-mini:v1"]
    job = a_job(reg.store, *spec.datasets)
    reg.states[job] = JobState.PENDING
    reg.ds.want([(job, spec)])
    held = reg.ds.held()
    assert list(held) == [job]
    assert held[job].code is ReasonCode.DATA
    assert held[job].message.startswith("waits for its datasets: alice/text-mini:v1 (")
    assert "fetched to this machine" in held[job].message
    assert not reg.ds.cache.present(v1["digest"])
    with pytest.raises(Exception, match="not on this machine"):  # a launch now fails
        reg.ds.launch(job, spec)

    reg.loop.run_posted()  # the worker's fetch came back
    assert reg.ds.held() == {}
    assert reg.loop.kicks == 1  # a pass is asked for
    assert reg.ds.cache.present(v1["digest"])
    folder = reg.ds.cache.path(v1["digest"])
    assert {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in folder.rglob("*") if p.is_file()} == files
    assert reg.ds.views("alice", False)[0]["cached"] is True
    found = reg.ds.launch(job, spec)
    assert found == {"ROTA_DATASET_TEXT_MINI": str(folder)}
    assert reg.ds.pinned == {job: ("alice/text-mini:v1",)} and job not in reg.ds.waiting
    assert reg.ds.mounts(found) == {"/datasets/text_mini": str(folder)}
    reg.ds.ended(job, spec, waits=False)
    assert reg.ds.pinned == {}


def test_a_version_that_cannot_be_fetched_holds_its_job_saying_why(reg: Registry) -> None:
    files = {"a.txt": b"registered content\n"}
    v1 = add(reg.ds, "alice", "fragile", files)["version"]
    stored = reg.objects_root / v1["key"] / "files" / v1["digest"] / "a.txt"
    assert stored.read_bytes() == files["a.txt"]
    stored.chmod(0o644)
    stored.write_bytes(b"not what was stored\n")  # the store's copy went bad
    spec = JobSpec(command=["true"], datasets=["alice/fragile:v1"])
    reg.states[5] = JobState.PENDING
    reg.ds.want([(5, spec)])
    reg.loop.run_posted()
    held = reg.ds.held()
    assert held[5].code is ReasonCode.DATA
    assert "alice/fragile:v1 (" in held[5].message and "cannot be fetched yet" in held[5].message
    assert not reg.ds.cache.present(v1["digest"])  # never half there
    [(delay, retry)] = reg.loop.timers
    assert delay == RETRY_OTHER_S
    stored.write_bytes(files["a.txt"])
    retry()  # tried again: fetched
    reg.loop.run_posted()
    assert reg.ds.held() == {} and reg.ds.cache.present(v1["digest"])


def test_a_job_that_left_the_queue_is_no_longer_held(reg: Registry) -> None:
    add(reg.ds, "alice", "one", corpus("1"))
    add(reg.ds, "alice", "two", corpus("2"))
    reg.states.update({1: JobState.PENDING, 2: JobState.HELD})
    reg.ds.want([(1, JobSpec(command=["true"], datasets=["alice/one:v1"])),
                 (2, JobSpec(command=["true"], datasets=["alice/two:v1"]))])
    held = reg.ds.held()
    assert set(held) == {1, 2}
    # one fetch at a time, in the order they came: the second is queued meanwhile
    assert "alice/two:v1" in held[2].message and "queued to be fetched" in held[2].message
    reg.states[2] = JobState.CANCELLED
    assert set(reg.ds.held()) == {1} and 2 not in reg.ds.waiting
    reg.loop.run_posted()
    assert reg.ds.held() == {}


def test_a_job_not_read_back_yet_after_a_restart_stays_held(reg: Registry) -> None:
    """A restart reads the pending jobs page by page after the first pass: one whose state
    is not known yet is held, not forgotten, and so cannot start without its version."""
    add(reg.ds, "alice", "text-mini", corpus())
    job = a_job(reg.store, "alice/text-mini:v1")
    reg.ds.close()
    reg.states.pop(job, None)  # (its page not read yet)
    reg.ds = reg.make()
    first = reg.ds.held()
    assert first[job].code is ReasonCode.DATA and job in reg.ds.waiting
    reg.states[job] = JobState.PENDING  # its page read
    assert job in reg.ds.held()
    reg.loop.run_posted()
    assert reg.ds.held() == {}


def test_a_restarted_registry_holds_the_waiting_jobs_of_the_store(reg: Registry) -> None:
    """After a restart the jobs not ended that read a version are found in the store: the
    waiting ones are held until it is fetched."""
    v1 = add(reg.ds, "alice", "text-mini", corpus())["version"]
    job = a_job(reg.store, "alice/text-mini:v1")
    reg.ds.close()
    reg.states[job] = JobState.PENDING
    reg.ds = reg.make()
    assert reg.ds.waiting == {job: ("alice/text-mini:v1",)}
    held = reg.ds.held()
    assert held[job].code is ReasonCode.DATA and "alice/text-mini:v1" in held[job].message
    reg.loop.run_posted()
    assert reg.ds.held() == {} and reg.ds.cache.present(v1["digest"])
    # started again once more, the version is in the cache: nothing to wait for
    reg.ds.close()
    reg.ds = reg.make()
    assert reg.ds.held() == {} and v1["digest"] in reg.ds.ready


def test_removing_a_cached_version_takes_it_out_of_the_cache(reg: Registry) -> None:
    v1 = add(reg.ds, "alice", "text-mini", corpus())["version"]
    reg.states[3] = JobState.PENDING
    reg.ds.want([(3, JobSpec(command=["true"], datasets=["alice/text-mini:v1"]))])
    reg.loop.run_posted()
    assert reg.ds.cache.present(v1["digest"])
    reg.states[3] = JobState.COMPLETED
    remove(reg, "alice", "text-mini")
    assert not reg.ds.cache.present(v1["digest"]) and v1["digest"] not in reg.ds.ready


# --- a root daemon's cache: a private version is its owner's alone ----------------------

ACCOUNTS = {"alice": 4242, "bob": 4343}
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="a root daemon's cache: chown needs root")


def owned_registry(tmp: Path) -> Registry:
    r = Registry(tmp)
    r.ds.close()
    r.ds = Datasets(r.settings, r.store, lambda: NOW, post=r.loop.post, kick=r.loop.kick,
                    later=r.loop.later, objects=lambda: r.objects, state=r.states.get,
                    run_as=lambda user: RunAs(user, ACCOUNTS[user], ACCOUNTS[user],
                                              (ACCOUNTS[user],), f"/home/{user}", "/bin/sh"))
    r.ds.start()
    return r


def fetched(r: Registry, job: int, ref: str) -> Path:
    r.states[job] = JobState.PENDING
    spec = JobSpec(command=["true"], datasets=[ref])
    r.ds.want([(job, spec)])
    if r.ds.held():
        r.loop.run_posted()
    assert r.ds.held() == {}
    name = ref.partition("/")[2].partition(":")[0]
    return Path(r.ds.launch(job, spec)[env_name(name)])


@as_root
def test_on_a_root_daemon_a_private_version_is_its_owners_and_a_shared_one_everyones(
        tmp_path: Path) -> None:
    r = owned_registry(tmp_path)
    try:
        add(r.ds, "alice", "mine", corpus("private"))
        add(r.ds, "bob", "ours", corpus("shared"), shared=True)
        mine = fetched(r, 1, "alice/mine:v1")
        st = mine.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (4242, 4242, 0o500)
        train = (mine / "train.txt").stat()
        assert (train.st_uid, train.st_mode & 0o777) == (4242, 0o400)
        ours = fetched(r, 2, "bob/ours:v1")
        st = ours.stat()
        assert (st.st_uid, st.st_mode & 0o777) == (0, 0o555)
        assert (ours / "train.txt").stat().st_mode & 0o777 == 0o444
    finally:
        r.close()


@as_root
def test_the_same_content_in_two_users_private_datasets_is_readable_by_each(
        tmp_path: Path) -> None:
    r = owned_registry(tmp_path)
    try:
        add(r.ds, "alice", "corpus", corpus())
        add(r.ds, "bob", "corpus", corpus())  # the same public corpus, each privately
        alices = fetched(r, 1, "alice/corpus:v1")
        assert alices.stat().st_uid == 4242
        bobs = fetched(r, 2, "bob/corpus:v1")
        st = bobs.stat()
        assert st.st_uid == 4343 or st.st_mode & 0o005 == 0o005, \
            f"bob's job is given {bobs}, uid {st.st_uid}, mode {oct(st.st_mode & 0o777)}"
    finally:
        r.close()
