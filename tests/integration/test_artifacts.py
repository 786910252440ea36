"""A job's outputs (``--output DIR``), saved when it ends to the artifact store, on the
local root and on a real S3-protocol server (moto's), through the CLI a person uses:
the list with sizes and sha256, `rota artifacts get` byte-equal, links in the job's
folder never followed, a size limit that says why, and a daemon SIGKILLed while it saves
that shows nothing half-saved and finishes the save after its restart.

Skipped without boto3 and moto (only the S3 test) unless the run requires them
(ROTA_REQUIRE_TORCH, set by scripts/test.sh, which installs them)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rota.errors import InvalidSpec
from rota.storage import LocalStore
from rota_testing import (
    DaemonProcess,
    free_port,
    kill_job_processes,
    patience,
    running_daemon,
    s3_server,
)

WRITER = r"""
import os, sys
out = sys.argv[1]
os.makedirs(f"{out}/sub/deeper", exist_ok=True)
open(f"{out}/a.txt", "w").write("hello from the job\n")
open(f"{out}/empty", "wb").close()
open(f"{out}/sub/b.bin", "wb").write(bytes(range(256)) * 12289)  # ~3 MiB
open(f"{out}/sub/deeper/c.json", "w").write('{"loss": 0.25}')
os.symlink("/etc/passwd", f"{out}/passwd-link")
for step in range(1, 6):
    print(f"step {step}/5 loss={1.0 / step:.4f}", flush=True)
"""
MANY = r"""
import os, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for i in range(int(sys.argv[2])):
    open(f"{out}/f{i:05d}.txt", "w").write(f"file {i}\n" * 50)
"""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def files_under(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def artifacts(d: DaemonProcess, job: int) -> dict[str, Any]:
    r = d.cli("artifacts", str(job), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def wait_saved(d: DaemonProcess, job: int, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + patience(timeout)
    while True:
        got = artifacts(d, job)
        if got["state"] != "pending":
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job}'s outputs still pending: {got}")
        time.sleep(0.1)


def run_writer(d: DaemonProcess, work: Path, script: str, *args: str) -> int:
    job = d.submit("--gpus", "0", "--output", "out", "--name", "writer", "--", sys.executable,
                   "-c", script, "out", *args, cwd=work)
    with d.client() as c:
        assert c.wait(job, timeout=patience(60))["state"] == "completed"
    return job


def check_round_trip(d: DaemonProcess, work: Path, job: int, tmp: Path) -> dict[str, Any]:
    """The list matches what the job wrote, and `get` brings it back byte-equal."""
    got = wait_saved(d, job)
    assert got["state"] == "saved", got
    wrote = {f"out/{k}": v for k, v in files_under(work / "out").items()}
    card = {f["path"] for f in got["files"] if f["path"].startswith("rota-card/")}
    assert card == {"rota-card/card.md", "rota-card/card.html", "rota-card/loss.svg"}
    assert {f["path"]: (f["size"], f["sha256"]) for f in got["files"]
            if f["path"] not in card} == {k: (len(v), sha(v)) for k, v in wrote.items()}
    assert "out/passwd-link: a link, not followed" in got["notes"]

    dest = tmp / f"got-{job}"
    r = d.cli("artifacts", "get", str(job), "-o", str(dest))
    assert r.returncode == 0, r.stderr
    got_back = files_under(dest)
    saved_card = got_back.pop("rota-card/card.md").decode()
    assert "| loss | 0.2 | 0.2 | 1 | 5 |" in saved_card, saved_card
    assert "| out/sub/b.bin | 3145984 |" in saved_card  # what it saved, with the card
    assert got_back.pop("rota-card/loss.svg").startswith(b"<svg")
    assert b"<h1>writer (job" in got_back.pop("rota-card/card.html")
    assert got_back == wrote
    one = tmp / f"one-{job}.bin"
    r = d.cli("artifacts", "get", str(job), "out/sub/b.bin", "-o", str(one))
    assert r.returncode == 0, r.stderr
    assert one.read_bytes() == wrote["out/sub/b.bin"]
    r = d.cli("artifacts", "get", str(job), "out/sub/b.bin", "-o", str(one))
    assert r.returncode != 0 and "exists; --force replaces it" in r.stderr
    r = d.cli("artifacts", "get", str(job), "out/nothing")
    assert r.returncode != 0 and "saved no file or folder 'out/nothing'" in r.stderr
    return got


def test_outputs_are_saved_to_the_local_root_and_come_back_byte_equal(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with running_daemon(tmp_path / "home") as d:
        job = run_writer(d, work, WRITER)
        got = check_round_trip(d, work, job, tmp_path)
        assert got["store"] == str(tmp_path / "home" / "storage")
        assert (tmp_path / "home" / "storage" / "jobs" / str(job) / "MANIFEST.json").exists()
        # the job page's events say so
        r = d.cli("show", str(job))
        assert "outputs saved: 7 files" in r.stdout, r.stdout
        # its card now, with the saved files' sha256, as Markdown or as one HTML page
        r = d.cli("card", str(job))
        assert r.returncode == 0, r.stderr
        assert "# writer (job" in r.stdout and "| loss | 0.2 | 0.2 | 1 | 5 |" in r.stdout
        assert f"| out/a.txt | 19 | `{sha(b'hello from the job' + bytes([10]))[:16]}` |" \
            in r.stdout, r.stdout
        r = d.cli("card", str(job), "--json")  # the same facts for a program
        assert r.returncode == 0, r.stderr
        facts = json.loads(r.stdout)
        assert facts["id"] == job and facts["metrics"]["loss"]["last"] == 0.2
        assert {"path": "out/a.txt", "size": 19,
                "sha256": sha(b"hello from the job" + bytes([10]))} in facts["outputs"]
        r = d.cli("card", str(job), "--json", "--html")
        assert r.returncode != 0 and "choose one" in r.stdout + r.stderr
        page = tmp_path / "card.html"
        r = d.cli("card", str(job), "--html", "-o", str(page))
        assert r.returncode == 0, r.stderr
        assert page.read_text().startswith("<!doctype html>") and "<polyline" in \
            page.read_text()
        # relative outputs with no cwd to be relative to are refused, with why
        with d.client() as c, pytest.raises(InvalidSpec, match="names no cwd"):
            c.submit([{"command": ["true"], "gpus": 0, "outputs": ["out"]}])
        # a job that names no outputs has none to list
        plain = d.submit("--gpus", "0", "--", "true", cwd=work)
        r = d.cli("artifacts", str(plain))
        assert r.returncode != 0 and "names no outputs" in r.stderr


def test_outputs_over_the_limit_are_not_saved_and_say_why(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "home").mkdir()
    with running_daemon(tmp_path / "home", "[storage]\nmax_output_bytes = \"1M\"\n") as d:
        job = run_writer(d, work, WRITER)  # ~3 MiB
        got = wait_saved(d, job)
        assert got["state"] == "failed"
        assert "max_output_bytes" in got["error"] and "none were saved" in got["error"]
        assert got["files"] == []
        with d.client() as c:
            assert c.job(job)["state"] == "completed"  # the job itself is not failed for it
        assert not (tmp_path / "home" / "storage" / "jobs" / str(job)).exists()


def test_a_daemon_killed_while_it_saves_finishes_after_its_restart(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    d = DaemonProcess(home).start()
    try:
        job = d.submit("--gpus", "0", "--output", "out", "--", sys.executable, "-c", MANY,
                       "out", "3000", cwd=work)
        deadline = time.monotonic() + patience(60)
        while True:  # the job has ended and its save begun: kill the daemon in its midst
            with d.client() as c:
                state = c.job(job)["state"]
            if state == "completed" and artifacts(d, job)["state"] == "pending":
                break
            assert state not in ("failed", "cancelled"), state
            assert time.monotonic() < deadline, "the job did not end"
            time.sleep(0.01)
        d.kill()
        # nothing half-saved: a reader of the store finds no set for the job, or all of it
        store = LocalStore(home / "storage")
        if store.manifest(f"jobs/{job}") is not None:
            assert len(store.fetch(f"jobs/{job}", tmp_path / "seen").files) == 3000
        d.start()
        got = wait_saved(d, job)
        assert got["state"] == "saved", got["error"]
        assert len(got["files"]) == 3000 + 2  # and its card (no metrics: no curve)
        dest = tmp_path / "got"
        r = d.cli("artifacts", "get", str(job), "out", "-o", str(dest))
        assert r.returncode == 0, r.stderr
        assert files_under(dest) == {f"out/{k}": v
                                     for k, v in files_under(work / "out").items()}
        assert list((home / "staging").iterdir()) == []  # the killed save's staging: gone
    finally:
        d.stop()
        kill_job_processes(home)


# --- on an S3-protocol server -----------------------------------------------------------
try:
    import boto3
    import moto.server  # noqa: F401 - s3_server's
except ImportError:  # pragma: no cover - the test extra installs them
    boto3 = None

BUCKET = "rota-artifacts"


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    if boto3 is None:
        if os.environ.get("ROTA_REQUIRE_TORCH"):
            raise ImportError("boto3 and moto[server] are required here")
        pytest.skip("needs boto3 and moto[server] (pip install 'rota[test]')")
    with s3_server(tmp_path_factory.mktemp("aws"), BUCKET) as env:
        yield env


def test_outputs_are_saved_to_an_s3_bucket_and_come_back_byte_equal(
        tmp_path: Path, aws: dict[str, str]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    toml = f'[storage]\nurl = "s3://{BUCKET}/team-a"\n'
    (tmp_path / "home").mkdir()
    with running_daemon(tmp_path / "home", toml, env=aws) as d:
        job = run_writer(d, work, WRITER)
        got = check_round_trip(d, work, job, tmp_path)
        assert got["store"] == f"s3://{BUCKET}/team-a"
    s3 = boto3.client("s3", endpoint_url=aws["AWS_ENDPOINT_URL_S3"], region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET,
                                                 Prefix=f"team-a/jobs/{job}/")["Contents"]}
    assert f"team-a/jobs/{job}/MANIFEST.json" in keys
    assert not (tmp_path / "home" / "storage").exists()  # nothing went to the local root


# --- links that need no account ---------------------------------------------------------
def link(d: DaemonProcess, *args: str) -> dict[str, Any]:
    r = d.cli("share-link", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def untar(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


def test_a_share_link_works_without_an_account_until_revoked_or_expired(
        tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    port = free_port()
    home = tmp_path / "home"
    with running_daemon(home) as d:
        r = d.cli("share-link", "1")
        assert r.returncode != 0  # no job 1 yet
        job = run_writer(d, work, WRITER)
        wait_saved(d, job)
        wrote = {f"out/{k}": v for k, v in files_under(work / "out").items()}
        # without a TCP listener there is nowhere to serve a link from: it says what to do
        r = d.cli("share-link", str(job), "out/a.txt")
        assert r.returncode != 0 and "--listen" in r.stderr, r.stderr
    d = DaemonProcess(home, args=["--listen", f"127.0.0.1:{port}"]).start()
    try:
        one = link(d, str(job), "out/sub/b.bin", "--expires", "1h")
        assert one["url"].startswith(f"http://127.0.0.1:{port}/share/")
        assert one["expires_at"] - one["created_at"] == pytest.approx(3600, abs=1)
        got = httpx.get(one["url"])  # no token: the link is the credential
        assert got.status_code == 200
        assert got.content == wrote["out/sub/b.bin"]
        assert got.headers["x-rota-sha256"] == sha(wrote["out/sub/b.bin"])
        folder = link(d, str(job), "out/sub")
        assert untar(httpx.get(folder["url"]).content) == {
            k: v for k, v in wrote.items() if k.startswith("out/sub/")}
        everything = link(d, str(job))
        whole = untar(httpx.get(everything["url"]).content)
        assert {k: v for k, v in whole.items() if k.startswith("out/")} == wrote
        assert set(whole) - set(wrote) == {"rota-card/card.md", "rota-card/card.html",
                                           "rota-card/loss.svg"}

        listed = link(d, "list", str(job))["links"]
        assert [x["id"] for x in listed] == [everything["id"], folder["id"], one["id"]]
        assert all(x["url"] is None for x in listed)  # the URL is shown once, never again
        assert listed[-1]["downloads"] == 1 and listed[-1]["active"]

        revoked = link(d, "revoke", str(one["id"]))
        assert revoked["revoked_at"] is not None and not revoked["active"]
        gone = httpx.get(one["url"])
        assert gone.status_code == 410 and "revoked" in gone.json()["detail"]
        assert httpx.get(folder["url"]).status_code == 200  # the others still work

        short = link(d, str(job), "out/a.txt", "--expires", "1s")
        time.sleep(1.5)
        late = httpx.get(short["url"])
        assert late.status_code == 410 and "expired" in late.json()["detail"]
        wrong = one["url"].rsplit("/", 1)[0] + "/" + "x" * 32
        assert httpx.get(wrong).status_code == 404

        r = d.cli("share-link", str(job), "--expires", "31d")
        assert r.returncode != 0 and "30 days" in r.stderr
        r = d.cli("share-link", str(job), "out/nothing")
        assert r.returncode != 0 and "no file or folder 'out/nothing'" in r.stderr
        r = d.cli("share-link", str(job), "out/a.txt", "--presigned")
        assert r.returncode != 0 and "needs an S3 store" in r.stderr
    finally:
        d.stop()
        kill_job_processes(home)


def test_a_presigned_link_from_the_bucket_serves_one_file(
        tmp_path: Path, aws: dict[str, str]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "home").mkdir()
    with running_daemon(tmp_path / "home", f'[storage]\nurl = "s3://{BUCKET}/links"\n',
                        env=aws) as d:
        job = run_writer(d, work, WRITER)
        wait_saved(d, job)
        got = link(d, str(job), "out/sub/b.bin", "--presigned", "--expires", "2h")
        assert got["kind"] == "presigned" and got["id"] is None
        assert got["url"].startswith(aws["AWS_ENDPOINT_URL_S3"])
        assert "X-Amz-Expires=7200" in got["url"]
        assert httpx.get(got["url"]).content == (work / "out/sub/b.bin").read_bytes()
        r = d.cli("share-link", str(job), "out", "--presigned")
        assert r.returncode != 0 and "serves one file" in r.stderr
        r = d.cli("share-link", str(job), "out/a.txt", "--presigned", "--expires", "8d")
        assert r.returncode != 0 and "7 days" in r.stderr
