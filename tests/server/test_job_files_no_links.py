"""The daemon (root, under a system service) reads and flags a tmux job's own files in a
folder that job's account owns: never through a link put there by the job."""

from __future__ import annotations

import json
from pathlib import Path

from rota.backends.common import read_status
from rota.server.tracking.logstream import read_range


def test_read_range_does_not_follow_a_link(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text('{"kind": "metric", "name": "stolen", "value": 1}\n')
    link = tmp_path / "1-1.events"
    link.symlink_to(secret)
    assert read_range(link, 0, 1 << 20) == b""
    assert read_range(secret, 0, 1 << 20) != b""  # a plain file is read


def test_read_status_does_not_follow_a_link(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"shim_pid": 1, "pgid": 1}))
    link = tmp_path / "1-1.json"
    link.symlink_to(other)
    assert read_status(link) is None
    assert read_status(other) is not None


def test_read_status_reads_a_plain_file_only_and_a_bounded_part_of_it(tmp_path: Path) -> None:
    """A job's account writes its shim's status file: a fifo put there never blocks the
    daemon, and a file grown huge is read no further than a status file's bound."""
    import os

    from rota.backends.common import MAX_STATUS_BYTES

    fifo = tmp_path / "2-1.json"
    os.mkfifo(fifo)
    assert read_status(fifo) is None  # returns at once: no writer is waited for
    big = tmp_path / "3-1.json"
    record = json.dumps({"shim_pid": 7, "pgid": 7}) + "\n"
    big.write_text(record + "x" * (8 * MAX_STATUS_BYTES) + "\n" + json.dumps({"exit_status": 9}))
    got = read_status(big)
    assert got is not None and got.get("shim_pid") == 7
    assert "exit_status" not in got  # past the bound: not believed
