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
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_multi_user import (  # (fixtures used by name)
    SRC,
    root_daemon,
    rota_as,
    shared_home,
)

from rota.server.storage.workspace_cleanup import remove_listed, stale_files
from rota.server.storage.workspace_owner import rights_in
from rota.server.storage.workspaces import folder_size
from rota.storage.sync import sync_up
from rota.storage.sync_remote import Remote
from rota_testing import DaemonProcess, moto_s3, s3_client, unix_accounts

__all__ = ["root_daemon", "shared_home"]  # pytest finds the fixtures here

#: accounts of this module's own (test_multi_user's may be made and removed meanwhile)
ALICE, BOB = "rtf-alice", "rtf-bob"


@pytest.fixture(scope="module")
def accounts() -> Iterator[dict[str, int]]:
    with unix_accounts(ALICE, BOB) as uids:
        readable = subprocess.run(["runuser", "-u", BOB, "--", "test", "-r",
                                   f"{SRC}/rota/__init__.py"], check=False)
        assert readable.returncode == 0, f"{SRC} must be readable by other accounts"
        yield uids


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


# --- workspaces: alice's is hers to change, and the daemon acts there with her rights -----

ROOTS = b"root's own: never counted, removed or sent for alice\n"


@pytest.fixture
def alice_ws(accounts: dict[str, int]) -> Iterator[tuple[Path, Path]]:
    """(alice's workspace ROOT/alice/proj as a root daemon makes it, a root-only folder
    beside it holding ``old.bin``, 1 MiB ``big.bin`` and ``key``)."""
    top = Path(tempfile.mkdtemp(prefix="rota-mu-ws-", dir="/tmp"))
    os.chmod(top, 0o711)
    ws = top / ALICE / "proj"
    ws.mkdir(parents=True, mode=0o700)
    os.chmod(ws.parent, 0o711)
    shutil.chown(ws, ALICE, ALICE)
    secret = top / "root-only"
    secret.mkdir(mode=0o700)
    (secret / "big.bin").write_bytes(b"s" * (1 << 20))
    (secret / "key").write_bytes(ROOTS)
    os.chmod(secret / "key", 0o600)
    yield ws, secret
    shutil.rmtree(top, ignore_errors=True)


def _alices(ws: Path) -> None:
    """Everything under ``ws`` made alice's (as her job would have made it)."""
    for top, dirs, files in os.walk(ws):
        for name in dirs + files:
            os.chown(os.path.join(top, name), *_ids(), follow_symlinks=False)


def _ids() -> tuple[int, int]:
    import pwd

    pw = pwd.getpwnam(ALICE)
    return pw.pw_uid, pw.pw_gid


def _bobs_secret() -> Path:
    path = Path(f"/home/{BOB}/private")
    subprocess.run(["runuser", "-u", BOB, "--", "mkdir", "-p", "-m", "700", str(path)],
                   check=True)
    subprocess.run(["runuser", "-u", BOB, "--", "sh", "-c", f"echo bob > {path}/notes"],
                   check=True)
    return path / "notes"


def test_a_workspace_scan_counts_only_what_its_account_can_reach(
        alice_ws: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Links to /etc/shadow and to bob's 0700 file count nothing; a folder alice's job
    swaps for a link to a root-only folder while the scan goes down does not add that
    folder's megabyte (root's scan followed it)."""
    ws, secret = alice_ws
    (ws / "data.bin").write_bytes(b"x" * 1000)
    os.symlink("/etc/shadow", ws / "shadow")
    os.symlink(_bobs_secret(), ws / "bobs")
    (ws / "sub").mkdir()
    (ws / "sub" / "a").write_bytes(b"y" * 10)
    _alices(ws)
    real, calls = os.scandir, []

    def racing(path: Any) -> Any:
        calls.append(path)
        if len(calls) == 2:  # the scan goes down into sub: the job swaps it for a link
            os.rename(ws / "sub", ws / "sub.old")
            os.symlink(secret, ws / "sub")
        return real(path)

    monkeypatch.setattr(os, "scandir", racing)
    size = folder_size(str(ws))
    monkeypatch.undo()
    assert len(calls) >= 2, calls
    assert size in (1000, 1010), size


def test_a_workspace_cleanup_removes_only_what_its_account_could(
        alice_ws: tuple[Path, Path]) -> None:
    """Of the stale files a dry run listed, one in a folder alice made read-only stays
    (she could not remove it: root's cleanup did), and one whose folder she swapped for a
    link to a root-only folder holding the same-looking file leaves root's file alone."""
    ws, secret = alice_ws
    for rel in ("old.bin", "locked/old.bin", "sub/old.bin"):
        (ws / rel).parent.mkdir(exist_ok=True)
        (ws / rel).write_bytes(ROOTS)
    (secret / "old.bin").write_bytes(ROOTS)
    _alices(ws)
    os.chmod(ws / "locked", 0o555)
    old = time.time() - 30 * 86400
    for path in (ws / "old.bin", ws / "locked/old.bin", ws / "sub/old.bin",
                 secret / "old.bin"):
        os.utime(path, (old, old))
    plan = stale_files(ws, time.time() - 86400)
    assert [f.path for f in plan] == ["locked/old.bin", "old.bin", "sub/old.bin"]
    subprocess.run(["runuser", "-u", ALICE, "--", "sh", "-c",
                    f"mv {ws}/sub {ws}/sub.old && ln -s {secret} {ws}/sub"], check=True)
    removed, kept = remove_listed(ws, plan)
    assert removed == ["old.bin"], (removed, kept)
    assert (ws / "locked/old.bin").exists() and (secret / "old.bin").exists()
    assert any(k.startswith("locked/old.bin: ") and "Permission denied" in k for k in kept)


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    yield from moto_s3(tmp_path_factory, "ws-bucket")


def test_a_workspace_sync_sends_nothing_its_account_could_not_read(
        alice_ws: tuple[Path, Path], aws: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Alice's workspace holds links to /etc/shadow and to bob's file, and once walked,
    her file is swapped for a hard link to root's 0600 key (made here by root: where
    fs.protected_hardlinks is off, alice can make it herself). None of their bytes go up:
    root's sync read them."""
    ws, secret = alice_ws
    (ws / "data.txt").write_bytes(b"alice's data\n")
    os.symlink("/etc/shadow", ws / "shadow")
    os.symlink(_bobs_secret(), ws / "bobs")
    _alices(ws)
    s3 = s3_client(aws)
    remote = Remote(s3, "ws-bucket", f"ws/{uuid.uuid4().hex}/{ALICE}/proj")
    listing = Remote.listing

    def after_the_walk(self: Remote, skipped: list[str] | None = None) -> Any:
        os.unlink(ws / "data.txt")
        os.link(secret / "key", ws / "data.txt")
        return listing(self, skipped)

    monkeypatch.setattr(Remote, "listing", after_the_walk)
    counts = sync_up(remote, ws, {}, owner_uid=_ids()[0], files=rights_in(ws))
    monkeypatch.undo()
    sent = {o["Key"].rpartition("/")[2]: s3.get_object(Bucket="ws-bucket", Key=o["Key"])
            ["Body"].read() for o in s3.list_objects_v2(
                Bucket="ws-bucket", Prefix=remote.base).get("Contents", [])}
    assert ROOTS not in sent.values() and "shadow" not in sent and "bobs" not in sent, sent
    assert any("data.txt" in why for why in counts.skipped), counts.skipped
