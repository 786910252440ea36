"""The log copy resumes exactly: nothing lost, nothing twice, whatever the crash point."""

from __future__ import annotations

from pathlib import Path

import pytest

from rota.backends.container.logs import Cursor, LogCopy, read_cursor, start_cursor

FRAMES = [b"one\n", b"two\n", b"partial ", b"line\n", b"last"]


@pytest.fixture
def paths(tmp_path: Path) -> tuple[Path, Path]:
    log, status = tmp_path / "job.log", tmp_path / "a.status"
    log.write_bytes(b"=== header\n")
    start_cursor(status, log)
    return log, status


def test_copies_then_resumes_after_the_counted_entries(paths: tuple[Path, Path]) -> None:
    log, status = paths
    assert LogCopy(log, status).run(FRAMES[:2]) == 2
    assert LogCopy(log, status).run(FRAMES) == 3  # a restart: Docker sends all again
    assert log.read_bytes() == b"=== header\n" + b"".join(FRAMES)
    assert read_cursor(Path(f"{status}.logpos")) == Cursor(5, log.stat().st_size)


@pytest.mark.parametrize("cut", [0, 1, 3, 4])
def test_crash_between_the_write_and_the_cursor(paths: tuple[Path, Path], cut: int) -> None:
    """The third entry reached the log (all of it, or ``cut`` bytes) but the cursor still
    says two: it is completed, not written again."""
    log, status = paths
    LogCopy(log, status).run(FRAMES[:2])
    with open(log, "ab") as f:
        f.write(FRAMES[2][:cut] if cut < len(FRAMES[2]) else FRAMES[2])
    LogCopy(log, status).run(FRAMES)
    assert log.read_bytes() == b"=== header\n" + b"".join(FRAMES)


def test_bytes_of_someone_else_are_kept(paths: tuple[Path, Path]) -> None:
    log, status = paths
    LogCopy(log, status).run(FRAMES[:2])
    with open(log, "ab") as f:
        f.write(b"a note\n")
    LogCopy(log, status).run(FRAMES)
    assert log.read_bytes() == b"=== header\none\ntwo\na note\n" + b"".join(FRAMES[2:])


def test_first_entry_not_doubled_after_a_crash_before_its_cursor(
        paths: tuple[Path, Path]) -> None:
    log, status = paths
    with open(log, "ab") as f:  # written, then the daemon died before any cursor update
        f.write(FRAMES[0])
    LogCopy(log, status).run(FRAMES)
    assert log.read_bytes() == b"=== header\n" + b"".join(FRAMES)
