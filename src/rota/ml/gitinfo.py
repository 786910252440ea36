"""What version of the code a job runs: the git commit of its working directory, the
branch, the remote, and whether tracked files had changes (`git describe --dirty`'s
meaning: untracked files do not count). Read with git's own porcelain commands."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_TIMEOUT_S = 10.0
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


@dataclass(frozen=True)
class GitInfo:
    commit: str
    dirty: bool
    branch: str | None
    remote: str | None  # without credentials


def _git(cwd: str, *args: str, how: Mapping[str, Any] | None = None) -> str | None:
    try:
        r = subprocess.run(["git", "-C", cwd, *args], capture_output=True, text=True,
                           timeout=_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL,
                           **(how or {}))
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def strip_credentials(url: str) -> str:
    """``https://user:token@host/x`` -> ``https://host/x``: a remote may carry a token."""
    return _USERINFO.sub("", url)


def git_info(cwd: str, *, how: Mapping[str, Any] | None = None) -> GitInfo | None:
    """The repository state of ``cwd``; None outside a repository or without git.
    ``how``: more ``subprocess.run`` arguments (the account and environment git runs
    with: a root daemon reads a job's repository as the job's account)."""
    if shutil.which("git") is None:
        return None
    commit = _git(cwd, "rev-parse", "HEAD", how=how)
    if not commit:
        return None
    status = _git(cwd, "status", "--porcelain", "--untracked-files=no", how=how)
    branch = _git(cwd, "rev-parse", "--abbrev-ref", "HEAD", how=how)
    remote = _git(cwd, "config", "--get", "remote.origin.url", how=how)
    return GitInfo(commit=commit, dirty=bool(status), branch=branch if branch != "HEAD" else None,
                   remote=strip_credentials(remote) if remote else None)
