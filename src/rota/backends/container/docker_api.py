"""The Docker SDK at one place: imported on first use (the ``docker`` extra), and its
errors translated into BackendError, so callers never catch the SDK's own."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any

from rota.errors import BackendError

INSTALL_HINT = "pip install 'rota[docker]'"
#: Each running container's log copy holds one connection for as long as it runs.
_POOL_SIZE = 64


def sdk_missing() -> str | None:
    try:
        import docker  # noqa: F401
    except ImportError:
        return f"the docker Python SDK is not installed ({INSTALL_HINT})"
    return None


#: what Docker runs to give a container the GPUs of ``--gpus`` (DeviceRequests): dockerd
#: registers its GPU driver only when this hook of the NVIDIA Container Toolkit is installed
NVIDIA_HOOK = "nvidia-container-runtime-hook"


def nvidia_runtime(client: Any) -> tuple[bool, list[str]]:
    """Whether Docker can give containers NVIDIA GPUs (``docker info`` lists an ``nvidia``
    runtime, or the toolkit's hook is installed on this machine), and the runtimes it
    lists (for the message when it cannot)."""
    with errors("cannot ask Docker for its runtimes"):
        info = client.info()
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    return "nvidia" in runtimes or shutil.which(NVIDIA_HOOK) is not None, runtimes


def connect(base_url: str | None) -> Any:
    """A DockerClient for ``base_url`` (None: DOCKER_HOST, else the system socket), checked
    with a ping."""
    missing = sdk_missing()
    if missing is not None:
        raise BackendError(missing)
    import docker

    where = base_url or (f"DOCKER_HOST={os.environ['DOCKER_HOST']}"
                         if os.environ.get("DOCKER_HOST") else "the default Docker socket "
                         "(/var/run/docker.sock; is Docker installed and running?)")
    with errors(f"cannot reach Docker at {where}"):
        client = docker.DockerClient(base_url=base_url, version="auto",
                                     max_pool_size=_POOL_SIZE) if base_url \
            else docker.from_env(max_pool_size=_POOL_SIZE)
        client.ping()
    return client


@contextlib.contextmanager
def errors(what: str) -> Iterator[None]:
    """Raise the SDK's errors (and the transport's) as BackendError: ``what: why``."""
    try:
        yield
    except BackendError:
        raise
    except Exception as e:
        if not _is_sdk_error(e):
            raise
        raise BackendError(f"{what}: {_why(e)}") from e


def is_not_found(e: BaseException | None) -> bool:
    import docker.errors

    return isinstance(e, docker.errors.NotFound)


def status_code(e: BaseException | None) -> int | None:
    return getattr(getattr(e, "response", None), "status_code", None)


def _is_sdk_error(e: Exception) -> bool:
    import docker.errors
    import requests

    return isinstance(e, docker.errors.DockerException | requests.RequestException | OSError)


def _why(e: Exception) -> str:
    """What went wrong, in words: Docker's own explanation, else the system error under a
    transport error (requests and urllib3 nest it in their messages' tuples)."""
    explanation = getattr(e, "explanation", None)
    if explanation:
        return str(explanation)
    os_error = _os_error(e)
    if os_error is not None:
        return os_error.strerror or str(os_error)
    return str(e)


def _os_error(e: BaseException, depth: int = 0) -> OSError | None:
    """The OSError with an errno under ``e``: in its cause or context, or among its args."""
    if depth > 8:
        return None
    if isinstance(e, OSError) and e.errno is not None:
        return e
    inner = [e.__cause__, e.__context__, getattr(e, "reason", None),
             *(a for a in e.args if isinstance(a, BaseException | tuple))]
    for x in inner:
        for y in (x if isinstance(x, tuple) else (x,)):
            if isinstance(y, BaseException):
                found = _os_error(y, depth + 1)
                if found is not None:
                    return found
    return None
