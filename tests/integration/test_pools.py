"""Pools through the daemon: `rota pools` (health and capabilities as each engine reports
them), `rota render JOB --pool NAME` (what the engine would be handed), and rota.toml's
pools read once at start-up with clear errors."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from backends.kubernetes.schemas import validate
from rota_testing import DaemonProcess, free_port, running_daemon

SECRET = "tok-9f8e7d-do-not-show"
TOML = """
[pools.hpc]
engine = "slurm"
shared_workspaces = true
partition = "gpu"
bin_dir = "{bin_dir}"

[pools.ray]
engine = "ray"
shared_workspaces = true
address = "http://127.0.0.1:{dead_port}"

[pools.k8s]
engine = "kubernetes"
workspace_claim = "team-workspaces"
namespace = "ml"
image = "python:3.11-slim"
kueue_queue = "team-a"
checkpoint_claim = "checkpoints"
kubeconfig = "{home}/no-kubeconfig"
"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    home = tmp_path_factory.mktemp("pools")
    no_slurm = home / "no-slurm"  # a Slurm client that is not installed
    no_slurm.mkdir()
    toml = TOML.format(bin_dir=no_slurm, dead_port=free_port(), home=home)
    with running_daemon(home, toml) as d:
        yield d


def test_pools_lists_this_machine_first_then_each_cluster_as_its_engine_answers(
        daemon: DaemonProcess) -> None:
    r = daemon.cli("pools", "--json")
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    by_name = {p["name"]: p for p in answer["pools"]}
    assert answer["default"] == "local" and answer["pools"][0]["name"] == "local"
    local = by_name["local"]
    assert local["health"]["reachable"] and local["health"]["gpus_total"] == 4
    assert local["capabilities"] is None
    # whether `--image` jobs run here and get GPUs (this daemon's are simulated)
    containers = local["containers"]
    assert containers["gpus"] == ("simulated" if containers["available"] else "none")
    assert all(p["containers"] is None for p in answer["pools"] if p["name"] != "local")
    hpc = by_name["hpc"]
    assert not hpc["health"]["reachable"]
    assert hpc["health"]["message"].startswith("sinfo not found in ")
    assert hpc["settings"]["partition"] == "gpu" and hpc["capabilities"]["multi_node"]
    assert by_name["k8s"]["capabilities"]["images"]
    ray = by_name["ray"]  # no head listens there
    assert not ray["health"]["reachable"] and ray["capabilities"]["fractional_gpus"]
    k8s = by_name["k8s"]["health"]  # its kubeconfig names no file
    assert not k8s["reachable"] and k8s["message"].startswith("cannot load the kubeconfig ")
    human = subprocess.run([sys.executable, "-m", "rota", "pools"],  # a pipe, 80 wide
                           env={**daemon.env, "COLUMNS": "80"}, capture_output=True,
                           text=True, timeout=60, check=False)
    assert human.returncode == 0, human.stderr
    assert all(len(line) <= 80 for line in human.stdout.splitlines()), human.stdout
    assert "local (default)" in human.stdout and "sinfo not found" in human.stdout
    assert "containers (--image): " in human.stdout


def test_render_prints_valid_manifests_without_secret_values(daemon: DaemonProcess) -> None:
    job = daemon.submit("--name", "train", "--hold", "--gpus", "1", "--env", "A=1",
                        "--secret-env", f"TOKEN={SECRET}", "--", "python", "train.py",
                        "--lr", "1e-3")
    r = daemon.cli("render", "train", "--pool", "k8s")
    assert r.returncode == 0, r.stderr
    assert SECRET not in r.stdout
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    for doc in docs:
        validate(doc)
    [work] = docs
    assert work["kind"] == "Job" and work["metadata"]["labels"]["rota.dev/job"] == str(job)
    assert work["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    pod = work["spec"]["template"]["spec"]["containers"][0]
    assert [pod["command"], pod["args"]] == [["python"], ["train.py", "--lr", "1e-3"]]
    assert {"name": "A", "value": "1"} in pod["env"]
    token = next(e for e in pod["env"] if e["name"] == "TOKEN")
    # the attempt's own Secret, written from the stored value at submit
    assert "value" not in token and token["valueFrom"]["secretKeyRef"]["key"] == "TOKEN"
    assert token["valueFrom"]["secretKeyRef"]["name"].endswith(f"-{job}-1-secrets")
    shown = json.loads(daemon.cli("render", str(job), "--pool", "k8s", "--json").stdout)
    assert shown["pool"] == "k8s" and shown["engine"] == "kubernetes" and SECRET not in str(shown)


def test_a_mounted_file_and_a_model_become_a_configmap_and_an_init_container(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    config = tmp_path / "eval.yaml"
    config.write_text("tasks: [arc_easy]\nlimit: 50\n")
    job = daemon.submit("--hold", "--pool", "k8s", "--gpus", "1", "--mount-file",
                        f"/etc/eval/config.yaml={config}", "--model", "runs:/0a1b2c/model",
                        "--", "lm_eval", "--config", "/etc/eval/config.yaml")
    r = daemon.cli("render", str(job), "--pool", "k8s")
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    for doc in docs:
        validate(doc)
    files, work = docs
    assert files["kind"] == "ConfigMap" and list(files["data"].values()) == [config.read_text()]
    pod = work["spec"]["template"]["spec"]
    [fetch] = pod["initContainers"]
    assert fetch["command"][:5] == ["mlflow", "artifacts", "download", "--artifact-uri",
                                    "runs:/0a1b2c/model"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/etc/eval/config.yaml"]["readOnly"] and mounts["/models"]["readOnly"]
    assert {"name": "ROTA_MODEL_DIR", "value": "/models"} in pod["containers"][0]["env"]


def test_render_for_slurm_and_ray_quotes_the_command_and_refuses_what_it_cannot_honour(
        daemon: DaemonProcess) -> None:
    daemon.submit("--name", "plain", "--hold", "--gpus", "2", "--time-limit", "90m",
                  "--", "python", "-c", "print('a b; c')")
    r = daemon.cli("render", "plain", "--pool", "hpc")
    assert r.returncode == 0, r.stderr
    assert "--partition=gpu" in r.stdout and "--job-name=rota-" in r.stdout
    assert "exec python -c 'print('\"'\"'a b; c'\"'\"')'" in r.stdout, r.stdout
    ray = daemon.cli("render", "plain", "--pool", "ray")
    assert ray.returncode == 0, ray.stderr
    body = json.loads(ray.stdout.split("\n", 1)[1])  # after the "# POST <address>" line
    assert shlex.split(body["entrypoint"])[-3:] == ["python", "-c", "print('a b; c')"]
    assert body["submission_id"].startswith("rota-")
    daemon.submit("--name", "secretive", "--hold", "--secret-env", f"T={SECRET}", "--", "true")
    secretive = daemon.cli("render", "secretive", "--pool", "hpc")
    assert secretive.returncode == 0 and SECRET not in secretive.stdout, secretive.stderr
    daemon.submit("--name", "half", "--hold", "--gpus", "0.5", "--", "true")
    refused = daemon.cli("render", "half", "--pool", "hpc")  # the pool has no shards
    assert refused.returncode != 0 and "shard" in refused.stderr, refused.stderr


def test_a_gpu_type_goes_to_each_engine_in_its_words(daemon: DaemonProcess) -> None:
    """No GPU here is an A100: the job waits for a cluster (held), rendered for each."""
    job = daemon.submit("--pool", "hpc", "--hold", "--gpus", "2", "--gpu-type", "A100",
                        "--", "python", "train.py")
    shown = json.loads(daemon.cli("show", str(job), "--json").stdout)["spec"]
    assert (shown["gpu_type"], shown["allowed_gpus"], shown["pool"]) == ("A100", None, "hpc")
    slurm = daemon.cli("render", str(job), "--pool", "hpc")
    assert slurm.returncode == 0, slurm.stderr
    assert "--gres=gpu:A100:2" in slurm.stdout.split(), slurm.stdout  # an sbatch option
    k8s = daemon.cli("render", str(job), "--pool", "k8s")
    assert k8s.returncode == 0, k8s.stderr
    [work] = [d for d in yaml.safe_load_all(k8s.stdout) if d]
    validate(work)
    pod = work["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["nvidia.com/gpu.product"] == "A100"
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    ray = daemon.cli("render", str(job), "--pool", "ray")
    assert ray.returncode == 0, ray.stderr
    body = json.loads(ray.stdout.split("\n", 1)[1])
    assert body["entrypoint_resources"] == {"accelerator_type:A100": 0.001}, body
    daemon.cli("cancel", str(job))


def test_render_names_an_unknown_pool(daemon: DaemonProcess) -> None:
    job = daemon.submit("--hold", "--", "true")
    r = daemon.cli("render", str(job), "--pool", "nope")
    assert r.returncode != 0, r.stdout
    assert "no pool 'nope'; the pools are: hpc, k8s, local, ray" in r.stderr, r.stderr


def test_render_for_this_machine_shows_what_its_runner_starts(daemon: DaemonProcess) -> None:
    job = daemon.submit("--hold", "--env", "B=two words", "--secret-env", f"K={SECRET}",
                        "--", "python", "-c", "print(1)")
    r = daemon.cli("render", str(job))
    assert r.returncode == 0, r.stderr
    assert SECRET not in r.stdout and "# env: K=<secret>" in r.stdout
    assert "# env: B='two words'" in r.stdout and "python -c 'print(1)'" in r.stdout


def test_a_bad_pool_in_rota_toml_stops_the_daemon_with_the_setting_named(
        tmp_path: Path) -> None:
    (tmp_path / "rota.toml").write_text('[pools.hpc]\nengine = "slurm"\npartiton = "gpu"\n')
    r = subprocess.run([sys.executable, "-m", "rota", "server", "--simulate", "1x24G"],
                       env={**DaemonProcess(tmp_path).env}, capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode != 0
    assert "setting pools.hpc.partiton: Extra inputs are not permitted" in r.stderr


@pytest.mark.parametrize(("args", "words"), [
    (["--cpus", "4"], "cpus: limits a container or a cluster's engine enforces"),
    (["--memory", "8G", "--network"], "memory, network: limits a container"),
    (["--image", "busybox:1", "--session", "tmux"], "a container job runs in no tmux"),
    (["--pool", "k8s", "--gpus", "0.5"], "pool k8s: Kubernetes gives whole GPUs only"),
    (["--model", "runs:/0a1b/model"], "model: put into the job's pod by a Kubernetes pool"),
    (["--mount-file", "/etc/a.yaml=/no/such/file"], "--mount-file /etc/a.yaml=/no/such/file: "
                                                     "cannot read /no/such/file as text"),
    (["--pool", "hpc", "--model", "s3://bucket/m"],
     "pool hpc: the Slurm engine does not fetch a model before the job"),
    (["--pool", "hpc", "--allowed-gpus", "0-1"],
     "allowed_gpus: GPU indices are this machine's; on a slurm pool the engine picks the "
     "GPUs on its nodes: drop allowed_gpus (gpu_type asks for a kind of GPU)"),
    (["--pool", "k8s", "--cuda-arg"],
     "cuda_arg: --cuda carries the indices of the GPUs Rota picked on this machine; on a "
     "kubernetes pool the engine picks them"),
    (["--pool", "hpc", "--gpus", "0", "--gpu-type", "A100"],
     "gpu_type 'A100' names a kind of GPU but gpus=0 asks for none"),
    (["--gpu-type", "A100"], "gpu_type: no GPU here is of type A100 (a part of the GPU's "
                             "name, any case): this machine has 4 x Rota simulated GPU (24 GiB)"),
])
def test_container_and_pool_options_that_cannot_hold_are_refused(
        daemon: DaemonProcess, args: list[str], words: str) -> None:
    r = daemon.cli("submit", *args, "--", "true")
    assert r.returncode != 0 and words in r.stderr, r.stderr


def test_the_two_node_lora_job_renders_as_a_valid_pytorchjob(daemon: DaemonProcess,
                                                             tmp_path: Path) -> None:
    r = daemon.cli("submit", "--template", "lora-finetune", "--pool", "hpc", "--hold",
                   "--set", "nodes=2", "--set", "gpus=0", "--set", "device=cpu", "--json",
                   cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    job = json.loads(r.stdout)["jobs"][0]["id"]
    out = daemon.cli("render", str(job), "--pool", "k8s")
    assert out.returncode == 0, out.stderr
    [work] = [d for d in yaml.safe_load_all(out.stdout) if d]
    validate(work)  # against the PyTorchJob v1.9.0 CRD
    assert work["kind"] == "PyTorchJob" and work["spec"]["nprocPerNode"] == "1"
    replicas = work["spec"]["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 1)
    args = replicas["Master"]["template"]["spec"]["containers"][0]["args"]
    assert "--nnodes" in args and "2" in args



def test_a_workspace_is_offered_never_required_on_a_pool_that_gives_none(
        tmp_path: Path) -> None:
    """Yesterday's plain submit to a Slurm or Ray pool whose nodes share no workspaces is
    accepted and runs without ROTA_WORKSPACE (stored as workspace: false, shown); only a
    job that asks for one (--workspace, YAML workspace: true) is refused, with the reason,
    and nothing of that submit is queued."""
    no_slurm = tmp_path / "no-slurm"
    no_slurm.mkdir()
    toml = (f'[pools.hpc]\nengine = "slurm"\nbin_dir = "{no_slurm}"\n\n'
            f'[pools.rc]\nengine = "ray"\naddress = "http://127.0.0.1:{free_port()}"\n')
    with running_daemon(tmp_path, toml) as d:
        for pool in ("hpc", "rc"):
            job = d.submit("--pool", pool, "--hold", "--gpus", "1", "--", "python", "train.py")
            shown = json.loads(d.cli("show", str(job), "--json").stdout)
            assert shown["spec"]["workspace"] is False and shown["spec"]["pool"] == pool
            human = d.cli("show", str(job)).stdout
            assert "workspace" in human and "none (no ROTA_WORKSPACE)" in human, human
        before = len(d.client().jobs(limit=100))
        asked = d.cli("submit", "--pool", "hpc", "--workspace", "--", "true")
        assert asked.returncode != 0
        assert ("workspace: pool hpc gives its jobs no workspace: it needs "
                "shared_workspaces = true") in asked.stderr, asked.stderr
        assert "without --workspace" in asked.stderr, asked.stderr
        jobs = tmp_path / "jobs.yaml"
        jobs.write_text(yaml.safe_dump({"jobs": [
            {"name": "plain", "pool": "rc", "command": ["true"]},
            {"name": "asks", "pool": "rc", "workspace": True, "command": ["true"]}]}))
        assert len(d.client().jobs(limit=100)) == before  # nothing of that submit queued
        # each spec of a file stands alone: the plain one is queued, the other refused
        from_file = d.cli("submit", "-f", str(jobs))
        assert from_file.returncode == 2 and "workspace: pool rc" in from_file.stderr
        [queued] = [j for j in d.client().jobs(limit=100) if j["name"] in ("plain", "asks")]
        shown = json.loads(d.cli("show", str(queued["id"]), "--json").stdout)
        assert shown["name"] == "plain" and shown["spec"]["workspace"] is False
        # this machine's pool gives one, asked or not
        here = d.submit("--workspace", "--hold", "--", "true")
        assert json.loads(d.cli("show", str(here), "--json").stdout)["spec"]["workspace"]
