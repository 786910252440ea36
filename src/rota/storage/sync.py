"""A folder kept in step with an S3 prefix, file by file, as plain objects (what ``aws s3``
sees): ``<prefix>/<path below the folder>``. Beside the folder lives an index (path ->
size, ETag, local mtime_ns) of how both sides were when they last matched; a sync
compares each side with it to learn what changed where, so nothing unchanged is sent
again, and a deletion is carried over only for a file the index knew.

- :func:`sync_down` brings what changed in the bucket since the index: new or changed
  objects are downloaded, files the index had that the bucket no longer has are removed.
  A file changed here too is never overwritten nor removed: it is kept (and goes up at the
  next :func:`sync_up`), unless both sides hold the same bytes.
- :func:`sync_up` sends what changed here since the index: new or changed files are
  uploaded, objects of files the index had that are gone here are deleted (only while
  the object is still the one the index knew: a newer one comes down next time). An
  object that changed in the bucket too (another machine's, or a cluster job's, copy
  sent it) is not lost to this one: it is first copied, in the bucket, to a conflict name
  beside it (``name.sync-conflict-YYYYMMDD-HHMMSS-ETAG.ext``, as Syncthing names them),
  which the next :func:`sync_down` brings here.

A file's mode goes up as the object's ``mode`` metadata (rclone's form); one that was
executable comes down executable where it is readable (a change of mode alone, with no new
bytes, is not sent). Links are never followed (nor uploaded), and neither special files;
every local path is walked through directory descriptors opened with ``O_NOFOLLOW``, so a
link swapped in meanwhile cannot lead a sync outside the folder. Given the folder's owner's
rights (``files``: rota.storage.owner_files), a root daemon walks, reads and removes
there with them: nothing the owner could not read goes up (a hard link to another
account's file included), whatever is swapped in when. A download is written
aside (in ``staging``) and renamed into place: a file is whole or absent. Both functions
change ``index`` in place as each file is done, so that an index saved after a failure is
still true of what was done. Errors are Rota's (``rota.storage.s3_edge.translate_error``).
The index is rota.storage.sync_index; the bucket's side, rota.storage.sync_remote."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rota.errors import NotFound, StorageError
from rota.storage.manifest import CHUNK
from rota.storage.owner_files import OwnerFiles
from rota.storage.s3_edge import _edge
from rota.storage.s3_transfers import MULTIPART_CHUNK
from rota.storage.sync_index import Index, Indexed
from rota.storage.sync_remote import Remote

#: S3's most parts of one upload (boto3 doubles the part size while there would be more)
MAX_PARTS = 10_000
#: the daemon's own rights (a folder of its own, or a daemon that is not root)
OWN = OwnerFiles(None)
#: how deep a workspace's folders are walked (deeper ones are passed over, and named)
MAX_DEPTH = 256
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass
class Counts:
    """What one sync did (tests count transfers with it; the log tells it)."""

    downloaded: int = 0
    uploaded: int = 0
    moved_bytes: int = 0
    removed_here: int = 0  # local files removed: gone from the bucket
    removed_there: int = 0  # objects deleted: gone from here
    adopted: int = 0  # the same bytes on both sides: indexed without a transfer
    kept: list[str] = field(default_factory=list)  # changed on both sides: this copy kept
    # changed on both sides when this copy went up: the bucket's kept as (path, copy)
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # links, special files, ... (why)

    @property
    def transfers(self) -> int:
        return self.downloaded + self.uploaded

    def text(self) -> str:
        parts = [f"{n} {what}" for n, what in (
            (self.downloaded, "downloaded"), (self.uploaded, "uploaded"),
            (self.removed_here, "removed here"), (self.removed_there, "removed there"),
            (self.adopted, "found equal"), (len(self.kept), "kept (changed on both sides)"),
            (len(self.conflicts), "kept beside as conflicts"),
            (len(self.skipped), "skipped")) if n]
        return ", ".join(parts) or "nothing to do"


# --- the folder -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Local:
    size: int
    mtime_ns: int
    uid: int


def walk(folder: Path, skipped: list[str] | None = None) -> dict[str, Local]:
    """Path -> (size, mtime_ns, uid) of the regular files under ``folder``; links and
    special files are passed over (named in ``skipped``), as are names that cannot be an
    object's key (not UTF-8). An absent folder holds nothing."""
    found: dict[str, Local] = {}
    try:
        top = os.open(folder, _DIR_FLAGS)
    except FileNotFoundError:
        return found
    except OSError as e:
        raise StorageError(f"{folder}: cannot be read: {e.strerror or e}") from None
    note = skipped.append if skipped is not None else (lambda _: None)

    def visit(fd: int, rel: str, depth: int) -> None:
        with os.scandir(fd) as it:
            entries = list(it)
        for entry in entries:
            name = entry.name
            path = rel + name
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                note(f"{path.encode('utf-8', 'replace').decode()}: not a UTF-8 name")
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # gone meanwhile
            if stat.S_ISREG(st.st_mode):
                found[path] = Local(st.st_size, st.st_mtime_ns, st.st_uid)
            elif stat.S_ISDIR(st.st_mode):
                if depth >= MAX_DEPTH:
                    note(f"{path}/: deeper than {MAX_DEPTH} folders")
                    continue
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    continue
                except OSError as e:  # swapped for a link meanwhile (ELOOP), unreadable
                    note(f"{path}/: {e.strerror or e}")
                    continue
                try:
                    visit(sub, path + "/", depth + 1)
                except OSError as e:  # unreadable: passed over, and named
                    note(f"{path}/: {e.strerror or e}")
                finally:
                    os.close(sub)
            else:
                note(f"{path}: a link, not followed" if stat.S_ISLNK(st.st_mode)
                     else f"{path}: not a regular file")

    try:
        visit(top, "", 0)
    except OSError as e:
        raise StorageError(f"{folder}: cannot be read: {e.strerror or e}") from None
    finally:
        os.close(top)
    return found


@contextlib.contextmanager
def _parent(folder: Path, rel: str, *, make: bool = False,
            owner: tuple[int, int] | None = None) -> Iterator[int | None]:
    """A descriptor of the folder that holds ``rel`` (each step opened without following
    a link; made when ``make``, given to ``owner``), or None when the way there is not
    folders (a link, a file) or, without ``make``, does not exist."""
    parts = rel.split("/")[:-1]
    fd = os.open(folder, _DIR_FLAGS)
    try:
        for part in parts:
            try:
                sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not make:
                    yield None
                    return
                os.mkdir(part, 0o700, dir_fd=fd)
                sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
                if owner is not None:
                    os.fchown(sub, *owner)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    yield None
                    return
                raise
            os.close(fd)
            fd = sub
        yield fd
    finally:
        os.close(fd)


def _same(st: os.stat_result, was: Indexed | Local) -> bool:
    return stat.S_ISREG(st.st_mode) and st.st_size == was.size \
        and st.st_mtime_ns == was.mtime_ns


def _same_bytes(folder: Path, rel: str, size: int, etag: str, files: OwnerFiles = OWN
                ) -> bool | None:
    """Whether the local file holds the bytes of an object of this size and ETag; None
    when that cannot be told without the object's bytes. A single-part upload's ETag is
    the MD5 of its bytes; a multipart one's (``MD5-N``) is the MD5 of its parts' MD5s,
    told here for parts of boto3's and the AWS CLI's size (8 MiB, doubled while more than
    10,000 parts), as Rota's own uploads are."""
    tag = etag.strip('"')
    md5, dash, parts = tag.partition("-")
    if len(md5) != 32 or (dash and not parts.isdigit()):
        return None
    part = MULTIPART_CHUNK
    while dash and -(-size // part) > MAX_PARTS:
        part *= 2
    if dash and -(-size // part) != int(parts):
        return None  # parts of another size
    try:
        f = files.run(_open_file, folder, rel)
    except OSError:
        return None
    if f is None:
        return None
    with os.fdopen(f, "rb") as src:
        if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
            return None
        if not dash:
            h, n = hashlib.md5(usedforsecurity=False), 0
            while chunk := src.read(CHUNK):
                h.update(chunk)
                n += len(chunk)
            return n == size and h.hexdigest() == md5
        digests, n = hashlib.md5(usedforsecurity=False), 0
        while data := src.read(part):
            digests.update(hashlib.md5(data, usedforsecurity=False).digest())
            n += len(data)
    return n == size and digests.hexdigest() == md5


def _open_file(folder: Path, rel: str) -> int | None:
    """A descriptor of ``rel`` for reading, opened without following a link at any step
    (None: the way there is not folders); the caller closes it."""
    with _parent(folder, rel) as fd:
        if fd is None:
            return None
        return os.open(rel.rpartition("/")[2], _READ_FLAGS, dir_fd=fd)


# --- down ----------------------------------------------------------------------------------

def sync_down(remote: Remote, folder: Path, index: Index, *, staging: Path,
              owner: tuple[int, int] | None = None, files: OwnerFiles = OWN) -> Counts:
    """Bring to ``folder`` what changed in the bucket since ``index`` (see the module's
    text); ``staging``: a folder on the same file system for downloads under way;
    ``owner``: (uid, gid) the files and folders made are given to; ``files``: the rights
    its files are walked, compared and removed with (the owner's)."""
    counts = Counts()
    folder = Path(folder)
    if not folder.is_dir():
        folder.mkdir(parents=True, mode=0o700)
        if owner is not None:
            os.chown(folder, *owner, follow_symlinks=False)
    objects = remote.listing(counts.skipped)
    local = files.run(walk, folder, counts.skipped)
    staging.mkdir(parents=True, exist_ok=True, mode=0o700)
    for rel in sorted(objects.keys() | index.keys()):
        obj, was, here = objects.get(rel), index.get(rel), local.get(rel)
        if obj is not None:
            size, etag = obj
            if was is not None and (was.size, was.etag) == (size, etag):
                continue  # the bucket's is the one indexed: what changed here goes up later
            if here is None or (was is not None and (here.size, here.mtime_ns)
                                == (was.size, was.mtime_ns)):
                _download(remote, folder, rel, index, counts, staging, owner, was=was)
            elif here.size == size and _same_bytes(folder, rel, size, etag, files):
                index[rel] = Indexed(size, etag, here.mtime_ns)
                counts.adopted += 1
            else:  # changed here and there: this copy is kept, and goes up next
                counts.kept.append(rel)
        elif was is not None:  # gone from the bucket
            if here is not None and (here.size, here.mtime_ns) == (was.size, was.mtime_ns):
                if files.run(_remove_local, folder, rel, was):
                    counts.removed_here += 1
                else:
                    counts.kept.append(rel)
            elif here is not None:
                counts.kept.append(rel)  # changed here: a new file to the bucket now
            del index[rel]
    return counts


def _download(remote: Remote, folder: Path, rel: str, index: Index, counts: Counts,
              staging: Path, owner: tuple[int, int] | None, *, was: Indexed | None) -> None:
    name = rel.rpartition("/")[2]
    with _parent(folder, rel, make=True, owner=owner) as fd:
        if fd is None:
            counts.skipped.append(f"{rel}: a link or a file is in the way of its folder")
            return
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and not (stat.S_ISREG(st.st_mode)
                                   and (was is None or _same(st, was))):
            # a folder, a link or a special file; or a file changed since it was walked
            counts.skipped.append(f"{rel}: something else is in its place here")
            return
        tmp = str(staging / f"down-{os.urandom(8).hex()}")
        # (0666 less the umask, as any new file; its owner's alone when it has one)
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                      0o600 if owner is not None else 0o666)
        try:
            body, size, etag, mode = remote.get(rel)
            with os.fdopen(out, "wb") as f:
                with _edge(remote.name(rel)):
                    try:
                        while chunk := body.read(CHUNK):
                            f.write(chunk)
                    finally:
                        body.close()
                f.flush()
                if owner is not None:
                    os.fchown(f.fileno(), *owner)
                if mode is not None and mode & 0o100:  # executable where it was sent from:
                    own = os.fstat(f.fileno()).st_mode & 0o777  # so where it is readable
                    os.fchmod(f.fileno(), own | (own & 0o444) >> 2)
                got = os.fstat(f.fileno())
            if got.st_size != size:
                raise StorageError(f"{remote.name(rel)}: {got.st_size} bytes came of the "
                                   f"{size} announced")
            os.replace(tmp, name, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    index[rel] = Indexed(size, etag, got.st_mtime_ns)
    counts.downloaded += 1
    counts.moved_bytes += size


def _remove_local(folder: Path, rel: str, was: Indexed) -> bool:
    """Remove the file if it is still as indexed; False when it is not (kept)."""
    name = rel.rpartition("/")[2]
    with _parent(folder, rel) as fd:
        if fd is None:
            return False
        try:
            if not _same(os.stat(name, dir_fd=fd, follow_symlinks=False), was):
                return False
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            return True
    return True


# --- up ------------------------------------------------------------------------------------

def sync_up(remote: Remote, folder: Path, index: Index, *,
            owner_uid: int | None = None, now: float | None = None,
            files: OwnerFiles = OWN) -> Counts:
    """Send to the bucket what changed in ``folder`` since ``index`` (see the module's
    text). ``owner_uid``: files of another account are not sent (a hard link to one);
    ``files``: the rights the folder is walked and read with (a root daemon syncing a
    user's folder: the user's, so that it never uploads what the user could not read).
    ``now``: the time a conflict copy is named by (default: the clock's).
    A file that cannot be read is skipped and named; the bucket's errors raise."""
    counts = Counts()
    folder = Path(folder)
    local = files.run(walk, folder, counts.skipped)
    objects = remote.listing(counts.skipped)
    gone: list[str] = []
    for rel in sorted(local.keys() | index.keys()):
        here, was, obj = local.get(rel), index.get(rel), objects.get(rel)
        if here is not None:
            if was is not None and (here.size, here.mtime_ns) == (was.size, was.mtime_ns):
                continue  # unchanged here: what changed in the bucket comes down later
            if owner_uid is not None and here.uid != owner_uid:
                counts.skipped.append(f"{rel}: not its owner's file")
                continue
            if obj is None:
                _upload(remote, folder, rel, here, index, counts, files)
                continue
            same = _same_bytes(folder, rel, here.size, obj[1], files) \
                if obj[0] == here.size else False
            if same:
                index[rel] = Indexed(here.size, obj[1], here.mtime_ns)
                counts.adopted += 1
                continue
            # a version this copy never saw (changed there since the last sync; or, never
            # synced, other bytes) is kept beside it before this one replaces it
            if (obj != (was.size, was.etag)) if was is not None else (same is False):
                copy = conflict_name(rel, obj[1], time.time() if now is None else now)
                try:
                    remote.copy(rel, copy)
                except NotFound:
                    pass  # gone meanwhile: nothing to keep
                else:
                    counts.conflicts.append((rel, copy))
            _upload(remote, folder, rel, here, index, counts, files)
        elif was is not None:  # gone from here
            if obj is not None and obj == (was.size, was.etag):
                gone.append(rel)
            else:  # already gone there, or a newer object: that comes down next
                del index[rel]
    if gone:
        remote.delete(gone)
        for rel in gone:
            del index[rel]
        counts.removed_there += len(gone)
    return counts


def conflict_name(rel: str, etag: str, now: float) -> str:
    """Where the bucket's object of ``rel`` is kept when this copy replaces it:
    ``dir/name.sync-conflict-YYYYMMDD-HHMMSS-ETAG8.ext`` (the extension kept last, so the
    copy opens as the file does)."""
    folder, _, name = rel.rpartition("/")
    stem, dot, ext = name.rpartition(".")
    if not stem:  # no extension (or a dot file): the whole name is the stem
        stem, dot, ext = name, "", ""
    when = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    tag = etag.strip('"').replace("-", "")[:8] or "0" * 8
    copy = f"{stem}.sync-conflict-{when}-{tag}{dot}{ext}"
    return f"{folder}/{copy}" if folder else copy


def _upload(remote: Remote, folder: Path, rel: str, here: Local, index: Index,
            counts: Counts, files: OwnerFiles = OWN) -> None:
    try:
        f = files.run(_open_file, folder, rel)  # (read after: it stays readable)
    except FileNotFoundError:
        return  # gone meanwhile: its deletion goes up next time
    except OSError as e:
        counts.skipped.append(f"{rel}: {e.strerror or e}")
        return
    if f is None:
        counts.skipped.append(f"{rel}: its folder turned into a link")
        return
    with os.fdopen(f, "rb") as src:
        before = os.fstat(src.fileno())
        if not stat.S_ISREG(before.st_mode):
            counts.skipped.append(f"{rel}: not a regular file")
            return
        etag = remote.put(rel, src, before.st_size, before.st_mode)
        after = os.fstat(src.fileno())
    # changed while it was sent: indexed so that it goes up again next time
    mtime = before.st_mtime_ns if (after.st_size, after.st_mtime_ns) \
        == (before.st_size, before.st_mtime_ns) else -1
    index[rel] = Indexed(before.st_size, etag, mtime)
    counts.uploaded += 1
    counts.moved_bytes += before.st_size

