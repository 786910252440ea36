"""A job's output folders, read with the job's own rights and streamed to the daemon.

    python -m rota.storage.collect NAME=FOLDER [NAME=FOLDER ...]

The daemon starts this as the job's Unix account (a root daemon) or as itself, never
reading a user's files with more rights than the job had: whatever it streams, the job
itself could have read. The daemon writes what it receives into its own staging folder,
and the storage layer publishes that (rota.server.storage.artifacts).

Inside each folder only regular files are read; links are not followed (a link to
``/etc`` or to another user's files saves nothing but a note), nor are sockets, fifos or
devices. The folder itself may be a link: the job named it.

The stream on stdout, one record after another (``LEN`` counts bytes, in decimal):

- ``F LEN\\n`` + a file's path in the artifact (``NAME/relative/path``, UTF-8), then its
  bytes as chunks ``C LEN\\n`` + bytes, then ``E\\n`` (complete) or ``X LEN\\n`` + why
  (could not be read to its end: the daemon drops what it got);
- ``N LEN\\n`` + a note for the job's page (a link or special file passed over, a folder
  that is not there).

Standard library only: it starts for every job that names outputs.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import BinaryIO

CHUNK = 1 << 20


def _record(out: BinaryIO, kind: bytes, body: bytes) -> None:
    out.write(b"%s %d\n" % (kind, len(body)))
    out.write(body)


def _name(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")


def send_file(out: BinaryIO, name: str, path: str) -> None:
    """One regular file: opened without following a link (it may have been swapped for
    one since it was listed), read in chunks to its end as it is now."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        _record(out, b"N", _name(f"{name}: not saved: {e.strerror or e}"))
        return
    with os.fdopen(fd, "rb", buffering=0) as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            _record(out, b"N", _name(f"{name}: not saved: not a regular file"))
            return
        _record(out, b"F", _name(name))
        try:
            while chunk := f.read(CHUNK):
                _record(out, b"C", chunk)
        except OSError as e:
            _record(out, b"X", _name(e.strerror or str(e)))
            return
    out.write(b"E\n")


def send_folder(out: BinaryIO, name: str, folder: str) -> None:
    """A folder's regular files under ``name/``; a single file (a checkpoint that is one)
    as ``name/its-name``."""
    if os.path.isfile(folder):
        send_file(out, f"{name}/{os.path.basename(folder)}", folder)
        return
    if not os.path.isdir(folder):
        why = "not there" if not os.path.lexists(folder) else "not a folder"
        _record(out, b"N", _name(f"{name}: {folder} is {why}: nothing saved from it"))
        return
    def unreadable(e: OSError) -> None:  # (the job's own rights: what it could not read)
        where = os.path.relpath(e.filename, folder) if e.filename else "."
        shown = name if where == "." else f"{name}/{where}"
        _record(out, b"N", _name(f"{shown}: not saved: {e.strerror or e}"))

    for top, dirs, files in os.walk(folder, followlinks=False, onerror=unreadable):
        rel_top = os.path.relpath(top, folder)
        prefix = name if rel_top == "." else f"{name}/{rel_top}"
        dirs.sort()
        for d in list(dirs):
            if os.path.islink(os.path.join(top, d)):
                dirs.remove(d)
                _record(out, b"N", _name(f"{prefix}/{d}: a link, not followed"))
        for f in sorted(files):
            path = os.path.join(top, f)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue  # gone since it was listed
            if stat.S_ISREG(mode):
                send_file(out, f"{prefix}/{f}", path)
            else:
                what = "a link, not followed" if stat.S_ISLNK(mode) else "not a regular file"
                _record(out, b"N", _name(f"{prefix}/{f}: {what}"))


def main(argv: list[str]) -> int:
    pairs = []
    for arg in argv:
        name, sep, folder = arg.partition("=")
        if not sep or not name or not os.path.isabs(folder):
            print(f"rota collect: {arg!r} is not NAME=/absolute/folder", file=sys.stderr)
            return 2
        pairs.append((name, folder))
    out = sys.stdout.buffer
    for name, folder in pairs:
        send_folder(out, name, folder)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
