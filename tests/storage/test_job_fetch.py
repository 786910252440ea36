"""The job-side fetch of cluster pools: ``python -m rota.storage.job_fetch -- CMD...``
fetches the job's datasets into the node's cache, points their variables at them and
execs the command; or it says why not and exits 75 (may pass later) or 2.

End to end in a subprocess against a local root and a real S3-protocol server (moto's,
rota_testing.s3_server; skipped without boto3 and moto unless the run requires them), and
in-process for the settings and the exit statuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rota.errors import StorageError
from rota.storage import LocalStore, Manifest, ObjectStore, build_manifest
from rota.storage import job_fetch as jf
from rota.storage.cache import DatasetCache
from rota_testing import moto_s3

BUCKET = "rota-job-fetch"
SRC = Path(__file__).resolve().parents[2] / "src"
PRINT_A = ("import os, sys; print(open(os.environ['ROTA_DATASET_X'] + '/a.txt').read()); "
           "print('ROTA_DATASETS_FETCH' in os.environ); print(sys.argv[1:])")


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    yield from moto_s3(tmp_path_factory, BUCKET)


def publish(store: ObjectStore, tmp_path: Path, key: str, files: dict[str, bytes]) -> Manifest:
    folder = tmp_path / f"staged-{uuid.uuid4().hex[:8]}"
    for rel, body in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(body)
    m = build_manifest(folder, now=time.time())
    store.publish(key, folder, m)
    return m


def plan(store: str, *datasets: tuple[str, str, str, str], **kw: Any) -> str:
    return json.dumps({"store": store, "endpoint_url": None, "region": None, **kw,
                       "datasets": [{"env": e, "key": k, "digest": d, "ref": r}
                                    for e, k, d, r in datasets]})


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The module as a job runs it: a fresh interpreter with only these settings."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("ROTA_DATASET", "XDG_CACHE"))}
    return subprocess.run([sys.executable, "-m", "rota.storage.job_fetch", *argv],
                          env={**base, "PYTHONPATH": str(SRC), **env},
                          capture_output=True, text=True, timeout=120)


def test_wrap_runs_the_command_through_this_module() -> None:
    assert jf.wrap(["train.py", "--lr", "0.1 x"]) == [
        "python3", "-m", "rota.storage.job_fetch", "--", "train.py", "--lr", "0.1 x"]
    assert (jf.FETCH_ENV, jf.CACHE_ENV, jf.CACHE_LIMIT_ENV) == (
        "ROTA_DATASETS_FETCH", "ROTA_DATASET_CACHE", "ROTA_DATASET_CACHE_LIMIT")


def test_end_to_end_from_a_local_root(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    m = publish(store, tmp_path, "ds/alice/x", {"a.txt": b"hello from the dataset",
                                                "b/c.bin": b"\0" * 2048})
    env = {jf.FETCH_ENV: plan(f"file://{store.root}",
                              ("ROTA_DATASET_X", "ds/alice/x", m.digest(), "alice/x:v1")),
           jf.CACHE_ENV: str(tmp_path / "cache")}
    argv = ["--", sys.executable, "-c", PRINT_A, "an arg; not $HOME", "*"]
    done = run(argv, env)
    cached = tmp_path / "cache" / m.digest()
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello from the dataset\nFalse\n['an arg; not $HOME', '*']\n"
    assert done.stderr == f"rota: dataset alice/x:v1 ready at {cached} (2 files, 2.0K)\n"
    assert (cached / "a.txt").read_bytes() == b"hello from the dataset"
    store.delete("ds/alice/x")  # a second job on the node: a cache hit, no store
    again = run(argv, env)
    assert again.returncode == 0 and again.stdout == done.stdout, again.stderr
    exit_code = run(["--", sys.executable, "-c", "raise SystemExit(7)"], env)
    assert exit_code.returncode == 7 and exit_code.stdout == ""  # the command's status


def test_end_to_end_from_an_s3_bucket(tmp_path: Path, aws: dict[str, str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in aws.items():
        monkeypatch.setenv(name, value)
    from rota.storage import S3Store

    prefix = f"t/{uuid.uuid4().hex}"
    store = S3Store(BUCKET, prefix, region="us-east-1",
                    endpoint_url=aws["AWS_ENDPOINT_URL_S3"])
    m = publish(store, tmp_path, "datasets/x", {"a.txt": b"from s3"})
    fetch = plan(f"s3://{BUCKET}/{prefix}",
                 ("ROTA_DATASET_X", "datasets/x", m.digest(), "bob/x:latest"),
                 endpoint_url=aws["AWS_ENDPOINT_URL_S3"], region="us-east-1")
    env = {**{k: v for k, v in aws.items() if k != "AWS_ENDPOINT_URL_S3"},
           jf.FETCH_ENV: fetch, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    done = run(["--", sys.executable, "-c", PRINT_A], env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "from s3\nFalse\n[]\n"
    cached = tmp_path / "xdg" / "rota" / "datasets" / m.digest()
    assert done.stderr == f"rota: dataset bob/x:latest ready at {cached} (1 file, 7B)\n"


@pytest.mark.parametrize(("fetch", "why"), [
    ("{not json", "ROTA_DATASETS_FETCH is not JSON: "),
    ("[]", "ROTA_DATASETS_FETCH is not a JSON object"),
    ('{"datasets": []}', "'store' (the store's URL) is missing or not text"),
    ('{"store": "/s"}', "'datasets' is missing or not a list"),
    ('{"store": "/s", "region": 3, "datasets": []}', "'region' is not text or null: 3"),
    ('{"store": "/s", "datasets": [{"env": "1X", "key": "k", "digest": "' + "a" * 64 + '"}]}',
     "datasets[0]: 'env' '1X' is not a variable name"),
    ('{"store": "/s", "datasets": [{"env": "X", "key": "k", "digest": "abc"}]}',
     "datasets[0]: 'digest' 'abc' is not 64 lowercase hex digits"),
    ('{"store": "relative", "datasets": []}', "store 'relative': not a store URL"),
])
def test_a_bad_fetch_setting_exits_2_naming_it(tmp_path: Path, fetch: str, why: str) -> None:
    marker = tmp_path / "ran"
    done = run(["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
               {jf.FETCH_ENV: fetch, jf.CACHE_ENV: str(tmp_path / "cache")})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("rota: cannot fetch datasets: ") and why in done.stderr
    assert done.stderr.count("\n") == 1 and not marker.exists()


def test_a_key_missing_from_the_store_exits_2_naming_the_dataset(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    m = publish(store, tmp_path, "ds/there", {"a.txt": b"a"})
    marker = tmp_path / "ran"
    done = run(["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
               {jf.FETCH_ENV: plan(str(store.root),
                                   ("ROTA_DATASET_A", "ds/there", m.digest(), "alice/a:v1"),
                                   ("ROTA_DATASET_B", "ds/gone", "b" * 64, "alice/b:v3")),
                jf.CACHE_ENV: str(tmp_path / "cache")})
    assert done.returncode == 2 and not marker.exists()
    assert done.stderr.splitlines() == [
        f"rota: dataset alice/a:v1 ready at {tmp_path / 'cache' / m.digest()} (1 file, 1B)",
        f"rota: cannot fetch dataset alice/b:v3: {store.root}: no key 'ds/gone'"]


@pytest.mark.parametrize("argv", [[], ["python3", "-c", "pass"], ["--"], ["-x", "--", "ls"]])
def test_without_dashes_and_a_command_it_exits_2_with_usage(
        tmp_path: Path, argv: list[str]) -> None:
    done = run(argv, {jf.FETCH_ENV: plan(str(tmp_path))})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "usage: python -m rota.storage.job_fetch -- COMMAND [ARGS...]\n"


# --- in-process: the exec replaced by a recorder ------------------------------------------

class Execd(Exception):
    pass


@pytest.fixture
def execs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], dict[str, str]]]:
    got: list[tuple[list[str], dict[str, str]]] = []

    def execvp(file: str, args: list[str]) -> None:
        assert file == args[0]
        got.append((list(args), dict(os.environ)))
        raise Execd

    monkeypatch.setattr(os, "execvp", execvp)
    for name in list(os.environ):
        if name.startswith(("ROTA_DATASET", "XDG_CACHE")):
            monkeypatch.delenv(name)
    return got


def test_a_passing_store_failure_exits_75_and_others_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, execs: list[Any],
        capsys: pytest.CaptureFixture[str]) -> None:
    failure: list[Exception] = []

    class Failing(LocalStore):
        def manifest(self, key: str) -> Manifest | None:
            raise failure[0]

    monkeypatch.setattr(jf, "open_store", lambda url, **kw: Failing(Path(url)))
    monkeypatch.setenv(jf.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(jf.FETCH_ENV, plan(str(tmp_path), ("X", "k", "c" * 64, "a/k:v1")))
    for error, status in [(StorageError("s3://b/k: SlowDown", passing=True), 75),
                          (StorageError("s3://b/k: AccessDenied"), 2)]:
        failure[:] = [error]
        assert jf.main(["--", "true"]) == status
        assert capsys.readouterr().err == f"rota: cannot fetch dataset a/k:v1: {error}\n"
    assert execs == []


def test_the_cache_settings_and_keep_covering_all_the_jobs_datasets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, execs: list[Any],
        capsys: pytest.CaptureFixture[str]) -> None:
    store = LocalStore(tmp_path / "store")
    a, b, c = (publish(store, tmp_path, f"ds/{n}", {"f": n.encode() * 100}).digest()
               for n in "abc")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = tmp_path / "home" / ".cache" / "rota" / "datasets"
    assert jf.cache_root(os.environ) == root
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert jf.cache_root(os.environ) == root
    cache = DatasetCache(root, None)
    cache.fetch(store, "ds/a", a, now=1.0)  # an older job's: least recently used
    cache.fetch(store, "ds/c", c, now=2.0)
    store.delete("ds/a")  # so a must stay cached: it cannot be fetched again
    monkeypatch.setenv(jf.CACHE_LIMIT_ENV, "200")
    monkeypatch.setenv(jf.FETCH_ENV, plan(str(store.root), ("ROTA_DATASET_B", "ds/b", b, "b"),
                                          ("ROTA_DATASET_A", "ds/a", a, "a")))
    with pytest.raises(Execd):
        jf.main(["--", "train", "--epochs", "3"])
    [(argv, env)] = execs
    assert argv == ["train", "--epochs", "3"]
    assert env["ROTA_DATASET_A"] == str(root / a) and env["ROTA_DATASET_B"] == str(root / b)
    assert jf.FETCH_ENV not in env
    assert [e.digest for e in cache.entries()] == [b, a]  # c went, not a (kept: the job's)
    assert capsys.readouterr().err.splitlines() == [
        f"rota: dataset b ready at {root / b} (1 file, 100B)",
        f"rota: dataset a ready at {root / a} (1 file, 100B)"]
    monkeypatch.setenv(jf.CACHE_LIMIT_ENV, "100")  # both cannot fit: nothing is evicted
    monkeypatch.setenv(jf.FETCH_ENV, plan(str(store.root), ("X", "ds/c", c, "c"),
                                          ("Y", "ds/b", b, "b")))
    assert jf.main(["--", "train"]) == 2
    assert capsys.readouterr().err.startswith("rota: cannot fetch dataset c: dataset cache ")
    monkeypatch.setenv(jf.CACHE_LIMIT_ENV, "10G")
    assert jf.main(["--", "train"]) == 2
    assert capsys.readouterr().err == \
        "rota: cannot fetch datasets: ROTA_DATASET_CACHE_LIMIT='10G' is not a number of bytes\n"
    monkeypatch.setenv(jf.CACHE_ENV, str(tmp_path / "elsewhere"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jf.cache_root(os.environ) == tmp_path / "elsewhere"
    monkeypatch.delenv(jf.CACHE_ENV)
    assert jf.cache_root(os.environ) == tmp_path / "xdg" / "rota" / "datasets"
    assert len(execs) == 1


def test_an_unset_fetch_setting_or_a_command_not_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(jf.FETCH_ENV, raising=False)
    assert jf.main(["--", "true"]) == 2
    assert capsys.readouterr().err == \
        "rota: nothing to bring: neither ROTA_DATASETS_FETCH nor ROTA_WORKSPACE_SYNC is set\n"
    monkeypatch.setenv(jf.FETCH_ENV, plan(str(tmp_path / "store")))  # no datasets
    monkeypatch.setenv(jf.CACHE_ENV, str(tmp_path / "cache"))
    assert jf.main(["--", str(tmp_path / "no-such-program")]) == 127
    assert capsys.readouterr().err == \
        f"rota: cannot run {str(tmp_path / 'no-such-program')!r}: No such file or directory\n"


def test_the_command_holds_its_versions_so_no_other_job_evicts_them(tmp_path: Path) -> None:
    """The hold is inherited through the exec: while the command runs, the version's
    ``.inuse`` lock is held (another process's eviction passes it over); after, not."""
    store = LocalStore(tmp_path / "store")
    m = publish(store, tmp_path, "ds/alice/x", {"a.txt": b"x" * 100})
    lock = tmp_path / "cache" / ".inuse" / m.digest()
    probe = ("import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\n"
             "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('free')\n"
             "except BlockingIOError:\n    print('held')\n")
    env = {jf.FETCH_ENV: plan(f"file://{store.root}",
                              ("ROTA_DATASET_X", "ds/alice/x", m.digest(), "alice/x:v1")),
           jf.CACHE_ENV: str(tmp_path / "cache")}
    done = run(["--", sys.executable, "-c", probe, str(lock)], env)
    assert done.returncode == 0 and done.stdout == "held\n", done.stderr
    after = subprocess.run([sys.executable, "-c", probe, str(lock)], capture_output=True,
                           text=True, timeout=60)
    assert after.stdout == "free\n"
