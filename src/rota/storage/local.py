"""A store on a local folder (or a filesystem every node mounts).

Layout under the root: ``<key>/MANIFEST.json`` and ``<key>/files/<digest>/<path>``, where
``<digest>`` is the manifest's :meth:`~rota.storage.manifest.Manifest.digest`. A publish
builds the files in ``.staging/<uuid>/``, renames that folder into place, then replaces the
manifest in one ``os.replace``: a reader finds the old manifest and its files, or the new
ones, never a mix and never nothing between two versions.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from rota.errors import NotFound, StorageError
from rota.storage._common import (
    FILES_DIR,
    check_key,
    copy_verified,
    fetch_into,
    open_staged,
    oserrors,
    select,
)
from rota.storage.manifest import MANIFEST_NAME, FileEntry, Manifest, safe_relpath

STAGING = ".staging"


class LocalStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root).absolute()
        self.url = str(self.root)

    # -- reading

    def manifest(self, key: str) -> Manifest | None:
        doc = self.root / check_key(key) / MANIFEST_NAME
        with oserrors(f"{self.url}: {key}"):
            try:
                data = doc.read_bytes()
            except (FileNotFoundError, NotADirectoryError):
                return None
        try:
            return Manifest.from_json(data)
        except StorageError as e:
            raise StorageError(f"{doc}: {e}") from None

    def fetch(self, key: str, dest: Path, paths: Sequence[str] | None = None) -> Manifest:
        m = self._published(key)
        where = f"{self.url}: {key}"
        entries = select(m.files, m.find, paths, where)
        version = self.root / key / FILES_DIR / m.digest()
        with oserrors(where):
            fetch_into(Path(dest), entries, lambda e: _open_file(version, e.path, where), where)
        return m

    def open(self, key: str, path: str, *, manifest: Manifest | None = None) -> BinaryIO:
        m = manifest or self._published(key)
        entry = m.find(safe_relpath(path))
        if entry is None:
            raise NotFound(f"{self.url}: {key}: no file {path!r} in its manifest")
        return _open_file(self.root / key / FILES_DIR / m.digest(), entry.path,
                          f"{self.url}: {key}")

    def keys(self, prefix: str = "") -> list[str]:
        return sorted(rel[:-1] for rel, folder in self._dirs(prefix)
                      if rel[:-1].startswith(prefix) and (folder / MANIFEST_NAME).is_file())

    def usage(self, prefix: str = "") -> int:
        return sum(m.total_size for k in self.keys(prefix) if (m := self.manifest(k)))

    def link(self, key: str, path: str, expires_s: float) -> str | None:
        check_key(key), safe_relpath(path)
        return None  # no server of its own: the daemon signs links to local files

    # -- writing

    def publish(self, key: str, staged: Path, manifest: Manifest, *,
                move: bool = False) -> None:
        """``staged``'s files as ``key``, all at once. ``move``: rename them in rather than
        copy (same filesystem; ``staged`` loses them)."""
        key, staged = check_key(key), Path(staged)
        where = f"{self.url}: publish {key}"
        with oserrors(where):
            old = self.manifest(key)
            version = manifest.digest()
            keydir = self.root / key
            target = keydir / FILES_DIR / version
            stage = self._aside("")
            doc = stage.with_name(f"{stage.name}.json")
            placed = False
            try:
                stage.mkdir()
                for entry in manifest.files:
                    self._put(staged, entry, stage, move=move, where=where)
                    os.utime(stage)  # a live stage: not an orphan to clean up
                _fsync_dirs(stage)
                _write_synced(doc, manifest.to_json())
                target.parent.mkdir(parents=True, exist_ok=True)
                if old is not None and old.digest() == version and target.is_dir():
                    shutil.rmtree(stage)  # the same files are in place already
                else:
                    if target.exists():  # an interrupted publish's leftover
                        self._discard(target)
                    os.utime(stage)
                    os.rename(stage, target)
                    placed = True
                    _fsync_dir(target.parent)
                os.replace(doc, keydir / MANIFEST_NAME)  # the moment it is published
                _fsync_dir(keydir)
            except Exception:
                shutil.rmtree(stage, ignore_errors=True)
                doc.unlink(missing_ok=True)
                if placed:
                    shutil.rmtree(target, ignore_errors=True)
                raise
            if old is not None and old.digest() != version:
                self._discard(keydir / FILES_DIR / old.digest())

    def delete(self, key: str) -> None:
        self._published(key)
        keydir = self.root / key
        with oserrors(f"{self.url}: delete {key}"):
            gone = self._aside("-deleted.json")
            os.rename(keydir / MANIFEST_NAME, gone)  # the moment it is gone
            gone.unlink()
            self._discard(keydir / FILES_DIR)
            for folder in [keydir, *keydir.parents]:  # empty folders that held only it
                if folder == self.root:
                    break
                try:
                    folder.rmdir()
                except OSError:
                    break

    def orphans(self, older_than_s: float, now: float) -> list[str]:
        """Leftovers of interrupted publishes and deletes older than ``older_than_s``:
        ``.staging/`` entries, and file versions no manifest names (paths under the root)."""
        cutoff = now - older_than_s
        found = [f"{STAGING}/{name}" for name in _old_entries(self.root / STAGING, cutoff)]
        for rel, folder in self._dirs(""):
            if not rel or not (folder / FILES_DIR).is_dir():
                continue
            try:
                m = self.manifest(rel[:-1])
            except StorageError:
                continue  # a damaged manifest: its files are left for a person to look at
            current = m.digest() if m else None
            found += [f"{rel}{FILES_DIR}/{name}"
                      for name in _old_entries(folder / FILES_DIR, cutoff) if name != current]
        return sorted(found)

    def remove_orphans(self, older_than_s: float, now: float) -> list[str]:
        """Removes what :meth:`orphans` finds; returns it."""
        found = self.orphans(older_than_s, now)
        with oserrors(f"{self.url}: remove orphans"):
            for rel in found:
                path = self.root / rel
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
        return found

    # -- helpers

    def _published(self, key: str) -> Manifest:
        m = self.manifest(key)
        if m is None:
            raise NotFound(f"{self.url}: no key {key!r}")
        return m

    def _put(self, staged: Path, entry: FileEntry, stage: Path, *, move: bool,
             where: str) -> None:
        dst = stage / entry.path
        dst.parent.mkdir(parents=True, exist_ok=True)
        with open_staged(staged, entry.path, where) as src:
            if move:  # checked where it is, then renamed in
                copy_verified(src, _Discard(), entry, where)
                try:
                    os.rename(staged / entry.path, dst)
                    _fsync_file(dst)
                    return
                except OSError as e:
                    if e.errno != errno.EXDEV:
                        raise
                    src.seek(0)  # another filesystem: copied after all
            with open(dst, "xb") as out:
                copy_verified(src, out, entry, where)
                out.flush()
                os.fsync(out.fileno())

    def _aside(self, suffix: str) -> Path:
        (self.root / STAGING).mkdir(parents=True, exist_ok=True)
        return self.root / STAGING / f"{uuid.uuid4().hex}{suffix}"

    def _discard(self, path: Path) -> None:
        """Out of readers' sight in one rename, then removed."""
        aside = self._aside("-old")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return
        shutil.rmtree(aside, ignore_errors=True)

    def _dirs(self, prefix: str) -> Iterator[tuple[str, Path]]:
        """The key namespace's folders (``rel`` ends with ``/``; the root's is ``""``)
        that can hold keys starting with ``prefix``; files/ and hidden folders are not."""
        stack = [("", self.root)]
        while stack:
            rel, folder = stack.pop()
            yield rel, folder
            try:
                entries = list(os.scandir(folder))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for e in entries:
                sub = f"{rel}{e.name}/"
                if (e.name != FILES_DIR and not e.name.startswith(".")
                        and e.is_dir(follow_symlinks=False)
                        and (sub.startswith(prefix) or prefix.startswith(sub))):
                    stack.append((sub, Path(e.path)))


class _Discard:
    def write(self, data: bytes) -> int:
        return len(data)


def _open_file(version: Path, path: str, where: str) -> BinaryIO:
    try:
        return open(os.open(version / path, os.O_RDONLY | os.O_NOFOLLOW), "rb")
    except FileNotFoundError:
        raise StorageError(f"{where}: {path} is missing from the store (deleted or "
                           "republished meanwhile?)") from None
    except OSError as e:
        raise StorageError(f"{where}: cannot read {path}: {e.strerror or e}") from None


def _old_entries(folder: Path, cutoff: float) -> list[str]:
    try:
        return [e.name for e in os.scandir(folder)
                if e.stat(follow_symlinks=False).st_mtime <= cutoff]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    _fsync(path, os.O_NOFOLLOW)


def _fsync_dir(path: Path) -> None:
    _fsync(path, os.O_DIRECTORY)


def _fsync_dirs(top: Path) -> None:
    """Every folder under ``top``: the renames into them are durable before the publish."""
    for folder, _, _ in os.walk(top):
        _fsync_dir(Path(folder))


