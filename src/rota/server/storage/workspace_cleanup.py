"""Cleaning a workspace of files nobody touched for N days: a dry run lists them (a plan),
and only what a plan lists is ever removed.

Listing walks the workspace without following links (``os.fwalk``). Removing goes down to
each listed file's folder one component at a time from the workspace's own descriptor,
each opened with O_NOFOLLOW, and unlinks the file there only if it is still the regular
file the plan saw (same size and modification time): a file changed since, or a folder
swapped for a link to elsewhere, is kept and reported. Both list and remove with the
rights of the workspace's account (rota.server.storage.workspace_owner), never root's: nothing is
removed that the account could not remove itself, nothing listed that it could not list.
Both run on a worker thread (a workspace can hold millions of files).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rota.server.storage.workspace_owner import rights_in

#: files a plan's answer names (the plan itself keeps them all)
SHOWN = 1000


@dataclass(frozen=True)
class Stale:
    path: str  # relative to the workspace
    size: int
    mtime_ns: int


@dataclass
class Plan:
    id: str
    workspace: str  # USER/PROJECT
    root: Path
    days: float
    made_at: float
    files: list[Stale] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    def view(self) -> dict[str, Any]:
        """CleanupPlanAnswer."""
        return {"plan": self.id, "workspace": self.workspace, "days": self.days,
                "made_at": self.made_at, "count": len(self.files), "bytes": self.bytes,
                "more": len(self.files) > SHOWN,
                "files": [{"path": f.path, "size": f.size, "mtime": f.mtime_ns / 1e9}
                          for f in self.files[:SHOWN]]}

    def done(self, removed: list[str], kept: list[str]) -> dict[str, Any]:
        """CleanupDoneAnswer, once ``removed`` are gone and ``kept`` (with why) stay."""
        sizes = {f.path: f.size for f in self.files}
        return {"plan": self.id, "workspace": self.workspace, "removed": len(removed),
                "bytes": sum(sizes[p] for p in removed), "kept": kept}


def stale_files(root: Path, cutoff: float) -> list[Stale]:
    """Regular files under ``root`` neither modified nor read since ``cutoff`` (a unix
    time); links are neither followed nor listed."""
    return rights_in(root).run(_stale_files, root, cutoff)


def _stale_files(root: Path, cutoff: float) -> list[Stale]:
    """(Under the owner's rights: I/O only.)"""
    found: list[Stale] = []
    cutoff_ns = int(cutoff * 1e9)
    for top, _dirs, files, top_fd in os.fwalk(root, follow_symlinks=False):
        rel_top = os.path.relpath(top, root)
        for name in files:
            try:
                st = os.stat(name, dir_fd=top_fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and max(st.st_mtime_ns, st.st_atime_ns) < cutoff_ns:
                rel = name if rel_top == "." else f"{rel_top}/{name}"
                found.append(Stale(rel, st.st_size, st.st_mtime_ns))
    found.sort(key=lambda f: f.path)
    return found


def remove_listed(root: Path, files: list[Stale]) -> tuple[list[str], list[str]]:
    """Unlink each listed file that is still as the plan saw it: (removed, kept with why)."""
    return rights_in(root).run(_remove_listed, root, files)


def _remove_listed(root: Path, files: list[Stale]) -> tuple[list[str], list[str]]:
    """(Under the owner's rights: I/O only.)"""
    removed: list[str] = []
    kept: list[str] = []
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for f in files:
            why = _remove(root_fd, f)
            if why is None:
                removed.append(f.path)
            else:
                kept.append(f"{f.path}: {why}")
    finally:
        os.close(root_fd)
    return removed, kept


def _remove(root_fd: int, f: Stale) -> str | None:
    *folders, name = f.path.split("/")
    fds: list[int] = []
    try:
        at = root_fd
        for part in folders:
            if part in ("", ".", ".."):
                return "not a plain path"
            at = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=at)
            fds.append(at)
        st = os.stat(name, dir_fd=at, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            return "no longer a regular file"
        if (st.st_size, st.st_mtime_ns) != (f.size, f.mtime_ns):
            return "changed since the dry run"
        os.unlink(name, dir_fd=at)
        return None
    except FileNotFoundError:
        return "gone already"
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            return "a folder on its path is now a link or a file"
        return e.strerror or str(e)
    finally:
        for fd in reversed(fds):
            os.close(fd)
