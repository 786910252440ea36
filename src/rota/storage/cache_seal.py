"""A cached dataset version's seal: what its files look like on disk, in one digest, so a
version changed after it was placed (by a root job, or by the account that owns a private
copy: read-only modes stop neither) is found before the next job reads it.

The seal hashes, for every entry under the version's folder (sorted, by relative path),
its type and mode, owner, size, mtime, ctime and inode: no content is read, so checking
a version costs one ``lstat`` per file (measured in docs/storage.md). It catches any change
a process can make: writing a file changes its mtime and ctime, a chmod, chown, link or
``utime`` (even one setting the old mtime back) its ctime, which no one but the kernel
sets; a file added, removed or renamed changes a listing, and a file replaced by another
its inode. The version's own folder is left out: placing it (a rename) changes its ctime.

File times come from a coarse clock (a tick of 1-4 ms on Linux): a change within the tick
of the last change before sealing would keep the sealed times, so :func:`past_this_tick`
waits for the next tick before a seal is taken. A file system that keeps whole seconds
only (ext3, FAT) catches a same-second change of a file's bytes by its size alone.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import time

__all__ = ["past_this_tick", "seal_of"]

#: Linux's CLOCK_REALTIME_COARSE, the clock that stamps file times (Python does not name it)
_COARSE = getattr(time, "CLOCK_REALTIME_COARSE", 5)


def past_this_tick() -> None:
    """Returns once the clock that stamps file times has moved on: whatever changes a file
    from now on gives it a ctime later than any it has now."""
    if sys.platform != "linux":
        return
    start = time.clock_gettime_ns(_COARSE)
    while time.clock_gettime_ns(_COARSE) == start:
        time.sleep(0.0005)


def seal_of(top: str | os.PathLike[str]) -> str:
    """The seal of the tree under ``top`` (64 hex). Links are not followed."""
    h = hashlib.sha256()
    folders = [""]
    base = os.fspath(top)
    while folders:
        rel = folders.pop()
        names = sorted(os.listdir(os.path.join(base, rel)))
        rows = []
        for name in names:
            path = f"{rel}/{name}" if rel else name
            st = os.lstat(os.path.join(base, path))
            rows.append(f"{path}\0{st.st_mode:o} {st.st_uid} {st.st_gid} {st.st_size} "
                        f"{st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}\n")
            if stat.S_ISDIR(st.st_mode):
                folders.append(path)
        h.update("".join(rows).encode("utf-8", "surrogateescape"))
    return h.hexdigest()
