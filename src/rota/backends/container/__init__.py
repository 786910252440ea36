"""Jobs in Docker containers on this machine, on Rota's own GPU placement (the ``docker``
extra). See docs/containers.md."""

from rota.backends.container.backend import ContainerBackend
from rota.backends.container.records import ContainerExit
from rota.backends.container.request import ContainerDefaults, ContainerRequest

__all__ = ["ContainerBackend", "ContainerDefaults", "ContainerExit", "ContainerRequest"]
