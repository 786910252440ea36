"""No code in server/ opens a user's path but through the door (DESIGN.md invariant 11).

Every module of the daemon that touches files itself is named here with what it touches:
the daemon's own files (its home, its staging, its web assets), or a user's path through
rota.storage.owner_files (the rights of the job's account; a daemon-made file opened
O_NOFOLLOW as a plain file of that account). A new module that opens, lists or stats
files must be added with its reason, and if what it touches is a path a job or a user can
name or change, it goes through the door and gets a row in docs/security.md's table.
"""

from __future__ import annotations

import re
from pathlib import Path

SERVER = Path(__file__).resolve().parents[2] / "src" / "rota" / "server"

#: file actions on a path: opening, listing, stat-ing, walking, copying, removing, running
FILE_ACTION = re.compile(
    r"\bopen\(|os\.(open|stat|lstat|walk|fwalk|scandir|listdir|unlink|remove|rename|chmod|"
    r"chown|makedirs|mkdir|access)\(|os\.path\.(exists|lexists|isdir|isfile|islink|"
    r"getsize)\(|\bglob\.|\.(iterdir|read_text|read_bytes|write_text|write_bytes|rglob|"
    r"stat|lstat|unlink|mkdir)\(|shutil\.|subprocess\.")

#: module -> what it touches (and why that is not a user's path, or how the door guards it)
ALLOWED = {
    "api/pipelines.py": "a pipeline's paths: resolved and read through Reads.user_files",
    "storage/artifacts.py":
        "the daemon's staging folder; a job's outputs are read by the collector, "
        "a process of the job's account",
    "storage/cards.py": "writes a card into the daemon's staging folder; git runs as the account",
    "loop/daemon.py": "makes the daemon's own folders in its home",
    "daemon_ports.py": "saved artifacts through the object store (the daemon's)",
    "web/__init__.py": "the dashboard's own files, shipped with Rota",
    "storage/dataset_uploads.py": "the daemon's upload staging folders",
    "storage/dataset_registry.py": "the daemon's staging folders (uploads, imports)",
    "schedules/eval_schedules.py": "the daemon's ROTA_HOME/eval folders",
    "home_lock.py": "the daemon's home",
    "intake.py": "looks conda up on the daemon's PATH; a job's cwd is checked through the "
                 "door (can_enter)",
    "jobs/job_output.py": "the size of a job's log, in the daemon's logs folder",
    "tracking/log_limit.py":
        "a job's log (open_own_path: a plain file of the daemon or the account) "
        "and its .cut record, in the daemon's logs folder",
    "tracking/log_times.py": "a log's time index, in the daemon's logs folder",
    "tracking/logstream.py": "a job's log, through open_own_path",
    "tracking/outputs.py": "the size of a job's log, in the daemon's logs folder",
    "schedules/pipelines.py":
        "a round's folder in the daemon's home (pipelines run as the daemon's "
        "own account only)",
    "access/secrets.py": "secrets.key, in the daemon's home",
    "serve.py": "the daemon's socket and pid file",
    "jobs/stopper.py": "a job's stop file, made by the daemon in its status folder",
    "tracking/trackers.py": "its own private folder for a W&B card; its helper runs as the account",
    "workers.py": "the API workers, processes of the daemon",
    "storage/workspace_cleanup.py":
        "a workspace, with its account's rights (rights_in), O_NOFOLLOW",
    "storage/workspace_owner.py": "a workspace's owner, by lstat of the folder the daemon made",
    "storage/workspace_sync.py": "a workspace, with its account's rights (storage.sync's files=)",
    "storage/workspaces.py": "a workspace's size, with its account's rights (rights_in), no links",
}


def _touching() -> set[str]:
    found = set()
    for path in SERVER.rglob("*.py"):
        code = "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
        if FILE_ACTION.search(code):
            found.add(path.relative_to(SERVER).as_posix())
    return found


def test_every_module_that_touches_files_is_named_with_its_reason() -> None:
    unnamed = sorted(_touching() - set(ALLOWED))
    assert not unnamed, (f"{unnamed} touch files themselves: name each in ALLOWED with what it "
                         "touches; a path a job or a user can name goes through "
                         "rota.storage.owner_files (docs/security.md)")


def test_the_list_names_no_module_that_does_not_touch_files() -> None:
    assert not sorted(set(ALLOWED) - _touching())  # kept as short as the truth
