"""A private Docker daemon for the container backend's tests, and a busybox image.

dockerd runs under a temp dir with its own data-root, exec-root, socket and pidfile, no
bridge and no iptables rules; the system's Docker (if any) is never used. Without root or
without Debian's docker.io the tests skip, saying why; ``ROTA_REQUIRE_DOCKER=1`` makes that
a failure (CI sets it). The image is built here: busybox-static's binary and its applet
links, ``docker import``ed (no registry is reachable).
"""

from __future__ import annotations

import io
import itertools
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rota.backends.container import ContainerBackend, ContainerRequest

DOCKERD = "/usr/sbin/dockerd"
BUSYBOX = "/bin/busybox"
IMAGE = "rota-test-busybox:1"
_ids = itertools.count(1)


def _unavailable(why: str) -> None:
    if os.environ.get("ROTA_REQUIRE_DOCKER") == "1":
        pytest.fail(f"ROTA_REQUIRE_DOCKER=1 but Docker cannot run here: {why}")
    pytest.skip(f"Docker cannot run here: {why}")


def _install() -> None:
    """Debian's docker.io and busybox-static, if missing (root only)."""
    if os.path.exists(DOCKERD) and os.path.exists(BUSYBOX):
        return
    if os.geteuid() != 0:
        _unavailable("dockerd or busybox is missing and installing them needs root")
    r = subprocess.run(["apt-get", "install", "-y", "docker.io", "busybox-static"],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if r.returncode != 0:
        _unavailable(f"apt-get install docker.io busybox-static failed: {r.stderr[-500:]}")


def _ping(base_url: str) -> bool:
    import docker

    try:
        docker.DockerClient(base_url=base_url, version="auto", timeout=2).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="module")
def dockerd() -> Iterator[str]:
    """The private daemon's socket URL; stopped by its pid at the end."""
    if os.geteuid() != 0:
        _unavailable("dockerd needs root")
    try:
        import docker  # noqa: F401
    except ImportError:
        _unavailable("the docker Python SDK is not installed (pip install 'rota[docker]')")
    _install()
    tmp = tempfile.mkdtemp(prefix="rdk-", dir="/tmp")  # short: sockets live under it
    url = f"unix://{tmp}/docker.sock"
    with open(f"{tmp}/dockerd.log", "wb") as out:
        proc = subprocess.Popen(
            [DOCKERD, "--data-root", f"{tmp}/root", "--exec-root", f"{tmp}/exec", "-H", url,
             "--pidfile", f"{tmp}/dockerd.pid", "--bridge", "none", "--iptables=false",
             "--ip-masq=false"], stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not _ping(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = Path(f"{tmp}/dockerd.log").read_text(errors="replace")[-1500:]
                _unavailable(f"dockerd did not start:\n{log}")
            time.sleep(0.1)
        yield url
    finally:
        _stop(proc)
        _unmount_under(tmp)
        shutil.rmtree(tmp, ignore_errors=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # it stops its containers and its containerd
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _unmount_under(tmp: str) -> None:
    """dockerd leaves its network namespace file mounted in the exec-root."""
    with open("/proc/self/mounts") as f:
        points = [line.split()[1] for line in f if line.split()[1].startswith(tmp + "/")]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _busybox_tar() -> bytes:
    """A root file system of busybox and a link per applet."""
    applets = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True,
                             check=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(BUSYBOX, arcname="bin/busybox")
        for name in applets:
            if name != "busybox":
                link = tarfile.TarInfo(f"bin/{name}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(link)
    return buf.getvalue()


@pytest.fixture(scope="module")
def docker_client(dockerd: str) -> Any:
    import docker

    client = docker.DockerClient(base_url=dockerd, version="auto")
    client.api.import_image_from_data(_busybox_tar(), repository=IMAGE.split(":")[0],
                                      tag=IMAGE.split(":")[1])
    return client


@pytest.fixture
def backend(dockerd: str, docker_client: Any) -> ContainerBackend:
    return ContainerBackend(dockerd, default_image=IMAGE)


class Jobs:
    """Requests for one test: logs, status files and a workspace under its tmp dir."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.status_dir = tmp / "status"
        self.workspace = tmp / "ws"
        self.workspace.mkdir(parents=True)

    def req(self, script: str, *, env: dict[str, str] | None = None, **options: Any
            ) -> ContainerRequest:
        n = next(_ids)
        return ContainerRequest(
            job_id=n, attempt=1, argv=[script], shell=True, env=env or {},
            cwd=str(self.workspace), conda=None, log_path=self.tmp / "logs" / f"{n}.log",
            status_path=self.status_dir / f"{n}-1.status", session_name=f"rota-{n}",
            log_header=f"=== rota: job {n} attempt 1", **{"image": IMAGE, **options})


@pytest.fixture
def jobs(tmp_path: Path) -> Jobs:
    return Jobs(tmp_path)
