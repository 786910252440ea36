"""A job's checkpoints are looked for, checked and served with its owner's rights only.

The attack (issue 36): a job appends ``{"kind": "checkpoint", "path": "/etc/shadow"}`` to its
events file, or names a root-only ``--checkpoint-dir``; the daemon (root) then listed the
file as a valid checkpoint and served it. Run as root with real Unix accounts, over the
socket (the kernel says who asks) and over TCP with a token.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from test_multi_user import SYSTEM_PYTHON, _wait_end, rota_as, rota_json

from rota_testing import DaemonProcess, free_port, root_daemon_in_tmp, unix_accounts

ALICE = "rtu-ckpt"  # an account of this module's own (other modules make and remove theirs)
#: a job of alice that says it saved these, then ends
REPORT = ("import json, os\n"
          "with open(os.environ['ROTA_EVENTS_FILE'], 'a') as f:\n"
          "    for n, path in enumerate(os.environ['CLAIMS'].split(':'), 1):\n"
          "        f.write(json.dumps({'kind': 'checkpoint', 'path': path, 'step': n}) + '\\n')\n"
          "open(os.path.join(os.environ['HOME'], 'ckpt-3.pt'), 'wb').write(b'alices')\n"
          "with open(os.environ['ROTA_EVENTS_FILE'], 'a') as f:\n"
          "    f.write(json.dumps({'kind': 'checkpoint', 'step': 3,\n"
          "            'path': os.path.join(os.environ['HOME'], 'ckpt-3.pt')}) + '\\n')\n")
#: fetch over the daemon's socket as whoever runs it (alice): status and body
FETCH = ("import http.client, socket, sys, urllib.parse\n"
         "class C(http.client.HTTPConnection):\n"
         "    def connect(self):\n"
         "        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect(sys.argv[1])\n"
         "c = C('localhost'); c.request('GET', sys.argv[2]); r = c.getresponse()\n"
         "sys.stdout.buffer.write(str(r.status).encode() + b' ' + r.read())\n")


@pytest.fixture(scope="module")
def alice() -> Iterator[int]:
    with unix_accounts(ALICE) as uids:
        yield uids[ALICE]


@pytest.fixture(scope="module")
def daemon(alice: int) -> Iterator[DaemonProcess]:
    port = free_port()
    with root_daemon_in_tmp("rota-ckpt-", args=["--listen", f"127.0.0.1:{port}"]) as d:
        d.port = port  # type: ignore[attr-defined]
        yield d


@pytest.fixture
def secret_folder() -> Iterator[Path]:
    """A root-only folder holding a file that looks like a checkpoint."""
    folder = Path(tempfile.mkdtemp(prefix="rota-root-only-", dir="/tmp"))
    os.chmod(folder, 0o700)
    (folder / "step_9.pt").write_bytes(b"root's weights")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _as_alice(d: DaemonProcess, path: str) -> tuple[int, bytes]:
    r = subprocess.run(["runuser", "-u", ALICE, "--", SYSTEM_PYTHON, "-c", FETCH,
                        str(d.socket), path], capture_output=True, timeout=60, check=False)
    status, _, body = r.stdout.partition(b" ")
    assert status.isdigit(), r.stderr
    return int(status), body


def test_a_reported_checkpoint_alice_cannot_read_is_neither_listed_nor_served(
        daemon: DaemonProcess, secret_folder: Path) -> None:
    home = daemon.home
    claims = ["/etc/shadow", str(home / "secrets.key"), str(home / "rota.db"),
              str(secret_folder / "step_9.pt"), str(home)]
    r = rota_as(ALICE, home, "submit", "--json", "--env", f"CLAIMS={':'.join(claims)}",
                "--", SYSTEM_PYTHON, "-c", REPORT)
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["jobs"][0]["id"]
    assert _wait_end(daemon, job_id)["state"] == "completed"

    listed = rota_json(ALICE, home, "checkpoints", str(job_id))
    paths = [c["path"] for c in listed["checkpoints"]]  # type: ignore[index]
    assert paths == [f"/home/{ALICE}/ckpt-3.pt"], listed  # her own, and only hers
    assert listed["resume_from"] == f"/home/{ALICE}/ckpt-3.pt"

    for claim in claims:
        q = httpx.QueryParams({"path": claim})
        status, body = _as_alice(daemon, f"/v1/jobs/{job_id}/checkpoints/download?{q}")
        assert status == 404, (claim, body[:200])
        assert b"root:" not in body and b"SQLite" not in body and b"root's" not in body
    status, body = _as_alice(daemon, f"/v1/jobs/{job_id}/checkpoints/download?"
                             f"{httpx.QueryParams({'path': f'/home/{ALICE}/ckpt-3.pt'})}")
    assert (status, body) == (200, b"alices")

    # over TCP with a token of hers: the same answers
    with daemon.client() as c:
        token = c.create_token(ALICE)["token"]
    with httpx.Client(base_url=f"http://127.0.0.1:{daemon.port}",  # type: ignore[attr-defined]
                      headers={"Authorization": f"Bearer {token}"}, timeout=30) as c:
        got = c.get(f"/v1/jobs/{job_id}/checkpoints").json()
        assert [x["path"] for x in got["checkpoints"]] == [f"/home/{ALICE}/ckpt-3.pt"]
        for claim in claims:
            r2 = c.get(f"/v1/jobs/{job_id}/checkpoints/download", params={"path": claim})
            assert r2.status_code == 404 and b"root:" not in r2.content, claim


def test_a_root_only_checkpoint_dir_shows_nothing_written_there(
        daemon: DaemonProcess, secret_folder: Path) -> None:
    """--checkpoint-dir naming a folder alice cannot read: what appears there after the
    submit is never listed (nor is the job resumed from it)."""
    home = daemon.home
    r = rota_as(ALICE, home, "submit", "--json", "--checkpoint-dir", str(secret_folder),
                "--", "sh", "-c", "exit 0")
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["jobs"][0]["id"]
    (secret_folder / "step_10.pt").write_bytes(b"root's newer weights")  # after the submit
    assert _wait_end(daemon, job_id)["state"] == "completed"
    listed = rota_json(ALICE, home, "checkpoints", str(job_id))
    assert listed["checkpoints"] == [] and listed["resume_from"] is None, listed
    q = httpx.QueryParams({"path": str(secret_folder / "step_10.pt")})
    status, body = _as_alice(daemon, f"/v1/jobs/{job_id}/checkpoints/download?{q}")
    assert status == 404 and b"root's" not in body


def test_a_checkpoint_folder_is_tarred_with_the_owners_rights(
        daemon: DaemonProcess, alice: int) -> None:
    """A checkpoint folder of hers holding a link to /etc/shadow and a fifo: the tar has her
    files only, and the fifo blocks nothing."""
    home = daemon.home
    script = ("d=$HOME/out/checkpoint-5; mkdir -p $d; echo '{}' > $d/trainer_state.json; "
              "printf w > $d/model.bin; ln -s /etc/shadow $d/shadow.bin; mkfifo $d/pipe.bin")
    r = rota_as(ALICE, home, "submit", "--json", "--checkpoint-dir", f"/home/{ALICE}/out",
                "--", "sh", "-c", script)
    assert r.returncode == 0, r.stderr
    job_id = json.loads(r.stdout)["jobs"][0]["id"]
    assert _wait_end(daemon, job_id)["state"] == "completed"
    listed = rota_json(ALICE, home, "checkpoints", str(job_id))
    folder = f"/home/{ALICE}/out/checkpoint-5"
    assert [c["path"] for c in listed["checkpoints"]] == [folder], listed  # type: ignore[index]
    q = httpx.QueryParams({"path": folder})
    status, body = _as_alice(daemon, f"/v1/jobs/{job_id}/checkpoints/download?{q}")
    assert status == 200 and b"model.bin" in body and b"trainer_state.json" in body
    assert b"shadow" not in body and b"root:" not in body and b"pipe.bin" not in body



def test_a_pipelines_paths_are_read_with_the_callers_rights(daemon: DaemonProcess,
                                                           secret_folder: Path) -> None:
    """A pipeline's evaluation config naming root's file: read (and refused) as the caller,
    so no line of it comes back in the error; nothing is stored."""
    secret = secret_folder / "eval.yaml"
    secret.write_text("root:$6$secrethash:19000:0:99999:7:::\n")
    config = Path(tempfile.mkdtemp(prefix="rota-pipe-", dir="/tmp")) / "p.yaml"
    config.parent.chmod(0o755)
    config.write_text("version: 1\nname: claims\nmodel_repo: /m\ndatasets: [{name: /d.jsonl, "
                      f"field_instruction: q, field_output: a}}]\nevaluate: {{config: {secret}}}\n")
    config.chmod(0o644)
    try:
        r = rota_as(ALICE, daemon.home, "pipeline", "add", str(config))
    finally:
        shutil.rmtree(config.parent, ignore_errors=True)
    said = r.stdout + r.stderr
    assert r.returncode != 0 and "secrethash" not in said and "root:" not in said, said
    assert f"{secret}: cannot read it: Permission denied" in said, said
    with daemon.client() as c:
        assert c.pipelines()["pipelines"] == []
