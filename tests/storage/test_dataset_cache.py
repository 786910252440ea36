"""The per-machine dataset cache: verified read-only versions by manifest digest, hits
without the store, refusal of a republished key, LRU eviction under a limit with kept
versions, processes racing for one version, and the leftovers of crashed fetches.

Against a local root and a real S3-protocol server (moto's, rota_testing.s3_server); the
S3 cases are skipped without boto3 and moto unless the run requires them."""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from rota.errors import NotFound, StorageError
from rota.storage import LocalStore, Manifest, ObjectStore, S3Store, build_manifest
from rota.storage.cache import LEFTOVER_AGE_S, CacheEntry, CacheFull, DatasetCache
from rota.storage.cache_seal import seal_of
from rota_testing import moto_s3

try:
    import boto3
    import moto.server  # noqa: F401 - s3_server's
except ImportError:
    if os.environ.get("ROTA_REQUIRE_TORCH"):
        raise
    boto3 = None

BUCKET = "rota-dataset-cache"
FILES = {"train/0001.bin": random.Random(3).randbytes(300_000), "train/0002.bin": b"two",
         "labels.csv": b"a,1\nb,2\n", "empty": b"", ".hidden": b"dot"}
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    yield from moto_s3(tmp_path_factory, BUCKET)


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> ObjectStore:
    if request.param == "local":
        return LocalStore(tmp_path / "store")
    env: dict[str, str] = request.getfixturevalue("aws")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return S3Store(BUCKET, f"t/{uuid.uuid4().hex}", region="us-east-1",
                   endpoint_url=env["AWS_ENDPOINT_URL_S3"])


def publish(store: ObjectStore, tmp_path: Path, key: str, files: dict[str, bytes]) -> Manifest:
    folder = tmp_path / f"staged-{uuid.uuid4().hex[:8]}"
    for rel, body in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(body)
    m = build_manifest(folder, now=time.time())
    store.publish(key, folder, m)
    return m


def contents(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in folder.rglob("*") if p.is_file()}


def modes(folder: Path) -> set[tuple[str, int]]:
    """(kind, permission bits) of everything in the tree, the top included."""
    return {("dir" if p.is_dir() else "file", stat.S_IMODE(p.lstat().st_mode))
            for p in [folder, *folder.rglob("*")]}


def hidden(cache: DatasetCache, name: str) -> list[str]:
    folder = cache.root / name
    return sorted(os.listdir(folder)) if folder.exists() else []


def test_fetch_makes_a_read_only_verified_copy(store: ObjectStore, tmp_path: Path) -> None:
    m = publish(store, tmp_path, "ds/alice/imagenet", FILES)
    cache = DatasetCache(tmp_path / "cache", None)
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o711
    assert not cache.present(m.digest()) and cache.entries() == []
    got = cache.fetch(store, "ds/alice/imagenet", m.digest(), now=1000.0)
    assert got == tmp_path / "cache" / m.digest() == cache.path(m.digest())
    assert contents(got) == FILES
    assert modes(got) == {("dir", 0o555), ("file", 0o444)}
    assert cache.present(m.digest())
    entry = CacheEntry(m.digest(), m.total_size, len(FILES), 1000.0, seal_of(got))
    assert cache.entries() == [entry] and cache.entry(m.digest()) == entry
    assert cache.used() == m.total_size == sum(map(len, FILES.values()))
    sidecar = json.loads((cache.root / ".meta" / f"{m.digest()}.json").read_text())
    assert sidecar == {"size": m.total_size, "files": len(FILES), "used_at": 1000.0,
                       "seal": entry.seal}
    assert hidden(cache, ".incoming") == [] and hidden(cache, ".trash") == []
    assert sorted(os.listdir(cache.root)) == sorted([m.digest(), ".incoming", ".lock",
                                                      ".meta"])


def test_a_second_fetch_is_a_hit_that_needs_no_store(store: ObjectStore, tmp_path: Path) -> None:
    m = publish(store, tmp_path, "ds/k", FILES)
    cache = DatasetCache(tmp_path / "cache", None)
    first = cache.fetch(store, "ds/k", m.digest(), now=10.0)
    store.delete("ds/k")  # a hit would fail if it asked the store anything
    again = DatasetCache(tmp_path / "cache", None).fetch(store, "ds/k", m.digest(), now=20.0)
    assert again == first and contents(again) == FILES
    sealed = seal_of(first)
    assert cache.entries() == [CacheEntry(m.digest(), m.total_size, len(FILES), 20.0, sealed)]
    cache.touch(m.digest(), now=30.0)
    assert cache.entry(m.digest()) == CacheEntry(m.digest(), m.total_size, len(FILES), 30.0,
                                                 sealed)
    with pytest.raises(NotFound, match="no key 'ds/k'"):  # not cached: the store is asked
        cache.fetch(store, "ds/k", "0" * 64, now=40.0)


def test_a_republished_key_is_refused_for_the_old_version(
        store: ObjectStore, tmp_path: Path) -> None:
    v1 = publish(store, tmp_path, "ds/k", {"a.txt": b"one"})
    v2 = publish(store, tmp_path, "ds/k", {"a.txt": b"two"})
    cache = DatasetCache(tmp_path / "cache", None)
    with pytest.raises(StorageError, match=f"holds version {v2.digest()[:12]}, not "
                                           f"{v1.digest()[:12]}: it was republished"):
        cache.fetch(store, "ds/k", v1.digest(), now=1.0)
    assert not cache.present(v1.digest()) and cache.entries() == []
    assert contents(cache.fetch(store, "ds/k", v2.digest(), now=2.0)) == {"a.txt": b"two"}


def test_a_republish_between_manifest_and_fetch_is_refused(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    v1 = publish(store, tmp_path, "ds/k", {"a.txt": b"one"})

    class Racing(LocalStore):
        def fetch(self, key: str, dest: Path, paths: Any = None) -> Manifest:
            publish(store, tmp_path, key, {"a.txt": b"two"})  # just after manifest()
            return super().fetch(key, dest, paths)

    cache = DatasetCache(tmp_path / "cache", None)
    with pytest.raises(StorageError, match="it was republished"):
        cache.fetch(Racing(store.root), "ds/k", v1.digest(), now=1.0)
    assert not cache.present(v1.digest()) and cache.entries() == []
    assert hidden(cache, ".incoming") == [] and hidden(cache, ".meta") == []


def test_a_file_damaged_in_the_store_fails_and_leaves_nothing(
        store: ObjectStore, tmp_path: Path) -> None:
    m = publish(store, tmp_path, "ds/k", FILES)
    rel = f"ds/k/files/{m.digest()}/labels.csv"
    if isinstance(store, LocalStore):
        (store.root / rel).write_bytes(b"a,1\nb,3\n")
    else:
        assert isinstance(store, S3Store)
        boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"],
                     region_name="us-east-1").put_object(
            Bucket=BUCKET, Key=f"{store.prefix}/{rel}", Body=b"a,1\nb,3\n")
    cache = DatasetCache(tmp_path / "cache", None)
    with pytest.raises(StorageError, match=r"labels\.csv does not match its manifest"):
        cache.fetch(store, "ds/k", m.digest(), now=1.0)
    assert not cache.path(m.digest()).exists() and not cache.present(m.digest())
    assert hidden(cache, ".incoming") == [] and hidden(cache, ".meta") == []
    assert cache.entries() == [] and cache.used() == 0


def test_a_process_killed_mid_fetch_leaves_no_version_and_its_leftovers_are_cleaned(
        tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    m = publish(store, tmp_path, "ds/k", FILES)
    cache = DatasetCache(tmp_path / "cache", None)
    script = """if True:
        import os, sys, time
        from pathlib import Path
        from rota.storage import LocalStore, _common
        from rota.storage.cache import DatasetCache
        real = _common.copy_verified
        def die_after_one(*args):
            real(*args)
            os._exit(9)  # killed: no handler, no finally runs
        _common.copy_verified = die_after_one
        DatasetCache(Path(sys.argv[1]), None).fetch(
            LocalStore(Path(sys.argv[2])), "ds/k", sys.argv[3], now=time.time())
    """
    done = subprocess.run([sys.executable, "-c", script, str(cache.root), str(store.root),
                           m.digest()], env={**os.environ, "PYTHONPATH": str(SRC)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 9, done.stderr
    assert not cache.present(m.digest()) and cache.entries() == []
    left = hidden(cache, ".incoming")
    assert len(left) == 2 and any(n.endswith(".lock") for n in left) \
        and any(".part-" in n for n in left)  # the store's part folder and our lock
    assert cache.clean_leftovers(time.time()) == []  # young: maybe a live download
    assert cache.clean_leftovers(time.time() + LEFTOVER_AGE_S + 5) == \
        sorted(f".incoming/{n}" for n in left)
    assert hidden(cache, ".incoming") == []
    assert contents(cache.fetch(store, "ds/k", m.digest(), now=1.0)) == FILES


def test_clean_leftovers_spares_live_downloads_and_present_versions(tmp_path: Path) -> None:
    import fcntl

    store = LocalStore(tmp_path / "store")
    m = publish(store, tmp_path, "ds/k", {"a": b"a"})
    cache = DatasetCache(tmp_path / "cache", None)
    cache.fetch(store, "ds/k", m.digest(), now=1.0)
    d = "a" * 64
    for folder in (".incoming/" + f"{d}-dead", ".incoming/" + f".{d}-dead.part-7",
                   ".incoming/" + f"{d}-live", ".trash/" + f"{d}-evicted"):
        (cache.root / folder / "sub").mkdir(parents=True)
        (cache.root / folder / "sub" / "f").write_bytes(b"x")
        for p in (cache.root / folder / "sub", cache.root / folder):
            os.chmod(p, 0o555)  # a sealed version's modes: removed all the same
    (cache.root / ".incoming" / f"{d}-dead.lock").touch()
    (cache.root / ".meta" / f"{d}.json").write_text("{}")  # its version never arrived
    live = os.open(cache.root / ".incoming" / f"{d}-live.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(live, fcntl.LOCK_EX)  # another process downloading, for hours
    try:
        assert cache.clean_leftovers(time.time()) == [f".meta/{d}.json"]
        later = time.time() + LEFTOVER_AGE_S + 5
        assert cache.clean_leftovers(later) == sorted([
            f".incoming/{d}-dead", f".incoming/.{d}-dead.part-7", f".incoming/{d}-dead.lock",
            f".trash/{d}-evicted"])
    finally:
        os.close(live)
    assert hidden(cache, ".incoming") == [f"{d}-live", f"{d}-live.lock"]
    assert hidden(cache, ".trash") == [] and hidden(cache, ".meta") == [f"{m.digest()}.json"]
    assert cache.present(m.digest()) and contents(cache.path(m.digest())) == {"a": b"a"}
    assert cache.clean_leftovers(time.time() + LEFTOVER_AGE_S + 5) == [
        f".incoming/{d}-live", f".incoming/{d}-live.lock"]  # its process is gone now


def sized(tmp_path: Path, store: LocalStore, *names: str, size: int = 100) -> dict[str, str]:
    """Datasets of ``size`` bytes each: name -> digest."""
    return {n: publish(store, tmp_path, f"ds/{n}", {"data": n.encode() * (size // len(n))})
            .digest() for n in names}


def test_least_recently_used_versions_are_evicted_first_and_kept_ones_never(
        tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    d = sized(tmp_path, store, "a", "b", "c", "d")
    cache = DatasetCache(tmp_path / "cache", 250)
    cache.fetch(store, "ds/a", d["a"], now=1.0)
    cache.fetch(store, "ds/b", d["b"], now=2.0)
    cache.touch(d["a"], now=3.0)  # b is now the least recently used
    cache.fetch(store, "ds/c", d["c"], now=4.0)
    assert [e.digest for e in cache.entries()] == [d["a"], d["c"]]
    assert not cache.present(d["b"]) and cache.used() == 200
    assert not (cache.root / ".meta" / f"{d['b']}.json").exists()
    cache.touch(d["a"], now=5.0)  # c is the least recently used, but the job keeps it
    cache.fetch(store, "ds/d", d["d"], keep={d["c"]}, now=6.0)
    assert [e.digest for e in cache.entries()] == [d["c"], d["d"]]
    assert hidden(cache, ".trash") == []
    # several at once, in LRU order, only as many as needed
    big = DatasetCache(tmp_path / "big", 300)
    for i, n in enumerate("abc"):
        big.fetch(store, f"ds/{n}", d[n], now=float(i))
    assert big.make_room(50, keep=(), now=9.0) == [d["a"]]
    assert big.make_room(150, keep={d["b"]}, now=9.0) == [d["c"]]
    assert [e.digest for e in big.entries()] == [d["b"]]
    assert big.make_room(200, keep=(), now=9.0) == []  # fits already
    assert DatasetCache(tmp_path / "unbounded", None).make_room(10**15, (), 9.0) == []


def test_cache_full_when_kept_versions_fill_it_and_nothing_is_evicted(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    d = sized(tmp_path, store, "a", "b", "c")
    cache = DatasetCache(tmp_path / "cache", 250)
    cache.fetch(store, "ds/a", d["a"], now=1.0)
    cache.fetch(store, "ds/b", d["b"], now=2.0)
    with pytest.raises(CacheFull) as e:
        cache.fetch(store, "ds/c", d["c"], keep={d["a"], d["b"]}, now=3.0)
    assert str(e.value) == (
        f"dataset cache {cache.root}: 100 bytes cannot fit under its limit of 250 bytes: "
        "versions kept for the same job hold 200 bytes (raise the limit, or use fewer or "
        "smaller datasets at once)")
    assert isinstance(e.value, StorageError) and not e.value.passing
    assert [x.digest for x in cache.entries()] == [d["a"], d["b"]]  # nothing evicted
    assert not cache.present(d["c"]) and hidden(cache, ".incoming") == []
    with pytest.raises(CacheFull, match="versions kept for the same job hold 100 bytes"):
        cache.make_room(200, keep={d["b"]}, now=3.0)  # evicting a alone would not do
    assert cache.present(d["a"]) and cache.present(d["b"])
    cache.fetch(store, "ds/c", d["c"], keep={d["a"]}, now=4.0)  # b may go: it fits
    assert [x.digest for x in cache.entries()] == [d["a"], d["c"]]


HOLD = ("import sys, time; from pathlib import Path; from rota.storage.cache import "
        "DatasetCache; DatasetCache(Path(sys.argv[1]), None).hold(sys.argv[2]); "
        "print('held', flush=True); sys.stdin.read()")


def test_a_version_another_process_reads_is_never_evicted(tmp_path: Path) -> None:
    """Another job of the node holds its version (rota.storage.job_fetch does, through its
    command): eviction passes it over, and says it may fit later when only held versions
    stand in the way; once that process ends, the version may go."""
    store = LocalStore(tmp_path / "store")
    d = sized(tmp_path, store, "a", "b", "c")
    cache = DatasetCache(tmp_path / "cache", 250)
    cache.fetch(store, "ds/a", d["a"], now=1.0)
    cache.fetch(store, "ds/b", d["b"], now=2.0)
    reader = subprocess.Popen([sys.executable, "-c", HOLD, str(cache.root), d["a"]],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "held\n"
        cache.fetch(store, "ds/c", d["c"], now=3.0)  # a is older, but read: b goes
        assert [e.digest for e in cache.entries()] == [d["a"], d["c"]]
        with pytest.raises(StorageError) as e:  # c is this job's; a is the other's
            cache.make_room(100, keep={d["c"]}, now=4.0)
        assert e.value.passing and not isinstance(e.value, CacheFull)
        assert "while other jobs here read 100 bytes of it; it may once they end" \
            in str(e.value)
        assert cache.present(d["a"])
    finally:
        reader.communicate("")  # ends: its lock goes with it
    assert cache.make_room(100, keep={d["c"]}, now=5.0) == [d["a"]]
    mine = cache.hold(d["c"])  # this process's own hold counts too
    try:
        with pytest.raises(StorageError, match="other jobs here read"):
            cache.make_room(200, keep=(), now=6.0)
    finally:
        os.close(mine)
    assert cache.make_room(200, keep=(), now=7.0) == [d["c"]]


def test_a_need_over_the_limit_is_refused_at_once(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    d = sized(tmp_path, store, "a")
    huge = publish(store, tmp_path, "ds/huge", {"data": b"h" * 5000}).digest()
    cache = DatasetCache(tmp_path / "cache", 1024 + 512)
    cache.fetch(store, "ds/a", d["a"], now=1.0)
    with pytest.raises(CacheFull) as e:
        cache.make_room(3000, keep=(), now=2.0)
    assert "2.9K (3000 bytes) cannot fit under its limit of 1.5K (1536 bytes): versions " \
        "kept for the same job hold 0 bytes" in str(e.value)
    with pytest.raises(CacheFull, match=r"4\.9K \(5000 bytes\) cannot fit"):
        cache.fetch(store, "ds/huge", huge, now=3.0)
    assert [x.digest for x in cache.entries()] == [d["a"]]  # not evicted for nothing
    assert hidden(cache, ".incoming") == [] and hidden(cache, ".trash") == []


def test_two_processes_fetching_one_version_end_with_one_good_copy(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    m = publish(store, tmp_path, "ds/k", FILES)
    root, sync = tmp_path / "cache", tmp_path / "sync"
    sync.mkdir()
    # each waits, its download complete, for the other's: both must place it, one wins
    script = """if True:
        import os, sys, time
        from pathlib import Path
        from rota.storage import LocalStore
        from rota.storage.cache import DatasetCache
        root, store_root, digest, sync = sys.argv[1:]
        store = LocalStore(Path(store_root))
        real = store.fetch
        def fetch(key, dest, paths=None):
            m = real(key, dest, paths)
            Path(sync, str(os.getpid())).touch()
            deadline = time.time() + 60
            while len(os.listdir(sync)) < 2 and time.time() < deadline:
                time.sleep(0.01)
            return m
        store.fetch = fetch
        print(DatasetCache(Path(root), 10**9).fetch(store, "ds/k", digest, now=time.time()))
    """
    procs = [subprocess.Popen([sys.executable, "-c", script, str(root), str(store.root),
                               m.digest(), str(sync)], env={**os.environ, "PYTHONPATH": str(SRC)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert len(os.listdir(sync)) == 2  # both really downloaded it
    assert {out.strip() for out, _ in outs} == {str(root / m.digest())}
    cache = DatasetCache(root, None)
    assert contents(cache.path(m.digest())) == FILES
    assert modes(cache.path(m.digest())) == {("dir", 0o555), ("file", 0o444)}
    assert [e.digest for e in cache.entries()] == [m.digest()]
    assert hidden(cache, ".incoming") == [] and hidden(cache, ".trash") == []
    assert sorted(p for p in os.listdir(root) if not p.startswith(".")) == [m.digest()]


def test_threads_of_one_process_share_a_cache(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    d = sized(tmp_path, store, "a", "b", "c", "d", size=1000)
    cache = DatasetCache(tmp_path / "cache", 2500)
    start = threading.Barrier(8)

    def one(n: str) -> Path:
        start.wait()
        return cache.fetch(store, f"ds/{n}", d[n], keep={d[n]}, now=time.time())

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, ["a", "a", "a", "a", "b", "b", "c", "c"]))
    assert got == [cache.path(d[n]) for n in "aaaabbcc"]
    assert cache.used() <= 3000 and len(cache.entries()) >= 2
    for e in cache.entries():
        assert contents(cache.path(e.digest)) == {
            "data": next(n for n in d if d[n] == e.digest).encode() * 1000}
    assert hidden(cache, ".incoming") == [] and hidden(cache, ".trash") == []


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_private_version_belongs_to_its_owner_alone(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    m = publish(store, tmp_path, "ds/k", FILES)
    cache = DatasetCache(tmp_path / "cache", 10**6)
    got = cache.fetch(store, "ds/k", m.digest(), now=1.0, owner=(4321, 4322))
    assert modes(got) == {("dir", 0o500), ("file", 0o400)}
    assert {(p.lstat().st_uid, p.lstat().st_gid) for p in [got, *got.rglob("*")]} == \
        {(4321, 4322)}
    assert contents(got) == FILES
    assert cache.make_room(10**6, keep=(), now=2.0) == [m.digest()]  # removable still
    assert not got.exists() and hidden(cache, ".trash") == []


@pytest.mark.parametrize("digest", ["", "abc", "A" * 64, "g" * 64, "../" + "a" * 61,
                                    "a" * 65])
def test_a_digest_that_is_not_64_lowercase_hex_is_refused(tmp_path: Path, digest: str) -> None:
    cache = DatasetCache(tmp_path / "cache", None)
    for call in (lambda: cache.path(digest), lambda: cache.present(digest),
                 lambda: cache.touch(digest, 1.0),
                 lambda: cache.fetch(LocalStore(tmp_path / "s"), "k", digest, now=1.0)):
        with pytest.raises(StorageError, match="is not a manifest digest"):
            call()


def test_a_lost_sidecar_is_rebuilt_from_the_files(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    m = publish(store, tmp_path, "ds/k", FILES)
    cache = DatasetCache(tmp_path / "cache", None)
    cache.fetch(store, "ds/k", m.digest(), now=1.0)
    (cache.root / ".meta" / f"{m.digest()}.json").unlink()
    e = cache.entry(m.digest())
    assert e is not None and (e.size, e.files) == (m.total_size, len(FILES))
    cache.touch(m.digest(), now=7.0)
    assert cache.entries() == [CacheEntry(m.digest(), m.total_size, len(FILES), 7.0)]
    with pytest.raises(NotFound, match="no version"):
        cache.touch("b" * 64, now=1.0)
