"""The ``eval-lm-harness`` template: an evaluation with lm-evaluation-harness as one job.

The template writes the evaluation config (rota.eval.config) from its options and submits
the job `rota eval submit` would run on this machine (rota.eval.jobs): ``python -m
rota.eval.run`` with the config in its environment, which fetches the model when it is an
MLflow or S3 one, runs lm-eval, fails when lm-eval fails or reports nothing, and reports
every ``task/metric`` to Rota and MLflow. For a config file of your own, a Kubernetes pool
or a separate CPU job for the fetch, use `rota eval submit`.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from rota.errors import InvalidSpec

NAME = "eval-lm-harness"


def config_of(v: dict[str, Any]) -> dict[str, Any]:
    """The evaluation config the options describe (checked by rota.eval.config)."""
    model: dict[str, Any] = {"uri": _model(v["model"])}
    if v["adapter"]:
        model["adapter"] = {"uri": _model(v["adapter"])}
    limits = {"batch_size": v["batch_size"], "dtype": v["dtype"],
              "max_instances": v["limit"] or None, "num_fewshot": _or_none(v["num_fewshot"]),
              "max_length": v["max_length"] or None}
    harness: dict[str, Any] = {
        "kind": "lm-eval", "tasks": [t.strip() for t in v["tasks"].split(",") if t.strip()],
        "limits": {k: x for k, x in limits.items() if x is not None}}
    if v["task_dir"]:
        harness["task_dir"] = os.path.abspath(v["task_dir"])
    if v["device"]:
        harness["args"] = {"device": v["device"]}
    return {"version": 1, "name": v["name"], "model": model, "harness": harness,
            "compute": {"gpus": v["gpus"]},
            "tracking": {"experiment": v["experiment"],
                         "tags": {"creator": v["creator"] or _user(),
                                  "lifecycle": v["lifecycle"]}}}


def build(v: dict[str, Any]) -> dict[str, Any]:
    """The job's spec: the evaluation `rota eval submit` makes on this machine, in one job
    (the runner fetches the model itself)."""
    from rota.eval.config import ConfigErrors, load_text
    from rota.eval.jobs import Source, eval_jobs

    text = yaml.safe_dump(config_of(v), sort_keys=False)
    try:
        config = load_text(text)
    except ConfigErrors as e:
        raise InvalidSpec(f"{NAME}: {'; '.join(e.problems)}", field="set") from None
    out = os.path.abspath(v["out"])
    spec = eval_jobs(config, Source(text=text), pool_engine="local", python=v["python"],
                     work_dir=out).evaluate
    spec["env"] = {**spec["env"], "ROTA_EVAL_OUT": out, "TOKENIZERS_PARALLELISM": "false"}
    return {**spec, "name": v["name"], "cwd": os.getcwd(), "retries": v["retries"],
            "tags": [*spec["tags"], f"template:{NAME}"]}


def _model(text: str) -> str:
    """A folder here as its absolute path; a URI or a hub name as given."""
    return os.path.abspath(text) if os.path.exists(text) else text


def _or_none(n: int) -> int | None:
    return None if n < 0 else n


def _user() -> str:
    import getpass

    return getpass.getuser() or "rota"
