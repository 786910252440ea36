"""A Kubernetes pool through the whole daemon: `rota submit --pool k8s` is handed to the
engine (Secret, ConfigMap, Job), followed by the Job's id as its pod moves on, its log
copied, and `rota cancel` deletes the Job with the job's grace; an unschedulable pod is
why the job waits; a daemon killed before the Job's create was answered finds it again.

No API server can run here: the daemon's real ``kubernetes`` client talks HTTP to a small
stateful fake on 127.0.0.1 (fake_api.py) that answers with the recorded, schema-valid
objects of conversations/job.yaml (only names, uids, Rota's labels and times changed) and
checks each request, the created bodies against the strict schemas of the render tests.
The fake, not a cluster, moves each Job on (``fake.advance``): the test says when its pod is
unschedulable, running (with its log), complete, and when a deleted Job's pods are gone.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.backends.kubernetes.fake_api import FakeApi, FakeJob
from tests.backends.kubernetes.replay import kubeconfig

from rota_testing import DaemonProcess, kill_job_processes, wait_until

TOML = """
[pools.k8s]
engine = "kubernetes"
workspace_claim = "team-workspaces"
kubeconfig = "{kubeconfig}"
context = "replay"
namespace = "ml"
poll_every = 0.2
"""
SECRET = "hf_k8s-daemon-secret-4711"
COMMAND = ("--", "python", "-c", "print('hi')")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DaemonProcess, FakeApi]]:
    home = tmp_path_factory.mktemp("k8s")
    fake = FakeApi().start()
    config = kubeconfig(home / "kubeconfig", fake.url)
    (home / "rota.toml").write_text(TOML.format(kubeconfig=config))
    daemon = DaemonProcess(home).start()
    try:
        yield daemon, fake
    finally:
        daemon.stop()
        kill_job_processes(home)
        fake.stop()
    assert not fake.errors, fake.errors


@pytest.fixture
def daemon(cluster: tuple[DaemonProcess, FakeApi]) -> Iterator[DaemonProcess]:
    yield cluster[0]
    assert not cluster[1].errors, cluster[1].errors  # each test's own requests were right


@pytest.fixture
def fake(cluster: tuple[DaemonProcess, FakeApi]) -> FakeApi:
    return cluster[1]


def job_view(d: DaemonProcess, job_id: int) -> dict[str, Any]:
    with d.client() as c:
        return dict(c.job(job_id))


def handed(fake: FakeApi, job_id: int) -> FakeJob:
    """The Job the daemon created for Rota's job ``job_id`` (its first attempt)."""
    def made() -> FakeJob | None:
        return next((j for j in list(fake.jobs.values())
                     if j.body["metadata"]["labels"]["rota.dev/job"] == str(job_id)), None)
    found: FakeJob = wait_until(made, 30, what=f"job {job_id}'s Job in the fake cluster")
    return found


def wait_state(d: DaemonProcess, job_id: int, state: str) -> dict[str, Any]:
    view: dict[str, Any] = wait_until(
        lambda: (v := job_view(d, job_id))["state"] == state and v, 30,
        what=f"job {job_id} {state}")
    return view


def wait_engine(d: DaemonProcess, job_id: int, **want: Any) -> dict[str, Any]:
    """The job's view once the engine's last word (``engine`` in the view) says ``want``."""
    def said() -> dict[str, Any] | None:
        v = job_view(d, job_id)
        got = v.get("engine") or {}
        return v if all(got.get(k) == x for k, x in want.items()) else None
    view: dict[str, Any] = wait_until(said, 30, what=f"job {job_id}'s engine saying {want}")
    return view


def wait_end(d: DaemonProcess, job_id: int) -> dict[str, Any]:
    r = d.cli("wait", str(job_id), "--timeout", "60", timeout=90)
    assert r.returncode in (0, 1, 2, 3), r.stderr
    return job_view(d, job_id)


def test_a_job_is_handed_over_followed_to_its_end_and_its_log_copied(
        daemon: DaemonProcess, fake: FakeApi, tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("lr: 0.1\n")
    job_id = daemon.submit("--pool", "k8s", "--image", "python:3.11-slim",
                           "--secret-env", f"HF_TOKEN={SECRET}",
                           "--mount-file", f"/etc/app/config.yaml={tmp_path / 'config.yaml'}",
                           *COMMAND, cwd=tmp_path)
    job = handed(fake, job_id)
    key = job.name
    assert key.startswith("rota-") and key.endswith(f"-{job_id}-1"), key

    # what the daemon created (each body valid against the strict schemas: the fake checks)
    [secret] = [s.json() for s in fake.requests("POST", "/secrets")
                if s.json()["metadata"]["name"] == f"{key}-secrets"]
    assert secret["stringData"] == {"HF_TOKEN": SECRET}
    [files] = [s.json() for s in fake.requests("POST", "/configmaps")
               if s.json()["metadata"]["name"] == f"{key}-files"]
    assert files["immutable"] is True and list(files["data"].values()) == ["lr: 0.1\n"]
    [container] = job.body["spec"]["template"]["spec"]["containers"]
    assert (container["image"], container["command"], container["args"]) == (
        "python:3.11-slim", ["python"], ["-c", "print('hi')"])
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": f"{key}-secrets", "key": "HF_TOKEN"}}} in container["env"]
    assert job.body["spec"]["ttlSecondsAfterFinished"] == 3600
    # the value travels in the Secret's create and nowhere else
    carrying = [(s.method, s.path) for s in fake.seen if SECRET.encode() in s.body
                or SECRET in s.path or SECRET in str(s.query)]
    assert carrying == [("POST", "/api/v1/namespaces/ml/secrets")], carrying
    # then both are the Job's own: its deletion (TTL or a stop) takes them along
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": key, "uid": job.uid}
    wait_until(lambda: fake.owners("secrets", f"{key}-secrets") == [ref]
               and fake.owners("configmaps", f"{key}-files") == [ref], 30,
               what="the Secret and ConfigMap owned by the Job")

    # Kubernetes has the Job, no pod yet: Rota's job is starting, waiting there
    view = wait_engine(daemon, job_id, state="queued", reason="no pod created yet")
    assert view["state"] == "starting"
    assert view["engine"]["backend"] == "kubernetes:k8s"
    assert view["engine"]["id"] == f"job/{key}"

    fake.advance(key, "running", log=b"hi\n")
    view = wait_state(daemon, job_id, "running")
    shown = daemon.cli("show", str(job_id))
    assert f"kubernetes:k8s job job/{key}" in shown.stdout, shown.stdout
    why = " ".join(daemon.cli("why", str(job_id)).stdout.split())
    assert f"handed to kubernetes:k8s as job job/{key}; it runs there on gpu-node-2" in why, why
    wait_until(lambda: "hi" in daemon.cli("logs", str(job_id)).stdout.splitlines(), 30,
               what="the pod's log in rota logs")

    fake.advance(key, "complete")
    done = wait_end(daemon, job_id)
    assert (done["state"], done["exit_code"]) == ("completed", 0), done
    [attempt] = done["attempts_detail"]
    assert attempt["backend"] == "kubernetes:k8s", attempt
    logs = daemon.cli("logs", str(job_id)).stdout
    assert logs.splitlines()[-1] == "hi", logs  # copied once, not again at the end
    assert "handed to kubernetes:k8s" in logs, logs

    # the Job ended of itself: Rota deletes nothing; the Job's TTL (3600 s) and the owner
    # references leave the clean-up to the cluster
    assert not [s for s in fake.seen if s.method == "DELETE" and key in s.path]
    assert fake.owners("secrets", f"{key}-secrets") == [ref]
    shown_json = daemon.cli("show", str(job_id), "--json").stdout
    assert SECRET not in shown_json and SECRET not in logs
    assert SECRET not in daemon.log_text()
    # ended, the job no longer has the engine's live word; its events keep the engine id
    events = [e["message"] for e in json.loads(shown_json)["events"]]
    assert f"handed to kubernetes:k8s as job job/{key}" in events, events


def test_cancel_deletes_the_job_with_its_grace_and_the_job_ends_cancelled(
        daemon: DaemonProcess, fake: FakeApi, tmp_path: Path) -> None:
    job_id = daemon.submit("--pool", "k8s", "--image", "python:3.11-slim", "--grace", "45s",
                           "--secret-env", f"HF_TOKEN={SECRET}", *COMMAND, cwd=tmp_path)
    job = handed(fake, job_id)
    key = job.name
    assert job.body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 45
    wait_until(lambda: fake.owners("secrets", f"{key}-secrets"), 30,
               what="the Secret owned by the Job")
    fake.advance(key, "running", log=b"hi\n")
    wait_state(daemon, job_id, "running")

    r = daemon.cli("cancel", str(job_id))
    assert r.returncode == 0, r.stderr
    deletes = wait_until(lambda: fake.requests("DELETE", f"/jobs/{key}"), 30,
                         what="the Job's DELETE")
    assert deletes[0].query == {"gracePeriodSeconds": "45", "propagationPolicy": "Foreground"}
    # the pod has its grace: the Job reads "being deleted" and Rota's job has not ended
    view = wait_engine(daemon, job_id, reason="being deleted (stopping)")
    assert view["state"] == "running", view

    fake.finish_deletion(key)  # the pod is gone: so are the Job and what it owns
    done = wait_end(daemon, job_id)
    assert done["state"] == "cancelled", done
    assert f"{key}-secrets" not in fake.secrets
    # one stop: no second DELETE (a kill) came before the job ended
    assert len(fake.requests("DELETE", f"/jobs/{key}")) == 1


def test_an_unschedulable_pod_is_why_the_job_waits_in_the_schedulers_words(
        daemon: DaemonProcess, fake: FakeApi, tmp_path: Path) -> None:
    job_id = daemon.submit("--pool", "k8s", "--image", "python:3.11-slim", *COMMAND,
                           cwd=tmp_path)
    key = handed(fake, job_id).name
    fake.advance(key, "unschedulable")
    words = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    wait_engine(daemon, job_id, state="queued", reason=words)
    why = daemon.cli("why", str(job_id)).stdout
    assert f"handed to kubernetes:k8s as job job/{key}; it waits there: {words}" in \
        " ".join(why.split()), why
    assert job_view(daemon, job_id)["state"] == "starting"

    fake.advance(key, "pulling")
    wait_engine(daemon, job_id, reason='ImagePullBackOff: Back-off pulling image '
                                       '"busybox:1.36"')

    assert daemon.cli("cancel", str(job_id)).returncode == 0
    wait_until(lambda: fake.requests("DELETE", f"/jobs/{key}"), 30, what="the Job's DELETE")
    fake.finish_deletion(key)
    assert wait_end(daemon, job_id)["state"] == "cancelled"


def test_a_daemon_killed_before_the_jobs_answer_finds_it_again_and_makes_nothing_twice(
        daemon: DaemonProcess, fake: FakeApi, tmp_path: Path) -> None:
    """SIGKILL while the API server's answer to the Job's create is on its way: the Job
    exists, the daemon never heard. Restarted, it finds the Job by its key (no second
    create), makes the Secret and ConfigMap made before the crash the Job's own (or they
    would outlive it, the secret's value with them), and follows the Job to its end."""
    (tmp_path / "config.yaml").write_text("lr: 0.2\n")
    answer, held = threading.Event(), threading.Event()

    def hold(seen: Any) -> None:
        if seen.method == "POST" and seen.path.endswith("/jobs"):
            held.set()
            answer.wait(60)

    fake.before_answer = hold
    try:
        job_id = daemon.submit("--pool", "k8s", "--image", "python:3.11-slim",
                               "--secret-env", f"HF_TOKEN={SECRET}", "--mount-file",
                               f"/etc/app/config.yaml={tmp_path / 'config.yaml'}", *COMMAND,
                               cwd=tmp_path)
        assert held.wait(30), "the Job was not created"
        key = handed(fake, job_id).name
        daemon.kill()
    finally:
        fake.before_answer = None
        answer.set()
    assert fake.owners("secrets", f"{key}-secrets") == []  # the crash came first
    daemon.start()

    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": key, "uid": fake.jobs[key].uid}
    wait_until(lambda: fake.owners("secrets", f"{key}-secrets") == [ref]
               and fake.owners("configmaps", f"{key}-files") == [ref], 30,
               what="the Secret and ConfigMap made the Job's own after the restart")
    fake.advance(key, "running", log=b"hi\n")
    wait_state(daemon, job_id, "running")
    fake.advance(key, "complete")
    done = wait_end(daemon, job_id)
    assert (done["state"], done["exit_code"]) == ("completed", 0), done
    for kind in ("secrets", "configmaps", "jobs"):
        made = [s for s in fake.requests("POST", f"/{kind}") if key in s.body.decode()]
        assert len(made) == 1, (kind, made)
    assert "hi" in daemon.cli("logs", str(job_id)).stdout.splitlines()


def test_the_fake_refuses_what_the_engine_must_not_send() -> None:
    """The fake's checks bite: an invalid Job body, a request the engine never makes and a
    missing token are answered 500 and kept as errors (which fail the daemon tests)."""
    import urllib.error
    import urllib.request

    from tests.backends.kubernetes.replay import TOKEN

    fake = FakeApi().start()
    try:
        def send(method: str, path: str, body: Any = None, token: str = TOKEN) -> int:
            req = urllib.request.Request(
                fake.url + path, method=method,
                data=None if body is None else json.dumps(body).encode(),
                headers={"Authorization": f"Bearer {token}",
                         "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return int(resp.status)
            except urllib.error.HTTPError as exc:
                return int(exc.code)

        bad_job = {"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"name": "rota-1-1", "labels": {"rota.dev/key": "rota-1-1"}},
                   "spec": {"template": {"spec": {"containers": [
                       {"name": "job", "image": "busybox:1.36", "gpus": 1}],
                       "restartPolicy": "Never"}}}}
        assert send("POST", "/apis/batch/v1/namespaces/ml/jobs", bad_job) == 500
        assert send("GET", "/apis/batch/v1/namespaces/other/jobs/rota-1-1") == 500
        assert send("GET", "/api/v1/nodes", token="wrong") == 500
        assert send("GET", "/api/v1/nodes") == 200
    finally:
        fake.stop()
    assert len(fake.errors) == 3, fake.errors
    assert "the Job is not valid" in fake.errors[0] and "gpus" in fake.errors[0], fake.errors
    assert not fake.jobs
