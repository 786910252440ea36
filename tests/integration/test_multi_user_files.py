"""A root daemon touches a user's files only with that user's rights: cards, outputs and
workspaces (issue 36; docs/security.md's table).

Run as root with real Unix accounts (test_multi_user's helpers: CI runs as root, and
ROTA_REQUIRE_ROOT=1 makes these fail rather than skip elsewhere).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_multi_user import (  # (fixtures used by name)
    ALICE,
    BOB,
    accounts,
    root_daemon,
    rota_as,
    shared_home,
)

from rota_testing import DaemonProcess

__all__ = ["accounts", "root_daemon", "shared_home"]  # pytest finds the fixtures here

GIT_AS = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
PATHS = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/"}


def _git(repo: Path, *args: str, account: str | None = None) -> str:
    prefix = ["runuser", "-u", account, "--"] if account else []
    r = subprocess.run([*prefix, "git", "-C", str(repo), *GIT_AS, *args], capture_output=True,
                       text=True, check=True, env=PATHS)
    return r.stdout.strip()


def _repo(repo: Path, branch: str, remote: str, account: str | None = None) -> str:
    """A repository with one commit on ``branch`` and ``remote`` as its origin: its commit."""
    _git(repo, "init", "-q", "-b", branch, account=account)
    (repo / "train.py").write_text("print('hi')\n")
    if account:
        shutil.chown(repo / "train.py", account, account)
    _git(repo, "add", "train.py", account=account)
    _git(repo, "commit", "-q", "-m", "first", account=account)
    _git(repo, "remote", "add", "origin", remote, account=account)
    return _git(repo, "rev-parse", "HEAD", account=account)


@pytest.fixture
def root_repo() -> Iterator[Path]:
    """root's repository, its history root's alone (.git 0700), passable above it."""
    top = Path(tempfile.mkdtemp(prefix="rota-mu-gitroot-", dir="/tmp"))
    yield top
    shutil.rmtree(top, ignore_errors=True)


def _held_job(home: Path, cwd: Path) -> int:
    r = rota_as(ALICE, home, "submit", "--hold", "--json", "--cwd", str(cwd), "--", "true")
    assert r.returncode == 0, r.stdout + r.stderr
    job_id: int = json.loads(r.stdout)["jobs"][0]["id"]
    return job_id


def test_a_card_reads_git_as_the_jobs_owner(root_daemon: DaemonProcess,
                                             accounts: dict[str, int],
                                             root_repo: Path) -> None:
    """Alice's job works in a folder of hers inside root's repository: her card shows none
    of root's commit, branch or remote (git as root showed them). Her own repository's
    facts do show (git as root refused a repository of another account's)."""
    home = root_daemon.home
    roots = _repo(root_repo, "roots-secret-branch", "https://tok@root.example/secret.git")
    os.chmod(root_repo / ".git", 0o700)
    os.chmod(root_repo, 0o711)
    inside = root_repo / "alices-work"
    inside.mkdir(mode=0o700)
    shutil.chown(inside, ALICE, ALICE)
    mine = Path(f"/home/{ALICE}/card-repo")
    subprocess.run(["runuser", "-u", ALICE, "--", "mkdir", "-p", str(mine)], check=True)
    hers = _repo(mine, "alices-branch", "https://example.com/alice/model.git", account=ALICE)

    card = rota_as(ALICE, home, "card", str(_held_job(home, inside)))
    assert card.returncode == 0, card.stderr
    for secret in (roots, roots[:12], "roots-secret-branch", "root.example"):
        assert secret not in card.stdout, card.stdout
    assert "No git commit known" in card.stdout, card.stdout

    card = rota_as(ALICE, home, "card", str(_held_job(home, mine)))
    assert card.returncode == 0, card.stderr
    assert hers in card.stdout and "alices-branch" in card.stdout, card.stdout
    assert "https://example.com/alice/model.git" in card.stdout
    # bob may not read her card at all
    assert rota_as(BOB, home, "card", "2").returncode != 0
