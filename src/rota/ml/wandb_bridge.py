"""Weights & Biases: the job itself logs with ``wandb`` (W&B has no server-side mirror
worth having); Rota names its run through W&B's environment variables, so every attempt
of a job continues one run, and learns the run's link from the job's output.

- ``WANDB_RUN_ID`` is fixed per job (this daemon's instance id and the job id, so two
  machines' job 12 are different runs) and ``WANDB_RESUME=allow``: a retry or a preempted
  job's next attempt continues the same run instead of starting another.
- ``WANDB_PROJECT``, ``WANDB_ENTITY``, ``WANDB_NAME`` and ``WANDB_TAGS`` come from the job.
- ``WANDB_API_KEY`` comes from the user's stored secret of that name (rota secret set),
  never from the job's spec, so it is never shown.
"""

from __future__ import annotations

import re
from typing import Any

from rota.core.spec import JobSpec

DEFAULT_PROJECT = "rota"
KEY_SECRET = "WANDB_API_KEY"
_RUN_URL = re.compile(r"https?://\S+/runs/[A-Za-z0-9_.-]+")
_SYNC = re.compile(r"wandb sync (\S+)")


def run_id(instance: str, job_id: int) -> str:
    return f"rota-{instance}-{job_id}"


def project_of(spec: JobSpec, default: str | None) -> str:
    return spec.wandb_project or spec.project or default or DEFAULT_PROJECT


def run_url(entity: str | None, project: str, rid: str,
            base: str = "https://wandb.ai") -> str | None:
    return f"{base}/{entity}/{project}/runs/{rid}" if entity else None


def environment(spec: JobSpec, *, job_id: int, instance: str, entity: str | None,
                default_project: str | None, api_key: str | None) -> dict[str, str]:
    env = {"WANDB_RUN_ID": run_id(instance, job_id), "WANDB_RESUME": "allow",
           "WANDB_PROJECT": project_of(spec, default_project),
           "WANDB_NAME": spec.name or f"job-{job_id}"}
    entity = spec.wandb_entity or entity
    if entity:
        env["WANDB_ENTITY"] = entity
    if spec.tags:
        env["WANDB_TAGS"] = ",".join(spec.tags)
    if api_key:
        env["WANDB_API_KEY"] = api_key
    return env


def link_in(line: str) -> tuple[str, str] | None:
    """("url", link) from wandb's "View run ... at: https://..." line, or ("offline_dir",
    path) from its "wandb sync DIR" hint in offline mode; None for any other line."""
    if "wandb" not in line:
        return None
    m = _RUN_URL.search(line)
    if m:
        return "url", m.group(0)
    m = _SYNC.search(line)
    if m:
        return "offline_dir", m.group(1)
    return None


def view(spec: JobSpec, *, job_id: int, instance: str, entity: str | None,
         default_project: str | None, found: dict[str, Any] | None) -> dict[str, Any]:
    """What ``rota show`` and the API say about the job's W&B run."""
    project = project_of(spec, default_project)
    rid = run_id(instance, job_id)
    out: dict[str, Any] = {"run_id": rid, "project": project,
                           "entity": spec.wandb_entity or entity,
                           "url": run_url(spec.wandb_entity or entity, project, rid)}
    for k, v in (found or {}).items():
        if k in ("url", "offline_dir"):
            out[k] = v
    return out
