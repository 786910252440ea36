"""Whether a checkpoint file or folder is complete, told from its content where it can be.

A checkpoint that is still being written (or was cut short by a kill) must never be
resumed from. Waiting for a file to go quiet is a guess that goes wrong both ways: a save
paused for a moment looks finished, and a complete file saved a second before a preempted
job exits looks unfinished, so a retry started at once skipped it. The formats trainers
write say themselves whether they are whole:

- ``torch.save`` (the zip format, default since PyTorch 1.6; Lightning's ``.ckpt``,
  ``pytorch_model.bin``) and ``.npz``: a zip archive is whole when it ends with its
  end-of-central-directory record, which is written last;
- ``.safetensors``: the header gives every tensor's byte range, so the file is whole
  when it is as long as the last range's end;
- a Hugging Face Trainer folder (``checkpoint-500/``): ``trainer_state.json`` is written
  after the weights, optimizer, scheduler and random state, and every weight file in it
  must be whole too.

``file_complete`` answers True or False for these, and None for a format that carries no
such sign (the legacy pickle ``torch.save``, a text file): the caller then falls back on
the file having been left alone for a while.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import BinaryIO

#: The file the Hugging Face Trainer writes last into a ``checkpoint-N`` folder.
TRAINER_STATE = "trainer_state.json"
_ZIP_HEAD = b"PK\x03\x04"
_EOCD = b"PK\x05\x06"
_EOCD_LEN = 22
_MAX_ZIP_COMMENT = 0xFFFF
_MAX_SAFETENSORS_HEADER = 100 << 20  # the format's own limit
#: Names of files and folders that are still being written, by the usual conventions of
#: atomic saves (write a temporary, then rename): ``.ckpt.tmp``, ``tmp-checkpoint-500``,
#: ``.model.safetensors.swp``, ``step_10.pt.partial``, ``weights.bin~``.
_TEMP_START = re.compile(r"^(?:\.|~|tmp|temp[-_.])", re.IGNORECASE)
_TEMP_END = re.compile(r"(?:\.(?:tmp|temp|part|partial|incomplete|swp|lock)|~)$"
                       r"|\.tmp[-_.]?[0-9a-z]*$", re.IGNORECASE)


def temporary_name(name: str) -> bool:
    """The name says the file is a temporary one, renamed into place once complete."""
    return _TEMP_START.search(name) is not None or _TEMP_END.search(name) is not None


def file_complete(path: str, size: int) -> bool | None:
    """True when the file's format shows it whole, False when it shows it cut short,
    None when its format carries no such sign. ``size`` is the file's size from stat."""
    if size <= 0:
        return False
    # never blocked by a fifo put in its place since it was looked at, nor misled by one
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return False
    with os.fdopen(fd, "rb") as f:
        head = f.read(8)
        if head.startswith(_ZIP_HEAD):
            return _zip_complete(f, size)
        if path.endswith(".safetensors"):
            return _safetensors_complete(f, head, size)
    return None


def folder_complete(path: str, names: set[str], *, marker: bool = True) -> bool:
    """A Hugging Face Trainer checkpoint folder (its file names given) is complete: its
    last-written file is there (unless ``marker`` is False: a folder the job itself said
    is complete) and no file in it is cut short."""
    if (TRAINER_STATE not in names) if marker else not names:
        return False
    for name in names:
        if name.startswith("."):
            continue  # .DS_Store, .gitattributes: no part of the checkpoint
        if _TEMP_END.search(name):
            return False
        full = os.path.join(path, name)
        try:
            if file_complete(full, os.stat(full).st_size) is False:
                return False
        except OSError:
            return False  # it went away while we looked: rotated out, or being replaced
    return True


def _zip_complete(f: BinaryIO, size: int) -> bool:
    # the record is the last 22 bytes, unless a comment follows it (torch writes none)
    for window in (_EOCD_LEN, _EOCD_LEN + _MAX_ZIP_COMMENT):
        n = min(size, window)
        f.seek(size - n)
        tail = f.read(n)
        at = tail.rfind(_EOCD)
        if at >= 0 and at + _EOCD_LEN <= len(tail):
            comment = int.from_bytes(tail[at + 20:at + 22], "little")
            if at + _EOCD_LEN + comment == len(tail):
                return True
    return False


def _safetensors_complete(f: BinaryIO, head: bytes, size: int) -> bool:
    if len(head) < 8:
        return False
    n = int.from_bytes(head, "little")
    if n > min(size - 8, _MAX_SAFETENSORS_HEADER):
        return False
    try:
        header = json.loads(f.read(n))
        end = max((int(v["data_offsets"][1]) for k, v in header.items()
                   if k != "__metadata__"), default=0)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return False  # a header cut short, or not safetensors at all
    return size >= 8 + n + end
