"""The one door to a user's files (rota.storage.owner_files): the kernel checks every path
as the owner, on the calling thread only, and the daemon's rights come back after.

As root with a real Unix account (CI runs as root: ROTA_REQUIRE_ROOT=1 makes these fail,
not skip, elsewhere).
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota.storage.owner_files import (
    Owner,
    OwnerFiles,
    OwnerRightsError,
    open_own_file,
    open_own_path,
    owner_rights,
)
from rota_testing import unix_accounts

NAME, GROUP = "rtu-door", "rtu-doorgrp"

if os.geteuid() != 0:
    if os.environ.get("ROTA_REQUIRE_ROOT"):
        raise RuntimeError("the owner-rights tests need root")
    pytest.skip("needs root (to act as another account)", allow_module_level=True)


@pytest.fixture(scope="module")
def owner() -> Iterator[Owner]:
    subprocess.run(["groupdel", GROUP], capture_output=True, check=False)
    with unix_accounts(NAME):
        subprocess.run(["groupadd", GROUP], check=True)
        subprocess.run(["usermod", "-aG", GROUP, NAME], check=True)
        pw = pwd.getpwnam(NAME)
        yield Owner(NAME, pw.pw_uid, pw.pw_gid, tuple(os.getgrouplist(NAME, pw.pw_gid)))
    subprocess.run(["groupdel", GROUP], capture_output=True, check=False)


@pytest.fixture
def place(owner: Owner) -> Iterator[Path]:
    """A folder everyone passes through, holding: root's 0700 folder with a secret, the
    owner's own file, a 0640 file of root's readable by a group of the owner's."""
    base = Path(tempfile.mkdtemp(prefix="rota-door-", dir="/tmp"))
    os.chmod(base, 0o755)
    (base / "root-only").mkdir(mode=0o700)
    (base / "root-only" / "secret").write_text("root's")
    mine = base / "mine"
    mine.write_text("owner's")
    os.chown(mine, owner.uid, owner.gid)
    grouped = base / "grouped"
    grouped.write_text("group's")
    os.chown(grouped, 0, grp.getgrnam(GROUP).gr_gid)
    os.chmod(grouped, 0o640)
    os.symlink("/etc/shadow", base / "to-shadow")
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_the_owner_reads_what_it_may_and_nothing_else(owner: Owner, place: Path) -> None:
    files = OwnerFiles(owner)
    assert files.read_bytes(str(place / "mine"), 100) == b"owner's"
    assert files.read_bytes(str(place / "grouped"), 100) == b"group's"  # its groups count
    for path in ("/etc/shadow", place / "to-shadow", place / "root-only" / "secret"):
        with pytest.raises(PermissionError):
            files.read_bytes(str(path), 100)
    assert files.can_enter(str(place)) and not files.can_enter(str(place / "root-only"))
    assert not files.exists(str(place / "root-only" / "secret"))
    # and the daemon's own rights are back on this thread
    assert (place / "root-only" / "secret").read_text() == "root's"
    assert Path("/etc/shadow").read_bytes()


def test_rights_are_given_back_after_an_error(owner: Owner, place: Path) -> None:
    def fails() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError):
        OwnerFiles(owner).run(fails)
    assert (place / "root-only" / "secret").read_text() == "root's"
    with owner_rights(owner), pytest.raises(OwnerRightsError), owner_rights(owner):
        pass  # not nested: a second block on one thread is a mistake, said at once
    assert (place / "root-only" / "secret").read_text() == "root's"


def test_only_the_calling_thread_takes_the_owners_rights(owner: Owner, place: Path) -> None:
    inside, leave = threading.Event(), threading.Event()
    seen: list[bool] = []

    def as_owner() -> None:
        with owner_rights(owner):
            seen.append(os.path.exists(place / "root-only" / "secret"))
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=as_owner)
    t.start()
    assert inside.wait(10)
    try:  # meanwhile, on this thread, the daemon is still root
        assert (place / "root-only" / "secret").read_text() == "root's"
    finally:
        leave.set()
        t.join()
    assert seen == [False]


def test_a_generator_steps_with_the_owners_rights_on_any_thread(owner: Owner,
                                                                place: Path) -> None:
    def reads() -> Iterator[bytes]:
        for name in ("mine", "root-only/secret"):
            try:
                yield (place / name).read_bytes()
            except PermissionError:
                yield b"denied"

    pieces = OwnerFiles(owner).iterate(reads())
    got = [next(pieces)]
    t = threading.Thread(target=lambda: got.append(next(pieces)))  # as a thread pool does
    t.start()
    t.join()
    assert got == [b"owner's", b"denied"]
    assert (place / "root-only" / "secret").read_text() == "root's"


def test_a_daemon_made_file_is_opened_only_as_a_plain_file_of_the_daemon_or_its_owner(
        owner: Owner, place: Path) -> None:
    os.mkfifo(place / "fifo")
    other = place / "others"
    other.write_text("x")
    os.chown(other, owner.uid + 1, owner.gid)
    fd = os.open(place, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.close(open_own_file(fd, "mine", uid=owner.uid))
        os.close(open_own_file(fd, "grouped", uid=owner.uid))  # the daemon's own
        for name, error in (("to-shadow", OSError), ("fifo", PermissionError),
                            ("others", PermissionError)):
            with pytest.raises(error):
                open_own_file(fd, name, uid=owner.uid)
        with pytest.raises(ValueError):
            open_own_file(fd, "../etc/shadow", uid=owner.uid)
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        open_own_path(str(place / "to-shadow"), uid=owner.uid)


def test_no_one_and_the_daemons_own_account(place: Path) -> None:
    with pytest.raises(PermissionError):
        OwnerFiles.nobody().read_bytes(str(place / "grouped"), 10)
    assert OwnerFiles(None).read_bytes(str(place / "root-only" / "secret"), 10) == b"root's"


def test_a_jobs_tensorboard_folder_is_read_with_its_accounts_rights(owner: Owner,
                                                                    place: Path) -> None:
    """tensorboard_dir naming root's 0700 folder gives no metrics; the account's own does."""
    writer = pytest.importorskip("torch.utils.tensorboard").SummaryWriter
    from rota.ml.parse import LineParser
    from rota.server.tracking.outputs import OutputReader, Progress

    def scalars_in(folder: Path) -> list[str]:
        w = writer(str(folder))
        w.add_scalar("secret/loss", 0.5, 1)
        w.close()
        for p in [folder, *folder.rglob("*")]:  # open to all (whatever this umask made)
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        reader = OutputReader(job_id=1, log_path=place / "no.log",
                              events_path=place / "no.events", parser=LineParser.lenient(),
                              progress=Progress(attempt=1), tensorboard_dir=str(folder),
                              files=OwnerFiles(owner))
        reader.read(0.0, final=True)
        return [tag for _, _, tag, _ in reader.samples]

    assert scalars_in(place / "root-only" / "tb") == []
    own = place / "owners-tb"
    own.mkdir()
    os.chown(own, owner.uid, owner.gid)
    assert scalars_in(own) == ["secret/loss"]
