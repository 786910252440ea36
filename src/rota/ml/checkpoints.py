"""Finding a job's checkpoints on disk, and telling a finished one from one being written.

A job says where its checkpoints go (``checkpoint_dir``: a directory, or a glob such as
``runs/*/ckpt-*.pt``, relative to its working directory); inside a directory Rota looks
for the usual names:

- ``ckpt.pt``, ``*.pt``, ``*.pth``, ``*.bin`` (PyTorch ``torch.save``),
- ``*.ckpt`` (Lightning: ``epoch=2-step=1000.ckpt``, ``last.ckpt``),
- ``*.safetensors``,
- ``checkpoint-*`` directories (the Hugging Face Trainer: ``checkpoint-500/``).

The step comes from the name (``checkpoint-500``, ``step=1000``, ``ckpt_00500.pt``,
``model-step12000.safetensors``). A checkpoint is *valid* when it is complete: a file that
is not empty and has not been written to for ``SETTLE_S`` seconds, or a Hugging Face
directory holding weights or ``trainer_state.json``, none of them written in the last
``SETTLE_S`` seconds. What ``rota.job.checkpoint_saved`` reports is valid by the job's word.
"""

from __future__ import annotations

import glob
import io
import os
import re
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A file changed more recently than this may still be being written.
SETTLE_S = 2.0
FILE_PATTERNS = ("*.pt", "*.pth", "*.bin", "*.ckpt", "*.safetensors")
DIR_PATTERNS = ("checkpoint-*",)
#: Files whose presence makes a Hugging Face checkpoint directory complete.
HF_MARKERS = ("trainer_state.json", "model.safetensors", "pytorch_model.bin",
              "adapter_model.safetensors", "adapter_model.bin", "model.safetensors.index.json")
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
    """Every checkpoint under ``where`` (a directory or a glob; None: only the reported
    ones), oldest step first."""
    candidates: list[str] = []
    target = ""
    if where is not None:
        target = where if os.path.isabs(where) else str(Path(cwd or ".") / where)
    if not target:
        pass
    elif glob.has_magic(target):
        candidates = sorted(glob.glob(target))[:_MAX_FOUND]
    elif os.path.isdir(target):
        for pattern in (*FILE_PATTERNS, *DIR_PATTERNS):
            candidates += glob.glob(os.path.join(glob.escape(target), pattern))
        candidates = sorted(set(candidates))[:_MAX_FOUND]
    elif os.path.exists(target):
        candidates = [target]
    found = {c.path: c for c in (_inspect(p, now) for p in candidates) if c is not None}
    for path, step in reported:
        c = _inspect(path, now, trusted=True)
        if c is not None:
            found[c.path] = Checkpoint(c.path, step if step is not None else c.step, c.size,
                                       c.mtime, True, reported=True)
    return sorted(found.values(), key=lambda c: (c.step is None, c.step or 0, c.mtime))


def of_job(where: str | None, cwd: str | None, *, reported: dict[str, Any] | None,
           since: float, now: float) -> list[Checkpoint]:
    """A job's own checkpoints: under its ``checkpoint_dir`` and written since ``since``
    (older files there belong to an earlier run), plus the one it reported (rota.job's
    ``{"path", "step"}``)."""
    if where is None and not reported:
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


def _inspect(path: str, now: float, *, trusted: bool = False) -> Checkpoint | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    full = os.path.abspath(path)
    name = os.path.basename(full.rstrip("/"))
    if os.path.isdir(full):
        size, newest, names = 0, st.st_mtime, set()
        for entry in os.scandir(full):
            if entry.is_file(follow_symlinks=False):
                est = entry.stat(follow_symlinks=False)
                size += est.st_size
                newest = max(newest, est.st_mtime)
                names.add(entry.name)
        complete = any(m in names for m in HF_MARKERS) or (trusted and bool(names))
        valid = complete and (trusted or now - newest >= SETTLE_S)
        return Checkpoint(full, step_of(name), size, newest, valid)
    valid = st.st_size > 0 and (trusted or now - st.st_mtime >= SETTLE_S)
    return Checkpoint(full, step_of(name), st.st_size, st.st_mtime, valid)


def tar_stream(directory: str, chunk: int = 1 << 20) -> Iterator[bytes]:
    """A directory as an uncompressed tar, produced piece by piece (checkpoints are big)."""
    buf = _Spool()
    root = os.path.basename(directory.rstrip("/"))
    with tarfile.open(fileobj=buf, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, _dirs, files in os.walk(directory):
            for f in sorted(files):
                full = os.path.join(dirpath, f)
                if os.path.islink(full):
                    continue  # a link could point anywhere
                arc = os.path.join(root, os.path.relpath(full, directory))
                with open(full, "rb") as fh:
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
