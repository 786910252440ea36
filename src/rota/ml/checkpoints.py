"""Finding a job's checkpoints on disk, and choosing the one a retry resumes from.

A job says where its checkpoints go (``checkpoint_dir``: a directory, or a glob such as
``runs/*/ckpt-*.pt``, relative to its working directory); inside a directory Rota looks
for the usual names:

- ``ckpt.pt``, ``*.pt``, ``*.pth``, ``*.bin`` (PyTorch ``torch.save``),
- ``*.ckpt`` (Lightning: ``epoch=2-step=1000.ckpt``, ``last.ckpt``),
- ``*.safetensors``,
- ``checkpoint-*`` directories (the Hugging Face Trainer: ``checkpoint-500/``).

A job that names no ``checkpoint_dir`` has the usual layouts under its working directory
looked through instead (``checkpoint-*/``, ``out/checkpoint-*/``,
``lightning_logs/version_*/checkpoints/*.ckpt``, ``checkpoints/``: see
``rota.ml.checkpoint_layouts``). Files that only accompany a checkpoint
(``training_args.bin``, ``optimizer.pt``, ``rng_state.pth``...) are not checkpoints.

The step comes from the name (``checkpoint-500``, ``step=1000``, ``ckpt_00500.pt``,
``model-step12000.safetensors``). A checkpoint is *valid* when it is complete
(``rota.ml.checkpoint_content``): a zip ``torch.save`` file or a ``.safetensors`` file
whose content shows it whole, a Hugging Face folder holding ``trainer_state.json`` (the
Trainer writes it last) with whole weight files, or, for a format that shows nothing, a
file that is not empty and has not been written to for ``SETTLE_S`` seconds. A temporary
name (``ckpt.pt.tmp``, ``.ckpt.pt``, ``tmp-checkpoint-5``) is never valid. What
``rota.job.checkpoint_saved`` reports is valid by the job's word, unless its content
shows it cut short.

The one to resume from (``newest_valid``) is the valid one with the highest step, by
the number, not by time or name order; a checkpoint whose name carries no step comes
after every numbered one. A complete file counts at once, so the checkpoint a stopped
attempt saved just before it exited is the one its retry resumes from, however soon
that retry starts.
"""

from __future__ import annotations

import glob
import io
import os
import re
import stat
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rota.ml import checkpoint_content, checkpoint_layouts

#: A file changed more recently than this may still be being written.
SETTLE_S = 2.0
FILE_PATTERNS = ("*.pt", "*.pth", "*.bin", "*.ckpt", "*.safetensors")
DIR_PATTERNS = ("checkpoint-*",)
#: Files that go with a checkpoint but are none themselves (the Trainer's, in its output
#: folder and in each ``checkpoint-N``).
NOT_CHECKPOINTS = frozenset({"training_args.bin", "optimizer.pt", "optimizer.bin",
                             "scheduler.pt", "scaler.pt", "rng_state.pth"})
_RNG_STATE = re.compile(r"rng_state_[0-9]+\.pth|random_states_[0-9]+\.pkl")
_STEP = re.compile(r"(?:step|checkpoint|ckpt|iter|iteration)[-_=]?(\d+)", re.IGNORECASE)
_NUMBER = re.compile(r"(\d+)")
_MAX_FOUND = 10_000  # a glob that matches a whole dataset must not stall the daemon


@dataclass(frozen=True)
class Checkpoint:
    path: str
    step: int | None
    size: int  # bytes (a directory: the sum of its files)
    mtime: float  # the newest modification inside it
    valid: bool
    reported: bool = False  # announced by rota.job

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "step": self.step, "size": self.size, "mtime": self.mtime,
                "valid": self.valid, "reported": self.reported}


def step_of(name: str) -> int | None:
    """The training step a checkpoint's name carries, if any."""
    m = _STEP.search(name)
    if m:
        return int(m.group(1))
    stem = name.split(".")[0]
    nums = _NUMBER.findall(stem)
    return int(nums[-1]) if len(nums) == 1 else None


def find(where: str | None, cwd: str | None, *, now: float,
         reported: Iterable[tuple[str, int | None]] = ()) -> list[Checkpoint]:
    """Every checkpoint under ``where`` (a directory or a glob; None: the usual layouts
    under ``cwd``, or only the reported ones without a ``cwd``), oldest step first."""
    candidates: list[str] = []
    target = ""
    if where is not None:
        target = where if os.path.isabs(where) else str(Path(cwd or ".") / where)
    if not target:
        if where is None and cwd:
            candidates = checkpoint_layouts.discover(cwd, FILE_PATTERNS, DIR_PATTERNS)
    elif glob.has_magic(target):
        candidates = sorted(glob.glob(target))[:_MAX_FOUND]
    elif os.path.isdir(target):
        for pattern in (*FILE_PATTERNS, *DIR_PATTERNS):
            candidates += glob.glob(os.path.join(glob.escape(target), pattern))
        candidates = sorted(set(candidates))[:_MAX_FOUND]
    elif os.path.exists(target):
        candidates = [target]
    found = {c.path: c for c in (_inspect(p, now) for p in candidates if _candidate(p))
             if c is not None}
    for path, step in reported:
        c = _inspect(path, now, trusted=True)
        if c is not None:
            found[c.path] = Checkpoint(c.path, step if step is not None else c.step, c.size,
                                       c.mtime, c.valid, reported=True)
    return sorted(found.values(), key=lambda c: (c.step is None, c.step or 0, c.mtime))


def of_job(where: str | None, cwd: str | None, *, reported: dict[str, Any] | None,
           since: float, now: float) -> list[Checkpoint]:
    """A job's own checkpoints: under its ``checkpoint_dir`` and written since ``since``
    (older files there belong to an earlier run), plus the one it reported (rota.job's
    ``{"path", "step"}``). Without a ``checkpoint_dir``, the usual layouts under ``cwd``.
    The answer does not depend on how long ago a zip or safetensors file was written, so
    the checkpoint named when an attempt stops is the one its retry resumes from."""
    if where is None and not reported and not cwd:
        return []
    told = [(str(reported["path"]), reported.get("step"))] if reported else []
    return [c for c in find(where, cwd, now=now, reported=told)
            if c.reported or c.mtime >= since]


def newest_valid(checkpoints: list[Checkpoint]) -> Checkpoint | None:
    """The checkpoint to resume from: the highest step among valid ones (then the newest)."""
    valid = [c for c in checkpoints if c.valid]
    if not valid:
        return None
    return max(valid, key=lambda c: (c.step if c.step is not None else -1, c.mtime))


def _candidate(path: str) -> bool:
    name = os.path.basename(path.rstrip("/"))
    return name not in NOT_CHECKPOINTS and not _RNG_STATE.fullmatch(name)


def _inspect(path: str, now: float, *, trusted: bool = False) -> Checkpoint | None:
    try:
        st = os.stat(path)
        full = os.path.abspath(path)
        name = os.path.basename(full.rstrip("/"))
        temporary = checkpoint_content.temporary_name(name)
        if os.path.isdir(full):
            size, newest, names = 0, st.st_mtime, set()
            for entry in os.scandir(full):
                if entry.is_file(follow_symlinks=False):
                    est = entry.stat(follow_symlinks=False)
                    size += est.st_size
                    newest = max(newest, est.st_mtime)
                    names.add(entry.name)
            # the Trainer's marker and whole weights; a reported folder by the job's word
            complete = checkpoint_content.folder_complete(full, names, marker=not trusted)
            return Checkpoint(full, step_of(name), size, newest,
                              complete and (trusted or not temporary))
        if not stat.S_ISREG(st.st_mode):
            return None  # a fifo, a device: no checkpoint, and never read
        whole = checkpoint_content.file_complete(full, st.st_size)
    except OSError:
        return None
    if trusted:
        valid = whole is not False
    elif whole is None:  # a format that shows nothing: it must have been left alone
        valid = st.st_size > 0 and now - st.st_mtime >= SETTLE_S
    else:
        valid = whole
    return Checkpoint(full, step_of(name), st.st_size, st.st_mtime,
                      valid and (trusted or not temporary))


def tar_stream(directory: str, chunk: int = 1 << 20) -> Iterator[bytes]:
    """A directory as an uncompressed tar, produced piece by piece (checkpoints are big)."""
    buf = _Spool()
    root = os.path.basename(directory.rstrip("/"))
    with tarfile.open(fileobj=buf, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, _dirs, files in os.walk(directory):
            for f in sorted(files):
                full = os.path.join(dirpath, f)
                try:  # a link could point anywhere; a fifo would block the reader
                    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                                 | os.O_CLOEXEC)
                except OSError:
                    continue  # a link, or gone since it was listed
                arc = os.path.join(root, os.path.relpath(full, directory))
                with os.fdopen(fd, "rb") as fh:
                    if not stat.S_ISREG(os.fstat(fd).st_mode):
                        continue
                    info = tar.gettarinfo(fileobj=fh, arcname=arc)
                    tar.addfile(info, fh)
                    yield from buf.take(chunk)
    yield from buf.take(0)


class _Spool(io.RawIOBase):
    """A write-only file whose contents are taken out as they come."""

    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.data += b
        return len(b)

    def take(self, at_least: int) -> Iterator[bytes]:
        if len(self.data) >= max(at_least, 1):
            out, self.data = bytes(self.data), bytearray()
            yield out
