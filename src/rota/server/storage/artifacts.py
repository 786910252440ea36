"""Saving a job's ``outputs`` when it ends, to the artifact store (rota.storage).

The batch that records a job's end also writes its artifacts row, ``pending``, naming
the folders to save and whose rights read them. Once that commits, a worker thread:

1. starts the collector (rota.storage.collect) as the job's own account (a root daemon)
   or as the daemon's, so that nothing is read with more rights than the job had;
2. writes what it streams into a staging folder of the daemon's, up to
   ``[storage] max_output_bytes``;
3. publishes that folder with its manifest (size and sha256 of every file); readers see
   the whole set or nothing (rota.storage: rename into place, or the manifest last).

The outcome comes back to the event loop, which alone writes the store: ``saved`` with
the counts, or ``failed`` with the reason (a store's passing trouble is tried again, up
to SAVE_TRIES). A daemon killed meanwhile finds the row still ``pending`` at its next start
and saves again; an unfinished publish leaves nothing a reader sees.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from rota.backends.base import RunAs, python_for
from rota.config import Settings
from rota.core.spec import JobSpec
from rota.core.tiers import default_prices
from rota.errors import NotFound, RotaError, StorageError
from rota.server.storage import cards
from rota.server.storage.cards import CardFacts
from rota.storage import (
    FileEntry,
    Manifest,
    ObjectStore,
    build_manifest,
    open_store,
    safe_relpath,
)
from rota.storage import collect as collector
from rota.store.db import redact_url
from rota.store.repo import Store
from rota.units import format_memory as format_bytes

log = logging.getLogger("rota.artifacts")

#: tries of a save whose store had passing trouble (a network error, a 5xx)
SAVE_TRIES = 3
#: seconds before a save that failed so is tried again
RETRY_S = 30.0
#: how many saves run at once (each a collector process and an upload)
WORKERS = 2
#: manifests kept in memory for downloads
MANIFESTS_KEPT = 16
#: the collector's error output kept for the reason of a failed save
STDERR_KEEP = 4000


def key_of(job_id: int) -> str:
    return f"jobs/{job_id}"


def sources_of(spec: JobSpec, cwd: str, checkpoint: str | None = None) -> dict[str, str]:
    """Each output folder's name in the artifact -> its absolute path: relative to the
    job's cwd as written (``out``, ``results/eval``), else the folder's own name (an
    absolute path), with a number added where two would share a name. The newest
    checkpoint, when given and not inside an output folder, is saved as ``checkpoint``."""
    found: dict[str, str] = {}
    folders = [os.path.normpath(os.path.join(cwd, given)) for given in spec.outputs]
    if checkpoint is not None:
        ckpt = os.path.normpath(os.path.join(cwd, checkpoint))
        if not any(ckpt == f or ckpt.startswith(f + os.sep) for f in folders):
            found["checkpoint"] = ckpt
    for path in folders:
        rel = os.path.relpath(path, cwd)
        name = rel if not rel.startswith("..") and rel != "." else os.path.basename(path)
        name = name.replace(os.sep, "/") if name not in ("", ".", "/") else "output"
        unique, n = name, 1
        while unique in found:
            n += 1
            unique = f"{name}-{n}"
        found[unique] = path
    return found


class Artifacts:
    def __init__(self, settings: Settings, store: Store, clock: Callable[[], float],
                 post: Callable[..., None], run_as: Callable[[str], RunAs | None],
                 later: Callable[[float, Callable[[], None]], None]) -> None:
        self.settings, self.store, self.clock, self.post = settings, store, clock, post
        self.run_as, self.later = run_as, later
        self.url = settings.storage_url
        self.staging = settings.home / "staging"
        self.busy: set[int] = set()  # saves under way
        self._objects: ObjectStore | None = None
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="rota-artifacts")
        self._closed = False
        self._manifests: dict[int, Manifest] = {}  # read lately (by API threads)

    def objects(self) -> ObjectStore:
        if self._objects is None:
            st = self.settings.storage
            self._objects = open_store(self.url, endpoint_url=st.endpoint_url,
                                       region=st.region)
        return self._objects

    # --- at a job's end (inside the batch that records it) ------------------------------
    def want(self, job_id: int, spec: JobSpec, user: str, *,
             checkpoint: str | os.PathLike[str] | None = None) -> None:
        cwd = spec.cwd or "/"  # (intake refuses relative outputs without a cwd)
        sources = sources_of(spec, cwd, os.fspath(checkpoint) if checkpoint else None)
        self.store.want_artifacts(job_id, key=key_of(job_id), store_url=redact_url(self.url),
                                  sources=sources, user=user, now=self.clock())
        self.store.after_commit(lambda: self.start(job_id, sources, user))

    def resume(self) -> None:
        """At start-up: saves a stopped or killed daemon left unfinished (what they had
        staged is dropped: none runs yet; the staging folder's other entries, such as
        dataset uploads, are not the saves')."""
        if self.staging.is_dir():
            for left in self.staging.glob("job-*"):
                shutil.rmtree(left, ignore_errors=True)
        for row in self.store.artifacts_in("pending"):
            self.start(row.job_id, dict(row.sources), row.user)

    # --- the save -----------------------------------------------------------------------
    def start(self, job_id: int, sources: dict[str, str], user: str) -> None:
        if job_id in self.busy or self._closed:
            return
        try:
            run_as = self.run_as(user)
        except RotaError as e:
            self._failed(job_id, f"cannot read its outputs as {user}: {e}", False)
            return
        self.busy.add(job_id)
        try:  # what its card tells, read here (the store is the loop's)
            card: CardFacts | None = cards.facts(
                self.store, job_id, self.clock(),
                default_prices=default_prices(self.settings.tier_set))
        except Exception:  # never lose the save over its card
            log.exception("job %s: reading what its card tells failed", job_id)
            card = None
        self._pool.submit(self._save, job_id, sources, run_as, card)

    def _save(self, job_id: int, sources: dict[str, str], run_as: RunAs | None,
              card: CardFacts | None = None) -> None:
        """On a worker thread; the outcome goes to the loop."""
        staged = self.staging / f"job-{job_id}-{uuid.uuid4().hex[:8]}"
        try:
            staged.mkdir(parents=True, mode=0o700)
            notes = self._collect(job_id, sources, run_as, staged)
            if card is not None:
                notes += self._card(card, staged, run_as)
            manifest = build_manifest(staged, meta={"job": job_id, "notes": notes},
                                      now=self.clock())
            self.objects().publish(key_of(job_id), staged, manifest, move=True)
        except StorageError as e:
            self.post(self._failed, job_id, str(e), e.passing)
        except Exception as e:  # never lose the daemon over one job's files
            log.exception("job %s: saving its outputs failed", job_id)
            self.post(self._failed, job_id, f"{type(e).__name__}: {e}", False)
        else:
            self.post(self._saved, job_id, manifest)
        finally:
            shutil.rmtree(staged, ignore_errors=True)

    def _collect(self, job_id: int, sources: dict[str, str], run_as: RunAs | None,
                 staged: Path) -> list[str]:
        argv = [_python_for(run_as), "-I", "-S", "-c", _COLLECTOR,
                *(f"{name}={path}" for name, path in sources.items())]
        extra: dict[str, Any] = {} if run_as is None else run_as.popen_args()
        with tempfile.TemporaryFile() as err:  # a file: a full pipe would stall it
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=err, env={"PATH": os.defpath, "LC_ALL": "C.UTF-8"},
                                    start_new_session=True, **extra)
            self._procs[job_id] = proc
            try:
                assert proc.stdout is not None
                notes = receive(proc.stdout, staged, self.settings.storage.max_output_bytes)
            except BaseException:
                proc.kill()
                raise
            finally:
                proc.communicate()
                self._procs.pop(job_id, None)
            if proc.returncode != 0:
                err.seek(0)
                said = err.read()[-STDERR_KEEP:].decode(errors="replace").strip()
                raise StorageError(f"reading its outputs failed (exit status "
                                   f"{proc.returncode}): {said}")
        return notes

    @staticmethod
    def _card(card: CardFacts, staged: Path, run_as: RunAs | None) -> list[str]:
        """The job's card beside its outputs (rota-card/); a note when it cannot be. On
        the worker: its git state is read here, by git run as the job's account, when its
        submit recorded none."""
        folder = staged / cards.CARD_FOLDER
        if folder.exists():
            return [f"{cards.CARD_FOLDER}: an output folder has that name: no card saved"]
        card = cards.with_git(card, run_as)
        card.outputs = [{"path": p.relative_to(staged).as_posix(), "size": p.stat().st_size}
                        for p in sorted(staged.rglob("*")) if p.is_file()]
        cards.write_card(card, str(folder))
        return []

    # --- on the loop ----------------------------------------------------------------------
    def _saved(self, job_id: int, manifest: Manifest) -> None:
        self.busy.discard(job_id)
        self._manifests.pop(job_id, None)
        skipped = list(manifest.meta.get("notes") or [])
        self.store.set_artifacts(job_id, state="saved", files=len(manifest.files),
                                 bytes=manifest.total_size, skipped=skipped or None,
                                 error=None, saved_at=self.clock())
        self.store.add_event(job_id=job_id, kind="artifacts", now=self.clock(),
                             message=f"outputs saved: {len(manifest.files)} files, "
                                     f"{format_bytes(manifest.total_size)}"
                                     + (f" ({len(skipped)} notes)" if skipped else ""))

    def _failed(self, job_id: int, why: str, passing: bool) -> None:
        self.busy.discard(job_id)
        row = self.store.artifacts(job_id)
        tries = (row.tries if row else 0) + 1
        if passing and tries < SAVE_TRIES and not self._closed:
            self.store.set_artifacts(job_id, tries=tries, error=why)
            if row is not None:
                sources, user = dict(row.sources), row.user
                self.later(RETRY_S, lambda: self.start(job_id, sources, user))
            return
        self.store.set_artifacts(job_id, state="failed", tries=tries, error=why)
        self.store.add_event(job_id=job_id, kind="artifacts", now=self.clock(),
                             message=f"outputs not saved: {why}")

    def close(self) -> None:
        """Stop saving: a save cut short stays ``pending`` and runs again at the next
        start (what it published in part, nobody sees)."""
        self._closed = True
        for proc in list(self._procs.values()):
            proc.kill()
        self._pool.shutdown(wait=True, cancel_futures=True)

    # --- reading back (the API) -----------------------------------------------------------
    def manifest(self, job_id: int) -> Manifest:
        """The job's manifest (kept for the next MANIFESTS_KEPT reads: a download asks
        for it once per file; a job's set changes only by a new save, which drops it)."""
        found = self._manifests.get(job_id)
        if found is None:
            found = self.objects().manifest(key_of(job_id))
            if found is None:
                raise NotFound(f"job {job_id} has no saved outputs")
            while len(self._manifests) >= MANIFESTS_KEPT:  # (API threads share it)
                self._manifests.pop(next(iter(self._manifests), job_id), None)
            self._manifests[job_id] = found
        return found

    def open(self, job_id: int, path: str) -> IO[bytes]:
        return self.objects().open(key_of(job_id), safe_relpath(path),
                                   manifest=self.manifest(job_id))


def chosen(manifest: Manifest, path: str | None) -> tuple[list[FileEntry], bool]:
    """The files a link to ``path`` serves, and whether it is one file (else a tar)."""
    if path is None:
        return list(manifest.files), False
    one = manifest.find(path)
    if one is not None:
        return [one], True
    under = [f for f in manifest.files if f.path.startswith(path.rstrip("/") + "/")]
    if not under:
        raise NotFound(f"no file or folder {path!r} among the saved outputs; `rota "
                       "artifacts JOB` lists them")
    return under, False


def tar_of(entries: list[FileEntry], open_file: Callable[[str], IO[bytes]],
           mtime: float, chunk: int = 1 << 20) -> Iterator[bytes]:
    """Saved files as one uncompressed tar, piece by piece, each checked against its
    manifest entry as it is read (a file that changed in the store ends the stream with
    an error rather than passing for the saved one)."""
    for entry in entries:
        info = tarfile.TarInfo(entry.path)
        info.size, info.mode, info.mtime = entry.size, 0o644, int(mtime)
        yield info.tobuf(format=tarfile.PAX_FORMAT)
        digest, size = hashlib.sha256(), 0
        with open_file(entry.path) as f:
            while data := f.read(chunk):
                digest.update(data)
                size += len(data)
                yield data
        if size != entry.size or digest.hexdigest() != entry.sha256:
            raise StorageError(f"{entry.path} in the store does not match its manifest")
        yield b"\0" * (-size % tarfile.BLOCKSIZE)
    yield b"\0" * (2 * tarfile.BLOCKSIZE)


def receive(stream: IO[bytes], into: Path, limit: int) -> list[str]:
    """The collector's stream written under ``into`` (see rota.storage.collect): its notes
    back. Each path is checked (relative, no ``..``), each file is new (O_EXCL), and the
    total stays within ``limit`` bytes."""
    notes: list[str] = []
    total = 0
    current: int | None = None  # the file being written
    current_path: Path | None = None
    while True:
        head = stream.readline()
        if not head:
            break
        kind, _, size = head.rstrip(b"\n").partition(b" ")
        if not size.isdigit() and kind != b"E":
            raise StorageError(f"the collector's stream has a bad record {head[:40]!r}")
        if kind == b"E":
            if current is None:
                raise StorageError("the collector's stream ended a file it had not begun")
            os.close(current)
            current = current_path = None
            continue
        n = int(size)  # (at most a chunk: the collector's own)
        body = _read_exactly(stream, n)
        if kind == b"C":
            if current is None:
                raise StorageError("the collector sent bytes outside a file")
            total += n
            if total > limit:
                raise StorageError(f"its outputs hold more than max_output_bytes "
                                   f"({format_bytes(limit)}, [storage] in rota.toml): none "
                                   "were saved")
            os.write(current, body)
        elif kind == b"F":
            rel = safe_relpath(body.decode("utf-8", "surrogateescape"))
            current_path = into / rel
            current_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            current = os.open(current_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                              | os.O_NOFOLLOW | os.O_CLOEXEC, stat.S_IRUSR | stat.S_IWUSR)
        elif kind == b"X":
            if current is not None and current_path is not None:
                os.close(current)
                current_path.unlink()
                notes.append(f"{current_path.relative_to(into)}: not saved: could not be "
                             f"read to its end ({body.decode(errors='replace')})")
            current = current_path = None
        elif kind == b"N":
            notes.append(body.decode("utf-8", "replace"))
        else:
            raise StorageError(f"the collector's stream has a record of unknown kind {kind!r}")
    if current is not None:
        os.close(current)
        raise StorageError("the collector stopped in the middle of a file")
    return notes


def _read_exactly(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise StorageError("the collector's stream was cut short")
    return data


#: the collector's source, run with ``python -I -S -c``: nothing is imported from Rota's
#: installation, which another account may not be able to read
_COLLECTOR = Path(collector.__file__).read_text()


def _python_for(run_as: RunAs | None) -> str:
    found = python_for(run_as)
    if found is None:
        raise StorageError(f"no Python interpreter {run_as.user if run_as else 'it'} can run "
                           f"to read its outputs ({os.path.realpath(sys.executable)} is not "
                           "open to other accounts)")
    return found
