"""A Slurm pool through the whole daemon: `rota submit --pool hpc` is forwarded in Rota's
order within the pool's max_in_flight, followed by Slurm's id to its end (exit code, log,
`rota wait`), cancelled through the stop handshake, and refused at submit when Slurm cannot
honour it. Against the private Slurm of tests/backends/slurm."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from bench.baselines.slurm import PARTITION, PrivateSlurm

from rota_testing import DaemonProcess, kill_job_processes, unix_accounts, wait_until

from .daemon_slurm import daemon_over, job_view, wait_end

TOML = """
[pools.hpc]
engine = "slurm"
slurm_conf = "{conf}"
max_in_flight = 2
shared_workspaces = true

[pools.hpc-bare]
engine = "slurm"
slurm_conf = "{conf}"
"""


@pytest.fixture(scope="module")
def daemon(slurm: PrivateSlurm, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[DaemonProcess]:
    with daemon_over(slurm, tmp_path_factory.mktemp("pool"), TOML) as d:
        yield d


def test_a_job_runs_on_slurm_and_ends_with_its_code_and_output(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    ok = daemon.submit("--pool", "hpc", "--gpus", "0", "--", "sh", "-c",
                       "echo hello from $(hostname); exit 0", cwd=tmp_path)
    bad = daemon.submit("--pool", "hpc", "--gpus", "0", "--", "sh", "-c", "exit 3",
                        cwd=tmp_path)
    done = wait_end(daemon, ok)
    assert done["state"] == "completed" and done["exit_code"] == 0, done
    assert done["spec"]["pool"] == "hpc"
    logs = daemon.cli("logs", str(ok))
    assert "hello from" in logs.stdout and "handed to slurm:hpc" in logs.stdout, logs.stdout
    failed = wait_end(daemon, bad)
    assert failed["state"] == "failed" and failed["exit_code"] == 3, failed
    [attempt] = failed["attempts_detail"]
    assert attempt["backend"] == "slurm:hpc"


def test_the_pool_holds_at_most_max_in_flight_and_the_rest_wait_in_rotas_order(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    ids = [daemon.submit("--pool", "hpc", "--gpus", "0", "--", "sleep", "30", cwd=tmp_path)
           for _ in range(3)]
    wait_until(lambda: job_view(daemon, ids[1])["state"] in ("starting", "running"), 30,
               what="the first two handed to Slurm")
    why = daemon.cli("why", str(ids[2]))
    assert "pool hpc holds 2 of Rota's jobs" in why.stdout, why.stdout
    wait_until(lambda: "it runs there" in daemon.cli("why", str(ids[0])).stdout, 30,
               what="Slurm's word that it runs")
    shown = job_view(daemon, ids[0])["engine"]
    assert shown["backend"] == "slurm:hpc" and shown["state"] == "running", shown
    assert f"handed to slurm:hpc as job {shown['id']}" in daemon.cli("why", str(ids[0])).stdout
    human = daemon.cli("show", str(ids[0])).stdout
    assert "hpc" in human and f"slurm:hpc job {shown['id']} running" in human, human
    assert job_view(daemon, ids[2])["state"] == "pending"
    cancel = daemon.cli("cancel", str(ids[0]))
    assert cancel.returncode == 0, cancel.stderr
    assert wait_end(daemon, ids[0])["state"] == "cancelled"
    wait_until(lambda: job_view(daemon, ids[2])["state"] in ("starting", "running"), 30,
               what="the third handed over once the first ended")
    for job_id in ids[1:]:
        daemon.cli("cancel", str(job_id))
        assert wait_end(daemon, job_id)["state"] == "cancelled"


JOBS_YAML = """
jobs:
  - command: sh -c 'echo yaml-on-slurm $SLURM_JOB_ID'
    gpus: 0
    pool: hpc
  - command: sh -c 'echo yaml-here'
    gpus: 0
  - command: sh -c 'echo yaml-on-slurm-too $SLURM_JOB_ID'
    gpus: 0
    pool: hpc
"""


def test_a_yaml_file_sends_the_items_naming_a_pool_there_and_the_others_here(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    (tmp_path / "jobs.yaml").write_text(JOBS_YAML)
    r = daemon.cli("submit", "-f", "jobs.yaml", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    hpc, here, hpc_too = (int(j["id"]) for j in json.loads(r.stdout)["jobs"])
    for job_id, pool, backend in ((hpc, "hpc", "slurm:hpc"), (here, None, "local"),
                                  (hpc_too, "hpc", "slurm:hpc")):
        done = wait_end(daemon, job_id)
        assert (done["state"], done["spec"]["pool"]) == ("completed", pool), done
        [attempt] = done["attempts_detail"]
        assert attempt["backend"] == backend, done
    slurm_out = daemon.cli("logs", str(hpc)).stdout
    assert "handed to slurm:hpc" in slurm_out, slurm_out
    [line] = [x for x in slurm_out.splitlines() if x.startswith("yaml-on-slurm ")]
    assert line.split()[1].isdigit(), line  # Slurm's job id: it ran under Slurm
    assert "yaml-here" in daemon.cli("logs", str(here)).stdout.splitlines()


@pytest.mark.parametrize(("args", "words"), [
    (["--gpus", "0.5"], "pool hpc: "),
    (["--pool", "nope"], "no pool 'nope'; the pools are: hpc, hpc-bare, local"),
    (["--session", "tmux"], "a slurm pool runs no tmux or screen sessions"),
])
def test_what_the_pool_cannot_honour_is_refused_at_submit(
        daemon: DaemonProcess, args: list[str], words: str) -> None:
    r = daemon.cli("submit", "--pool", "hpc", *args, "--", "true")
    assert r.returncode != 0 and words in r.stderr, r.stderr


def test_a_two_node_job_runs_once_on_each_node(daemon: DaemonProcess, tmp_path: Path) -> None:
    job = daemon.submit("--pool", "hpc", "--gpus", "0", "--nodes", "2", "--", "sh", "-c",
                        "echo rank-on-node-$SLURM_NODEID of $SLURM_JOB_NUM_NODES",
                        cwd=tmp_path)
    done = wait_end(daemon, job)
    assert (done["state"], done["exit_code"]) == ("completed", 0), done
    out = daemon.cli("logs", str(job)).stdout
    assert "rank-on-node-0 of 2" in out and "rank-on-node-1 of 2" in out, out


def test_more_than_one_node_on_this_machine_is_refused(daemon: DaemonProcess) -> None:
    r = daemon.cli("submit", "--pool", "local", "--nodes", "2", "--", "true")
    assert r.returncode != 0 and "this machine is one node" in r.stderr, r.stderr



@contextlib.contextmanager
def partition_down(slurm: PrivateSlurm) -> Iterator[None]:
    """Slurm queues jobs in a DOWN partition and starts none of them until it is UP."""
    def state(value: str) -> None:
        subprocess.run(["scontrol", "update", f"PartitionName={PARTITION}", f"State={value}"],
                       env=slurm.env, check=True, capture_output=True, timeout=30)
    state("DOWN")
    try:
        yield
    finally:
        state("UP")


def test_a_job_waiting_in_slurm_is_starting_and_its_time_limit_counts_from_its_start(
        daemon: DaemonProcess, slurm: PrivateSlurm, tmp_path: Path) -> None:
    with partition_down(slurm):
        job = daemon.submit("--pool", "hpc", "--gpus", "0", "--time-limit", "4s",
                            "--grace", "1s", "--", "sh", "-c", "echo up; sleep 120",
                            cwd=tmp_path)
        wait_until(lambda: "PartitionDown" in daemon.cli("why", str(job)).stdout, 30,
                   what="Slurm's reason for holding it back")
        waiting = job_view(daemon, job)
        assert (waiting["state"], waiting["started_at"]) == ("starting", None), waiting
        assert waiting["engine"]["state"] == "queued", waiting
        time.sleep(6)  # past its 4 s time limit, counted from the hand-over
        assert job_view(daemon, job)["state"] == "starting"
        released = time.time()
    wait_until(lambda: job_view(daemon, job)["state"] != "starting", 60, every=0.3,
               what="the job to start once the partition is up")
    ended = wait_end(daemon, job)
    assert ended["state"] == "timeout", ended
    assert ended["started_at"] >= released - 1, (ended, released)
    assert 3 <= ended["ended_at"] - ended["started_at"] < 30, ended
    assert "up" in daemon.cli("logs", str(job)).stdout.splitlines()


def test_a_token_users_job_runs_on_slurm_as_their_unix_account(slurm: PrivateSlurm) -> None:
    """A root daemon: dave's token maps to Unix account rtu-dave (`rota user add --unix`), so
    his job goes to Slurm through `runuser -u rtu-dave -- sbatch` and runs as rtu-dave."""
    if os.geteuid() != 0:
        pytest.skip("a job as another account needs a root daemon")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = Path(tempfile.mkdtemp(prefix="rota-runas-"))  # pytest's folders are root's
    os.chmod(home, 0o755)  # as /var/lib/rota's parents: every account may pass
    (home / "rota.toml").write_text(TOML.format(conf=slurm.env["SLURM_CONF"]))
    d = DaemonProcess(home, args=["--listen", f"127.0.0.1:{port}"]).start()
    try:
        with unix_accounts("rtu-dave") as uids, d.client() as c:
            c.add_user("dave", unix_account="rtu-dave")
            token = c.create_token("dave")["token"]
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                              headers={"Authorization": f"Bearer {token}"}) as api:
                r = api.post("/v1/jobs", json={"jobs": [{
                    "command": ["sh", "-c", "echo user=$(id -un) uid=$(id -u) home=$HOME"],
                    "pool": "hpc"}]})
                assert r.status_code == 201, r.text
                job_id = r.json()["jobs"][0]["id"]
            done = wait_end(d, job_id)
            logs = d.cli("logs", str(job_id)).stdout
            assert done["state"] == "completed", (logs, json.dumps(done)[-1500:])
            assert f"user=rtu-dave uid={uids['rtu-dave']} home=/home/rtu-dave" in logs, logs
    finally:
        d.stop()
        kill_job_processes(home)
        shutil.rmtree(home, ignore_errors=True)


def test_a_job_on_slurm_fetches_its_dataset_itself_before_its_command(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    """The cluster's node has no daemon: the job's own first step (rota.storage.job_fetch)
    fetches the version from the store, verified, into the node's cache, and the command
    finds it at ROTA_DATASET_<NAME>. This store is a local folder the cluster shares."""
    data = tmp_path / "corpus"
    (data / "sub").mkdir(parents=True)
    (data / "a.txt").write_text("hello from the dataset\n")
    (data / "sub" / "b.bin").write_bytes(bytes(range(256)) * 100)
    r = daemon.cli("dataset", "add", "slurm-corpus", str(data), "--json")
    assert r.returncode == 0, r.stderr
    version = json.loads(r.stdout)["version"]
    cache = tmp_path / "node-cache"
    job = daemon.submit("--pool", "hpc", "--gpus", "0", "--dataset", "slurm-corpus",
                        "--env", f"ROTA_DATASET_CACHE={cache}", "--shell", "--",
                        'cat "$ROTA_DATASET_SLURM_CORPUS/a.txt"; '
                        'wc -c < "$ROTA_DATASET_SLURM_CORPUS/sub/b.bin"', cwd=tmp_path)
    done = wait_end(daemon, job)
    logs = daemon.cli("logs", str(job)).stdout
    assert done["state"] == "completed", logs
    assert f"rota: dataset {version['ref']} ready at {cache / version['digest']}" in logs, logs
    assert "hello from the dataset" in logs and "25600" in logs, logs
    assert (cache / version["digest"] / "a.txt").read_text() == "hello from the dataset\n"
    assert done["spec"]["datasets"] == [version["ref"]]


def test_a_pool_that_shares_workspaces_gives_its_jobs_the_same_folder_as_here(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    """On a pool whose nodes see the workspaces folder, a Slurm job and a job on this
    machine of the same user and project share ROTA_WORKSPACE; on a pool that shares none a
    plain job runs without one (yesterday's submits keep working), and only a job that
    asks for one (--workspace) is refused at submit, with the reason and the ways out."""
    first = daemon.submit("--pool", "hpc", "--gpus", "0", "--project", "slurmws",
                          "--", "sh", "-c", 'echo from-slurm > "$ROTA_WORKSPACE/note"',
                          cwd=tmp_path)
    assert wait_end(daemon, first)["state"] == "completed"
    here = daemon.submit("--gpus", "0", "--project", "slurmws", "--", "sh", "-c",
                         'cat "$ROTA_WORKSPACE/note"', cwd=tmp_path)
    assert wait_end(daemon, here)["state"] == "completed"
    assert "from-slurm" in daemon.cli("logs", str(here)).stdout
    before = len(daemon.client().jobs(limit=1000))
    r = daemon.cli("submit", "--pool", "hpc-bare", "--gpus", "0", "--workspace", "--",
                   "true", cwd=tmp_path)
    assert r.returncode != 0, r.stdout
    assert ("workspace: pool hpc-bare gives its jobs no workspace: it needs "
            "shared_workspaces = true") in r.stderr, r.stderr
    assert "--workspace" in r.stderr and "workspace_url" in r.stderr, r.stderr
    assert len(daemon.client().jobs(limit=1000)) == before  # nothing queued
    for flags in ((), ("--no-workspace",)):
        bare = daemon.submit("--pool", "hpc-bare", "--gpus", "0", *flags, "--", "sh", "-c",
                             'echo "workspace=[${ROTA_WORKSPACE:-}]"', cwd=tmp_path)
        done = wait_end(daemon, bare)
        assert done["state"] == "completed" and done["spec"]["workspace"] is False, done
        assert "workspace=[]" in daemon.cli("logs", str(bare)).stdout


def test_with_a_bucket_home_a_slurm_job_brings_its_workspace_and_sends_it_back(
        slurm: PrivateSlurm, tmp_path: Path) -> None:
    """A pool whose nodes share no folder, and workspaces whose home is a bucket (a real
    S3-protocol server): the job syncs its own copy on its node (rota.storage.job_workspace)
    before its command, and sends back what the command wrote after it, also when the
    command fails; a job on this machine of the same workspace then reads it."""
    pytest.importorskip("moto.server")
    from rota_testing import s3_server

    with s3_server(tmp_path / "aws", "ws-slurm") as aws:
        import boto3

        s3 = boto3.client("s3", endpoint_url=aws["AWS_ENDPOINT_URL_S3"],
                          region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
        s3.put_object(Bucket="ws-slurm", Key=f"team/{getpass.getuser()}/sync/seed.txt",
                      Body=b"seeded in the bucket\n")
        toml = (f'[storage]\nworkspace_url = "s3://ws-slurm/team"\n'
                f'endpoint_url = "{aws["AWS_ENDPOINT_URL_S3"]}"\n'
                '[pools.hpc]\nengine = "slurm"\nslurm_conf = "{conf}"\n')
        node = tmp_path / "node"
        creds = [f"--env={k}={v}" for k, v in aws.items()]
        (tmp_path / "home").mkdir()
        with daemon_over(slurm, tmp_path / "home", toml, env=aws) as d:
            job = d.submit("--pool", "hpc", "--gpus", "0", "--project", "sync",
                           f"--env=ROTA_WORKSPACE_CACHE={node}", *creds, "--shell", "--",
                           'cat "$ROTA_WORKSPACE/seed.txt" && echo "at=$ROTA_WORKSPACE" && '
                           'echo "made on slurm" > "$ROTA_WORKSPACE/out.txt" && exit 3',
                           cwd=tmp_path)
            done = wait_end(d, job)
            logs = d.cli("logs", str(job)).stdout
            assert (done["state"], done["exit_code"]) == ("failed", 3), logs
            me = done["user"]
            assert "seeded in the bucket" in logs and f"at={node / me / 'sync'}" in logs, logs
            assert f"rota: workspace {me}/sync sent back (1 uploaded)" in logs, logs
            got = s3.get_object(Bucket="ws-slurm", Key=f"team/{me}/sync/out.txt")["Body"].read()
            assert got == b"made on slurm\n"
            here = d.submit("--gpus", "0", "--project", "sync", "--", "sh", "-c",
                            'cat "$ROTA_WORKSPACE/out.txt"', cwd=tmp_path)
            assert wait_end(d, here)["state"] == "completed"
            assert "made on slurm" in d.cli("logs", str(here)).stdout
