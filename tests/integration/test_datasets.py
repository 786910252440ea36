"""Datasets through the CLI a person uses: `rota dataset add` (an upload in chunks, or a copy
of an S3 prefix), versions by content, a job that names one reads it at ROTA_DATASET_<NAME>
and writes outputs that come back byte-equal (with its workspace's file), on the local root
and on a real S3-protocol server (moto's); a job waits with its reason while its dataset
cannot be fetched, also across a daemon SIGKILL; the cache's size limit; removal refused
while a job reads the version."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rota_testing import DaemonProcess, free_port, patience, running_daemon, s3_server, wait_until

#: the job: its dataset's files and its workspace's file copied into its output folder
READER = r"""
import os, shutil, sys
src = os.environ["ROTA_DATASET_TEXT_MINI"]
shutil.copytree(src, "out/data")
with open(os.path.join(os.environ["ROTA_WORKSPACE"], "notes.txt"), "w") as f:
    f.write("kept in the workspace\n")
shutil.copy(os.path.join(os.environ["ROTA_WORKSPACE"], "notes.txt"), "out/notes.txt")
print("dataset at", src, flush=True)
"""


def make_dataset(folder: Path, salt: str = "") -> dict[str, bytes]:
    files = {"train.txt": ("the quick brown fox\n" * 5000 + salt).encode(),
             "sub/valid.jsonl": b'{"text": "hello"}\n' * 300,
             "sub/deeper/blob.bin": bytes(range(256)) * 40_000,  # ~10 MiB: several chunks
             "empty": b""}
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return files


def cli_json(d: DaemonProcess, *args: str) -> Any:
    r = d.cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def ended(d: DaemonProcess, job: int, timeout: float = 60) -> dict[str, Any]:
    with d.client() as c:
        got: dict[str, Any] = c.wait(job, timeout=patience(timeout))
    return got


def read_and_save(d: DaemonProcess, work: Path, dataset: str, *args: str) -> int:
    return d.submit("--gpus", "0", "--dataset", dataset, "--output", "out", *args, "--",
                    sys.executable, "-c", READER, cwd=work)


def saved(d: DaemonProcess, job: int, into: Path) -> dict[str, bytes]:
    deadline = patience(60)
    got = wait_until(lambda: (a := cli_json(d, "artifacts", str(job)))["state"] != "pending"
                   and a, timeout=deadline)
    assert got["state"] == "saved", got
    r = d.cli("artifacts", "get", str(job), "-o", str(into))
    assert r.returncode == 0, r.stderr
    return {p.relative_to(into).as_posix(): p.read_bytes()
            for p in sorted(into.rglob("*")) if p.is_file()}


def round_trip(d: DaemonProcess, tmp_path: Path, source: Path) -> tuple[int, dict[str, Any]]:
    """Add the folder, run the reader on it; the job's outputs as they came back."""
    files = make_dataset(source)
    added = cli_json(d, "dataset", "add", "text-mini", str(source), "-m", "a tiny corpus")
    assert added["made"] is True and added["version"]["ref"].endswith("/text-mini:v1")
    again = cli_json(d, "dataset", "add", "text-mini", str(source))
    assert again["made"] is False and again["version"]["digest"] == added["version"]["digest"]
    shown = cli_json(d, "dataset", "show", "text-mini")
    assert {f["path"]: f["sha256"] for f in shown["contents"]} == {
        rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}
    work = tmp_path / "work"
    work.mkdir()
    job = read_and_save(d, work, "text-mini")
    assert ended(d, job)["state"] == "completed", d.cli("logs", str(job)).stdout
    back = saved(d, job, tmp_path / "back")
    assert {k.removeprefix("out/data/"): v for k, v in back.items()
            if k.startswith("out/data/")} == files
    assert back["out/notes.txt"] == b"kept in the workspace\n"
    detail = cli_json(d, "show", str(job))
    assert detail["spec"]["datasets"] == [added["version"]["ref"]]  # resolved: stays v1
    return job, added["version"]


def test_a_job_reads_a_registered_dataset_and_its_outputs_come_back(tmp_path: Path) -> None:
    with running_daemon(tmp_path / "home") as d:
        job, v1 = round_trip(d, tmp_path, tmp_path / "corpus")
        cache = tmp_path / "home" / "dataset-cache" / v1["digest"]
        assert cache.is_dir() and str(cache) in d.cli("logs", str(job)).stdout
        assert oct(cache.stat().st_mode & 0o777) == oct(0o555)  # read-only, for every job
        assert (cache / "train.txt").stat().st_mode & 0o777 == 0o444
        # other content is another version; the first stays as it was
        (tmp_path / "corpus" / "train.txt").write_text("changed\n")
        v2 = cli_json(d, "dataset", "add", "text-mini", str(tmp_path / "corpus"))["version"]
        assert v2["version"] == 2 and v2["digest"] != v1["digest"]
        listed = cli_json(d, "dataset", "list")["datasets"]
        assert [(x["name"], x["version"], x["versions"]) for x in listed] == [
            ("text-mini", 2, [1, 2])]
        assert cli_json(d, "dataset", "show", "text-mini:v1")["digest"] == v1["digest"]
        # a spec file names them too (YAML `datasets:`); a bad item is named by its line
        specs, bad = tmp_path / "jobs.yaml", tmp_path / "bad.yaml"
        specs.write_text("- command: [sh, -c, 'ls \"$ROTA_DATASET_TEXT_MINI\"']\n"
                         "  gpus: 0\n  datasets: [text-mini:v1]\n")
        bad.write_text("- command: ['true']\n  gpus: 0\n  datasets: [no-such-set]\n")
        r = d.cli("submit", "-f", str(bad))
        assert r.returncode == 2 and "bad.yaml:1" in r.stderr \
            and "no dataset 'no-such-set'" in r.stderr, r.stderr
        from_file = int(cli_json(d, "submit", "-f", str(specs))["jobs"][0]["id"])
        assert cli_json(d, "show", str(from_file))["spec"]["datasets"] == [v1["ref"]]
        assert ended(d, from_file)["state"] == "completed"
        assert "train.txt" in d.cli("logs", str(from_file)).stdout
        assert cli_json(d, "dataset", "show", f"text-mini:{v1['digest'][:8]}")["version"] == 1
        # what cannot be: said, naming it, and nothing is queued
        for bad, said in ((["--dataset", "nope"], "no dataset 'nope'"),
                          (["--dataset", "text-mini:v9"], "no version 'v9'"),
                          (["--dataset", "Bad Name"], "datasets")):
            r = d.cli("submit", "--gpus", "0", *bad, "--", "true")
            assert r.returncode == 2 and said in r.stderr, (bad, r.stderr)
        r = d.cli("dataset", "add", "text-mini", str(tmp_path / "nowhere"))
        assert r.returncode == 2 and "nowhere" in r.stderr
        r = d.cli("dataset", "add", "Text Mini", str(tmp_path / "corpus"))
        assert r.returncode == 2 and "name" in r.stderr


def test_a_job_waits_for_a_dataset_it_cannot_fetch_and_runs_once_it_can(
        tmp_path: Path) -> None:
    """Its reason names the dataset and the trouble; a daemon SIGKILLed meanwhile finds
    the job waiting again and fetches at its restart."""
    home = tmp_path / "home"
    work = tmp_path / "work"
    work.mkdir()
    with running_daemon(home) as d:
        v1 = cli_json(d, "dataset", "add", "text-mini", str(tmp_path / "corpus")) \
            if make_dataset(tmp_path / "corpus") else None
        assert v1 is not None
        digest = v1["version"]["digest"]
        stored = home / "storage" / v1["version"]["key"] / "files" / digest / "train.txt"
        good = stored.read_bytes()
        stored.write_bytes(b"not what was registered")  # the store's copy went bad
        job = read_and_save(d, work, "text-mini")
        why = wait_until(lambda: (w := d.cli("why", str(job)).stdout)
                       and "cannot be fetched yet" in w and w, timeout=patience(30))
        assert "text-mini:v1" in why and "sha256" in why.lower(), why
        assert not (home / "dataset-cache" / digest).exists()  # never half there
        assert cli_json(d, "show", str(job))["state"] == "pending"
        d.kill()  # SIGKILL
    stored.write_bytes(good)
    with running_daemon(home) as d:
        assert ended(d, job)["state"] == "completed", d.cli("logs", str(job)).stdout
        assert (home / "dataset-cache" / digest / "train.txt").read_bytes() == good


def test_the_cache_keeps_to_its_limit_and_a_version_in_use_is_not_removed(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    with running_daemon(home, '[storage]\ndataset_cache_limit = "14M"\n') as d:
        refs = []
        for n in range(2):  # ~10 MiB each: one fits, not two
            folder = tmp_path / f"set{n}"
            make_dataset(folder, salt=str(n))
            refs.append(cli_json(d, "dataset", "add", f"part{n}", str(folder))["version"])
        for n in range(2):
            job = d.submit("--gpus", "0", "--dataset", f"part{n}", "--", sys.executable,
                           "-c", f"import os; print(os.listdir(os.environ['ROTA_DATASET_PART{n}"
                           "']))", cwd=work)
            assert ended(d, job)["state"] == "completed", d.cli("logs", str(job)).stdout
        cache = cli_json(d, "dataset", "list")["datasets"]
        assert [x["cached"] for x in cache] == [False, True]  # the least recently used left
        assert not (home / "dataset-cache" / refs[0]["digest"]).exists()
        # both at once cannot fit: refused at submit, saying so
        r = d.cli("submit", "--gpus", "0", "--dataset", "part0", "--dataset", "part1", "--",
                  "true")
        assert r.returncode == 2 and "dataset cache" in r.stderr, r.stderr
        # a version a job not ended reads stays; once it ended, it goes from store and cache
        held = d.submit("--gpus", "0", "--hold", "--dataset", "part1", "--", "true", cwd=work)
        r = d.cli("dataset", "rm", "part1")
        assert r.returncode != 0 and f"{held} (held)" in r.stderr, r.stderr
        assert d.cli("cancel", str(held)).returncode == 0
        gone = cli_json(d, "dataset", "rm", "part1")["removed"]
        assert [v["ref"] for v in gone] == [refs[1]["ref"]]
        assert not (home / "dataset-cache" / refs[1]["digest"]).exists()
        assert not (home / "storage" / refs[1]["key"]).exists()
        assert [x["name"] for x in cli_json(d, "dataset", "list")["datasets"]] == ["part0"]


# --- on an S3-protocol server -----------------------------------------------------------
try:
    import boto3
    import moto.server  # noqa: F401 - s3_server's
except ImportError:  # pragma: no cover - the test extra installs them
    boto3 = None

BUCKET = "rota-data"
SOURCE = "lab-corpora"


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    if boto3 is None:
        if os.environ.get("ROTA_REQUIRE_TORCH"):
            raise ImportError("boto3 and moto[server] are required here")
        pytest.skip("needs boto3 and moto[server] (pip install 'rota[test]')")
    with s3_server(tmp_path_factory.mktemp("aws"), BUCKET, SOURCE) as env:
        yield env


def untar(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


def test_on_s3_a_dataset_is_uploaded_or_copied_and_outputs_come_back_through_a_link(
        tmp_path: Path, aws: dict[str, str]) -> None:
    toml = f'[storage]\nurl = "s3://{BUCKET}/team-a"\n'
    (tmp_path / "home").mkdir()
    with running_daemon(tmp_path / "home", toml, env=aws) as d:
        job, v1 = round_trip(d, tmp_path, tmp_path / "corpus")
        assert v1["store"] == f"s3://{BUCKET}/team-a"
        assert not (tmp_path / "home" / "storage").exists()
        # a presigned link to one of the job's outputs: the bucket serves it, no account
        made = cli_json(d, "share-link", str(job), "out/data/sub/deeper/blob.bin",
                        "--presigned", "--expires", "1h")
        got = httpx.get(made["url"], timeout=30)
        assert got.status_code == 200 and got.content == bytes(range(256)) * 40_000
    s3 = boto3.client("s3", endpoint_url=aws["AWS_ENDPOINT_URL_S3"], region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    keys = {o["Key"] for o in s3.list_objects_v2(
        Bucket=BUCKET, Prefix=f"team-a/{v1['key']}/")["Contents"]}
    assert f"team-a/{v1['key']}/MANIFEST.json" in keys
    # a copy of a bucket's prefix, made by the daemon
    files = make_dataset(tmp_path / "upstream")
    for rel, data in files.items():
        s3.put_object(Bucket=SOURCE, Key=f"corpora/mini/{rel}", Body=data)
    s3.put_object(Bucket=SOURCE, Key="corpora/mini2/other.txt", Body=b"not this one")
    with running_daemon(tmp_path / "home", env=aws) as d:
        got = cli_json(d, "dataset", "add", "mirror", f"s3://{SOURCE}/corpora/mini",
                       "--shared")
        assert got["made"] is True and got["version"]["shared"] is True
        assert got["version"]["digest"] == v1["digest"]  # the same content, the same hash
        shown = cli_json(d, "dataset", "show", "mirror")
        assert {f["path"] for f in shown["contents"]} == set(files)
        r = d.cli("dataset", "add", "nothing", f"s3://{SOURCE}/no/such/prefix")
        assert r.returncode != 0 and "no object" in r.stderr, r.stderr


def test_a_share_link_serves_outputs_made_from_a_dataset(tmp_path: Path) -> None:
    port = free_port()
    toml = f'public_url = "http://127.0.0.1:{port}"\n'
    (tmp_path / "home").mkdir()
    with running_daemon(tmp_path / "home", toml,
                        env={"ROTA_LISTEN": f"127.0.0.1:{port}"}) as d:
        job, _ = round_trip(d, tmp_path, tmp_path / "corpus")
        made = cli_json(d, "share-link", str(job), "out/data", "--expires", "1h")
        got = httpx.get(made["url"], timeout=30)
        assert got.status_code == 200
        files = make_dataset(tmp_path / "again")
        assert untar(got.content) == {f"out/data/{k}": v for k, v in files.items()}


def test_an_add_cut_off_goes_on_from_what_the_daemon_has(tmp_path: Path) -> None:
    """The first 3 MiB of a file arrived before the connection was cut, and the daemon was
    SIGKILLed: adding the same folder again (the SDK's add_dataset, as `rota dataset add`
    does) sends the rest only, and the version is byte-equal."""
    source = tmp_path / "big"
    source.mkdir()
    blob = os.urandom(5 << 20)
    (source / "blob.bin").write_bytes(blob)
    (source / "small.txt").write_text("small\n")
    with running_daemon(tmp_path / "home") as d:
        from rota.client.uploads import dataset_files

        files = dataset_files(source)
        with d.client() as c:
            begun = c.request("POST", "/v1/dataset-uploads", json={
                "name": "big", "shared": False, "description": None, "source": str(source),
                "files": [f.entry for f in files]})
            up = begun["upload"]
            c.request("PUT", f"/v1/dataset-uploads/{up['id']}", content=blob[:3 << 20],
                      params={"path": "blob.bin", "offset": 0})
        d.kill()
        d.start()
        seen: list[tuple[int, int]] = []
        with d.client() as c:
            added = c.add_dataset("big", source, progress=lambda sent, total: seen.append(
                (sent, total)))
        assert seen[0] == (3 << 20, (5 << 20) + 6), seen[:3]  # it had that much already
        assert seen[-1] == ((5 << 20) + 6, (5 << 20) + 6)
        assert added["made"] is True and added["version"]["files"] == 2
        back = tmp_path / "back"
        job = d.submit("--gpus", "0", "--dataset", "big", "--", "sh", "-c",
                       f'cp "$ROTA_DATASET_BIG/blob.bin" {back}', cwd=tmp_path)
        assert ended(d, job)["state"] == "completed", d.cli("logs", str(job)).stdout
        assert back.read_bytes() == blob
