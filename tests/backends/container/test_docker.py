"""The container backend against a real, private dockerd (see conftest.py)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rota.backends.base import ExitInfo, Handle, RunAs
from rota.backends.container import ContainerBackend, ContainerExit, ContainerRequest
from rota.errors import BackendError

from ..conftest import wait_exit, wait_text
from .conftest import IMAGE, Jobs


def run(backend: ContainerBackend, req: ContainerRequest, timeout: float = 30) -> ExitInfo:
    """Launch, wait on the watch fd, collect."""
    h = backend.launch(req)
    fd = backend.watch(h)
    assert fd is not None
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        assert ready, "the watch fd did not turn readable"
        info = backend.collect(h, os.read(fd, 4096))
    finally:
        os.close(fd)
    assert info is not None
    return info


def log_body(req: ContainerRequest) -> str:
    """The log without its header line."""
    header, _, body = req.log_path.read_text().partition("\n")
    assert header == req.log_header
    return body


@pytest.mark.parametrize("script,code", [("true", 0), ("exit 3", 3)])
def test_exit_code_recorded(backend: ContainerBackend, jobs: Jobs, script: str,
                            code: int) -> None:
    info = run(backend, jobs.req(script))
    assert (info.exit_code, info.signal, info.success) == (code, None, code == 0)
    assert isinstance(info, ContainerExit) and not info.oom_killed
    assert info.ended_at is not None and abs(info.ended_at - time.time()) < 60


def test_output_lands_in_log(backend: ContainerBackend, jobs: Jobs) -> None:
    """Both streams, each in its order; Docker reads them through two pipes, so the order
    between a stdout and a stderr line written at once is not kept (docs/containers.md)."""
    req = jobs.req("echo out1; echo err1 >&2; echo out2; printf 'no newline'")
    run(backend, req)
    body = log_body(req)
    assert sorted(body.splitlines()) == ["err1", "no newline", "out1", "out2"]
    assert body.index("out1") < body.index("out2") < body.index("no newline")


def test_env_and_secret_reach_the_job_not_the_records(backend: ContainerBackend,
                                                      jobs: Jobs) -> None:
    secret = "s3cr3t-value-xyz"
    req = jobs.req('echo "foo=$FOO"; printf %s "$API_TOKEN" > token.txt; '
                   'echo "token has ${#API_TOKEN} chars"',
                   env={"FOO": "bar", "API_TOKEN": secret})
    h = backend.launch(req)
    wait_exit(backend, h, 30)
    assert log_body(req) == f"foo=bar\ntoken has {len(secret)} chars\n"
    assert (jobs.workspace / "token.txt").read_text() == secret
    for text in (json.dumps(h.to_json()), req.status_path.read_text()):
        assert secret not in text
    container = backend.docker.containers.get(h.extra["container"])
    assert secret not in json.dumps(container.labels)
    # the documented limit: Docker keeps the job's environment in the container's config
    assert f"API_TOKEN={secret}" in container.attrs["Config"]["Env"]


def test_isolation_defaults(backend: ContainerBackend, jobs: Jobs) -> None:
    req = jobs.req("touch /in-root 2>/dev/null && echo root-writable || echo root-read-only; "
                   "echo x > /tmp/t && echo tmp-writable; echo y > made-here && echo ws-ok; "
                   "ls /sys/class/net; id -u; pwd")
    assert run(backend, req).exit_code == 0
    assert log_body(req).split() == ["root-read-only", "tmp-writable", "ws-ok", "lo",
                                     str(os.getuid()), str(jobs.workspace)]
    assert (jobs.workspace / "made-here").read_text() == "y\n"


def test_network_only_when_asked(dockerd: str, docker_client: Any, jobs: Jobs) -> None:
    # the private dockerd has no bridge (--bridge none): "host" stands for the network here
    backend = ContainerBackend(dockerd, default_image=IMAGE, network_mode="host")
    req = jobs.req("ls /sys/class/net", network=True)
    run(backend, req)
    assert set(log_body(req).split()) - {"lo"}, "no interface but lo with network=True"


def test_limits_reach_docker(backend: ContainerBackend, jobs: Jobs) -> None:
    h = backend.launch(jobs.req("sleep 30", cpus=0.5, memory=64 << 20, shm_size=8 << 20))
    try:
        host = backend.docker.containers.get(h.extra["container"]).attrs["HostConfig"]
        assert (host["NanoCpus"], host["Memory"], host["MemorySwap"], host["ShmSize"]) == \
            (500_000_000, 64 << 20, 64 << 20, 8 << 20)
        assert (host["ReadonlyRootfs"], host["NetworkMode"], host["Init"]) == \
            (True, "none", True)
        assert h.pid > 0 and backend.is_alive(h)
    finally:
        backend.signal(h, signal.SIGKILL)
    info = wait_exit(backend, h, 30)
    assert (info.exit_code, info.signal) == (None, signal.SIGKILL)
    assert not backend.is_alive(h)


def test_local_pool_container_defaults_reach_the_container(dockerd: str, docker_client: Any,
                                                           jobs: Jobs, tmp_path: Path) -> None:
    """[pools.local] container_shm_size sizes /dev/shm inside (Docker's own: 64 MiB), and a
    job that gives no limits gets the pool's: settings -> the daemon's backend -> Docker."""
    from rota.config import load_settings
    from rota.server.loop.backend_set import BackendSet

    settings = load_settings(home=tmp_path / "home", pools={"local": {
        "docker_host": dockerd, "container_shm_size": "48M", "container_cpus": 0.5,
        "container_memory": "256M"}})
    backend = BackendSet(settings).get("container")
    assert isinstance(backend, ContainerBackend)
    # 40 MB fit; 60 MB do not (they would in Docker's 64 MiB)
    req = jobs.req("grep ' /dev/shm ' /proc/mounts; df -k /dev/shm | tail -n 1; "
                   "for mb in 40 60; do rm -f /dev/shm/fill; "
                   "head -c ${mb}000000 /dev/zero 2>/dev/null > /dev/shm/fill "
                   "&& echo $mb-fits || echo $mb-full; done")
    h = backend.launch(req)
    info = wait_exit(backend, h, 30)
    assert info.exit_code == 0, log_body(req)
    mount, df, *fits = log_body(req).splitlines()
    assert mount.split()[1:3] == ["/dev/shm", "tmpfs"] and "size=49152k" in mount, mount
    assert df.split()[1] == "49152", df  # 1K-blocks: 48 MiB
    assert fits == ["40-fits", "60-full"]
    host = backend.docker.containers.get(h.extra["container"]).attrs["HostConfig"]
    assert (host["ShmSize"], host["NanoCpus"], host["Memory"]) == \
        (48 << 20, 500_000_000, 256 << 20)


def test_memory_limit_oom_kill_recorded(backend: ContainerBackend, jobs: Jobs) -> None:
    # busybox tail keeps the last lines of a file with no newline: it grows until killed
    req = jobs.req("echo start; tail /dev/zero", memory=32 << 20)
    info = run(backend, req)
    assert isinstance(info, ContainerExit)
    assert (info.exit_code, info.signal, info.oom_killed) == (None, signal.SIGKILL, True)
    body = log_body(req)
    assert body.startswith("start\n")
    assert "killed by the kernel's OOM killer: out of memory (memory limit 32" in body


def test_stop_handshake(backend: ContainerBackend, jobs: Jobs) -> None:
    req = jobs.req("trap 'echo stopping; echo saved > stopped.txt; exit 0' TERM; "
                   "echo ready; while true; do sleep 0.1; done")
    h = backend.launch(req)
    wait_text(req.log_path, "ready", 30)
    sent = time.monotonic()
    backend.signal(h, signal.SIGTERM)
    info = wait_exit(backend, h, 10)
    assert time.monotonic() - sent < 5  # well within a grace of 5 s
    assert (info.exit_code, info.signal) == (0, None)
    assert (jobs.workspace / "stopped.txt").read_text() == "saved\n"
    # the signal reached the whole process group: sh says its sleep was "Terminated"
    assert [line for line in log_body(req).splitlines() if line != "Terminated"] == \
        ["ready", "stopping"]


def test_untrapped_stop_signal_ends_the_job(backend: ContainerBackend, jobs: Jobs) -> None:
    """docker-init passes the signal on: a job without a handler dies of it, as on the host
    (a shell as the container's pid 1 would ignore it)."""
    req = jobs.req("echo ready; sleep 60")
    h = backend.launch(req)
    wait_text(req.log_path, "ready", 30)
    backend.signal(h, signal.SIGTERM)
    info = wait_exit(backend, h, 10)
    assert (info.exit_code, info.signal) == (None, signal.SIGTERM)
    backend.signal(h, signal.SIGTERM)  # ended already: no error


_LAUNCHER = """
import json, os, sys, time
from pathlib import Path
from rota.backends.container import ContainerBackend, ContainerRequest
url, raw, stay = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "stay"
raw["log_path"], raw["status_path"] = Path(raw["log_path"]), Path(raw["status_path"])
h = ContainerBackend(url).launch(ContainerRequest(**raw))
print(json.dumps(h.to_json()), flush=True)
if stay:
    time.sleep(120)  # its follower copies the output until the test kills it
os._exit(0)
"""


def launch_in_daemon(dockerd: str, req: ContainerRequest, stay: bool
                     ) -> tuple[subprocess.Popen[str], Handle]:
    """Launch from another process, as a daemon does, which the test can then SIGKILL."""
    raw = {f: getattr(req, f) for f in req.__dataclass_fields__}
    raw.update(log_path=str(req.log_path), status_path=str(req.status_path))
    proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, dockerd, json.dumps(raw),
                             "stay" if stay else "go"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, Handle.from_json(json.loads(proc.stdout.readline()))


def test_readopted_after_daemon_sigkill_log_exact(dockerd: str, docker_client: Any,
                                                  jobs: Jobs) -> None:
    req = jobs.req("i=0; while [ $i -lt 40 ]; do echo line$i; i=$((i+1)); sleep 0.05; done")
    proc, handle = launch_in_daemon(dockerd, req, stay=True)
    wait_text(req.log_path, "line5", 30)
    proc.kill()  # the daemon dies in the middle of the output
    proc.wait()
    assert "line39" not in req.log_path.read_text()
    again = ContainerBackend(dockerd)  # a restarted daemon: a new backend, nothing in memory
    for stored in (handle, None):  # by its stored handle, and by label alone
        found = again.locate(stored, str(req.status_path), time.time())
        assert found.handle is not None and found.ended is None
        assert found.handle.extra["container"] == handle.extra["container"]
    fd = again.watch(handle)
    assert fd is not None
    assert select.select([fd], [], [], 30)[0]
    os.close(fd)
    info = again.collect(handle)
    assert info is not None and info.exit_code == 0
    assert log_body(req) == "".join(f"line{i}\n" for i in range(40))


def test_ended_while_daemon_down(dockerd: str, docker_client: Any, jobs: Jobs) -> None:
    req = jobs.req("echo a; sleep 0.5; echo b; exit 4")
    proc, handle = launch_in_daemon(dockerd, req, stay=False)
    proc.wait()
    container = docker_client.containers.get(handle.extra["container"])
    assert container.wait(timeout=30)["StatusCode"] == 4
    again = ContainerBackend(dockerd)
    found = again.locate(None, str(req.status_path), time.time())
    assert found.handle is not None and found.ended is not None
    assert found.ended.exit_code == 4
    assert log_body(req) == "a\nb\n"
    assert again.watch(found.handle) is None  # its end is recorded already
    assert again.locate(handle, str(req.status_path), 0.0).ended == found.ended


def test_locate_finds_nothing_for_an_attempt_never_launched(backend: ContainerBackend,
                                                             jobs: Jobs) -> None:
    assert backend.locate(None, str(jobs.req("true").status_path), time.time()).handle is None


def test_same_attempt_never_runs_twice(backend: ContainerBackend, jobs: Jobs) -> None:
    req = jobs.req("sleep 30")
    h = backend.launch(req)
    try:
        with pytest.raises(BackendError, match="cannot create its container"):
            backend.launch(req)
    finally:
        backend.signal(h, signal.SIGKILL)
        wait_exit(backend, h, 30)


def test_missing_image_is_a_clear_error(backend: ContainerBackend, jobs: Jobs) -> None:
    with pytest.raises(BackendError, match="no-such-image"):
        backend.launch(jobs.req("true", image="no-such-image:1"))


def test_tidy_removes_ended_containers_only(backend: ContainerBackend, jobs: Jobs,
                                            tmp_path: Path) -> None:
    done, kept = jobs.req("true"), jobs.req("true")
    running = jobs.req("sleep 30")
    handles = [backend.launch(r) for r in (done, kept, running)]
    theirs = backend.launch(Jobs(tmp_path / "other").req("true"))  # another Rota home's
    for h in (*handles[:2], theirs):
        wait_exit(backend, h, 30)

    backend.tidy(jobs.status_dir, active={str(kept.status_path), str(running.status_path)})

    def exists(h: Handle) -> bool:
        return bool(backend.docker.containers.list(all=True,
                                                   filters={"id": h.extra["container"]}))

    assert [exists(h) for h in (*handles, theirs)] == [False, True, True, True]
    info = backend.collect(handles[0])  # from the status file: the container is gone
    assert info is not None and info.exit_code == 0
    backend.signal(handles[2], signal.SIGKILL)
    wait_exit(backend, handles[2], 30)
    backend.tidy(jobs.status_dir, active=set())
    assert not any(exists(h) for h in handles)


def test_gpus_on_a_docker_without_the_nvidia_runtime(dockerd: str, docker_client: Any,
                                                    jobs: Jobs) -> None:
    """This dockerd has no NVIDIA runtime: a GPU job would fail at launch ("could not
    select device driver"), so the backend says why first; on simulated GPUs the same job
    runs with CUDA_VISIBLE_DEVICES alone."""
    real = ContainerBackend(dockerd, default_image=IMAGE)
    why = real.gpu_refusal()
    assert why is not None and why.startswith("Docker here has no NVIDIA runtime (runtimes: ")
    with pytest.raises(BackendError, match="could not select device driver"):
        real.launch(jobs.req("true", gpus=(1,)))
    simulated = ContainerBackend(dockerd, default_image=IMAGE, simulated_gpus=True)
    assert simulated.gpu_refusal() is None
    req = jobs.req('echo "gpus=$CUDA_VISIBLE_DEVICES"', gpus=(2, 3))
    info = run(simulated, req)
    assert info.success and log_body(req) == "gpus=0,1\n"


def test_a_job_run_as_its_owner_has_their_uid_gid_and_groups(backend: ContainerBackend,
                                                              jobs: Jobs) -> None:
    """A root daemon's job of another account: --user uid:gid and its groups; its log and
    the file it writes for rota.job (its events) are that account's (0600)."""
    owner = RunAs(user="rtu-owner", uid=4242, gid=4243, groups=(4243, 4244), home="/",
                  shell="/bin/sh")
    events = jobs.status_dir / "owner.events"
    req = jobs.req("id -u; id -g; id -G; echo '{}' >> \"$ROTA_EVENTS_FILE\" && echo wrote",
                   run_as=owner, env={"ROTA_EVENTS_FILE": str(events)})
    assert run(backend, req).exit_code == 0, req.log_path.read_text()
    assert log_body(req).split() == ["4242", "4243", "4243", "4244", "wrote"]
    for path in (events, req.log_path):  # its own files are its owner's alone
        assert (path.stat().st_uid, path.stat().st_gid) == (4242, 4243), path
        assert path.stat().st_mode & 0o077 == 0, path
