"""A cached version changed after it was placed is found before its next use and fetched
again; an unchanged one is used as it is, without asking the store (issue 36: a root job,
or the owner of a private copy, can write into a read-only version)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rota.storage import LocalStore, build_manifest
from rota.storage.cache import DatasetCache

FILES = {"train/0001.bin": b"\x00" * 4096 + b"first shard", "train/0002.bin": b"two",
         "labels.csv": b"a,1\nb,2\n"}


def _writable(path: Path) -> None:
    """What a job that may write there does first (root needs nothing)."""
    if os.geteuid() != 0:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)


def _flip_a_byte(v: Path) -> None:
    f = v / "train" / "0001.bin"
    _writable(f)
    with open(f, "r+b") as out:
        out.write(b"\x01")  # the same size


def _chmod(v: Path) -> None:
    os.chmod(v / "labels.csv", 0o666)


def _add(v: Path) -> None:
    _writable(v / "train")
    (v / "train" / "0003.bin").write_bytes(b"new")


def _remove(v: Path) -> None:
    _writable(v / "train")
    (v / "train" / "0002.bin").unlink()


def _rename(v: Path) -> None:
    _writable(v / "train")
    os.rename(v / "train" / "0002.bin", v / "train" / "0009.bin")


def _replace_keeping_mtime(v: Path) -> None:
    """Another file of the same size put in its place, its mtime set to the old one."""
    f = v / "labels.csv"
    old = f.stat()
    _writable(v)
    aside = v / ".labels.new"
    aside.write_bytes(b"a,9\nb,9\n")
    os.utime(aside, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.rename(aside, f)


def _rewrite_keeping_mtime(v: Path) -> None:
    """The same file (inode) rewritten, its mtime set back: only its ctime tells."""
    f = v / "labels.csv"
    old = f.stat()
    _writable(f)
    f.write_bytes(b"a,9\nb,9\n")
    os.utime(f, ns=(old.st_atime_ns, old.st_mtime_ns))
    if os.geteuid() != 0:
        os.chmod(f, 0o444)


def _hard_link(v: Path) -> None:
    """A second name for a file outside the version (to write it through later)."""
    os.link(v / "labels.csv", v.parent / "kept-link")


CHANGES: dict[str, Callable[[Path], None]] = {
    "a changed byte": _flip_a_byte, "a changed mode": _chmod, "an added file": _add,
    "a removed file": _remove, "a renamed file": _rename,
    "a replaced file with its old mtime": _replace_keeping_mtime,
    "a rewritten file with its old mtime": _rewrite_keeping_mtime,
    "a hard link": _hard_link}


def _contents(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def placed(tmp_path: Path) -> tuple[LocalStore, DatasetCache, str]:
    store = LocalStore(tmp_path / "store")
    staged = tmp_path / "staged"
    for rel, body in FILES.items():
        (staged / rel).parent.mkdir(parents=True, exist_ok=True)
        (staged / rel).write_bytes(body)
    manifest = build_manifest(staged, now=time.time())
    store.publish("ds/k", staged, manifest)
    cache = DatasetCache(tmp_path / "cache", None)
    cache.fetch(store, "ds/k", manifest.digest(), now=1.0)
    return store, cache, manifest.digest()


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_version_changed_after_it_was_placed_is_fetched_again(
        placed: tuple[LocalStore, DatasetCache, str], change: str) -> None:
    store, cache, digest = placed
    assert cache.intact(digest)
    CHANGES[change](cache.path(digest))
    assert cache.present(digest) and not cache.intact(digest)
    told: list[str] = []
    got = cache.fetch(store, "ds/k", digest, now=2.0, changed=told.append)
    assert told == [digest]
    assert got == cache.path(digest) and _contents(got) == FILES
    assert cache.intact(digest)
    assert os.listdir(cache.root / ".trash") == []  # the changed copy is gone


def test_an_unchanged_version_is_used_as_it_is_without_the_store(
        placed: tuple[LocalStore, DatasetCache, str]) -> None:
    store, cache, digest = placed
    before = os.stat(cache.path(digest) / "labels.csv")
    assert _contents(cache.path(digest)) == FILES  # reading changes nothing that counts
    store.delete("ds/k")  # a second fetch would fail if it asked the store anything
    told: list[str] = []
    again = DatasetCache(cache.root, None).fetch(store, "ds/k", digest, now=3.0,
                                                 changed=told.append)
    assert told == [] and again == cache.path(digest)
    assert os.stat(again / "labels.csv").st_ino == before.st_ino
    assert cache.intact(digest) and cache.entry(digest).used_at == 3.0  # type: ignore[union-attr]


def test_a_version_without_a_seal_is_not_trusted(
        placed: tuple[LocalStore, DatasetCache, str]) -> None:
    """Its sidecar lost (or written by a Rota that kept no seal): fetched again once."""
    store, cache, digest = placed
    sidecar = cache.root / ".meta" / f"{digest}.json"
    doc = json.loads(sidecar.read_text())
    del doc["seal"]
    sidecar.write_text(json.dumps(doc))
    assert cache.present(digest) and not cache.intact(digest)
    told: list[str] = []
    cache.fetch(store, "ds/k", digest, now=2.0, changed=told.append)
    assert told == [digest] and cache.intact(digest)


def test_a_version_that_is_not_here_is_not_intact(tmp_path: Path) -> None:
    assert not DatasetCache(tmp_path / "cache", None).intact("0" * 64)
