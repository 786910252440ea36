"""Ray pools: Rota hands jobs to a Ray cluster through the Ray Jobs REST API and follows
them by their submission id (Rota's idempotency key).

``translate`` turns a job into a Jobs API submission (and says what it refuses), ``engine``
talks to the head's dashboard over HTTP, ``gang`` is the entrypoint of multi-node jobs (and
of jobs with secrets) that runs on the cluster. See docs/pools-ray.md.
"""

from rota.backends.ray.engine import RayEngine

__all__ = ["RayEngine"]
