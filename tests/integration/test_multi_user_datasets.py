"""A job never changes what later jobs read as a dataset version (issue 36): a root job
writing into a shared version (0444 files do not stop root), or the owner's job into a
private copy (its files are the owner's), is found before the next job starts; that job
reads the version as it was added, and says why it waited.

Run as root with real Unix accounts (see test_multi_user.py, whose helpers these are).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_multi_user import _dataset_folders, _log, _wait_end, rota_as, rota_json

from rota_testing import DaemonProcess, root_daemon_in_tmp, unix_accounts

DANA = "rtu-dana"
CORPUS = "a corpus every user may read\n"
NOTES = "dana's own notes\n"


@pytest.fixture(scope="module")
def account() -> Iterator[int]:
    with unix_accounts(DANA) as uids:
        yield uids[DANA]


@pytest.fixture
def daemon(account: int) -> Iterator[DaemonProcess]:
    with root_daemon_in_tmp("rota-mud-") as d:
        yield d


def _job_of(account: str | None, d: DaemonProcess, dataset: str, script: str) -> int:
    """A job of ``account`` (None: root, the daemon's own) that reads ``dataset``."""
    args = ("submit", "--json", "--gpus", "0", "--dataset", dataset, "--", "sh", "-c", script)
    r = d.cli(*args) if account is None else rota_as(account, d.home, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    return int(json.loads(r.stdout)["jobs"][0]["id"])


def _ran(d: DaemonProcess, job: int) -> str:
    end = _wait_end(d, job)
    out = _log(d, job)
    assert end["state"] == "completed", (end, out)
    return out


def _said(d: DaemonProcess, job: int) -> str:
    with d.client() as c:
        return "\n".join(str(e["message"]) for e in c.events(job))


def test_a_job_that_writes_into_a_cached_version_changes_nothing_for_later_jobs(
        daemon: DaemonProcess, account: int) -> None:
    d = daemon
    folders = _dataset_folders(d.home.parent / "data", DANA, corpus={"train.txt": CORPUS},
                               notes={"notes.txt": NOTES})
    rota_json(DANA, d.home, "dataset", "add", "corpus", str(folders["corpus"]), "--shared")
    rota_json(DANA, d.home, "dataset", "add", "notes", str(folders["notes"]))

    # a root job writes into the shared version: root passes the 0444 mode
    job = _job_of(None, d, f"{DANA}/corpus", 'echo tampered > "$ROTA_DATASET_CORPUS/train.txt"; '
                  'echo "at $ROTA_DATASET_CORPUS"')
    cached = Path(_ran(d, job).split("at ", 1)[1].strip())
    assert (cached / "train.txt").read_text() == "tampered\n"  # (the attack itself worked)
    shown = rota_json(DANA, d.home, "dataset", "show", f"{DANA}/corpus")
    assert shown["cached"] is False  # truthful: what is there is not this version

    # dana's next job reads the version as it was added, and says why it waited
    job = _job_of(DANA, d, f"{DANA}/corpus", 'cat "$ROTA_DATASET_CORPUS/train.txt"')
    out = _ran(d, job)
    assert CORPUS in out and "tampered" not in out, out
    assert f"its dataset {DANA}/corpus:v1 was changed in the cache since it was verified: " \
           "it is fetched again" in _said(d, job)
    assert f"dataset {DANA}/corpus:v1 was changed in the cache since it was verified; " \
           "fetched again" in d.log_text()
    assert rota_json(DANA, d.home, "dataset", "show", f"{DANA}/corpus")["cached"] is True

    # the owner's job changes her private copy (its files are hers): her next job does not
    # read the change
    job = _job_of(DANA, d, "notes", 'chmod -R u+w "$ROTA_DATASET_NOTES" && '
                  'echo mine > "$ROTA_DATASET_NOTES/notes.txt" && echo wrote')
    assert "wrote" in _ran(d, job)
    job = _job_of(DANA, d, "notes", 'cat "$ROTA_DATASET_NOTES/notes.txt"')
    out = _ran(d, job)
    assert NOTES in out and "mine" not in out, out
