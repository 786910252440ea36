"""A round's lineage and numbers in the trackers: ``python -m rota.pipeline.record``.

The daemon submits this job after a round's verdict (rota.server.schedules.pipelines), with the
round as JSON in ``ROTA_PIPELINE_ROUND``. Rota's store already holds the round: this only
copies it to MLflow (the run Rota opened for this job, ``MLFLOW_RUN_ID``: the lineage as
params and tags, the numbers as metrics) and to Weights & Biases when the job has
``WANDB_PROJECT`` (a run whose config is the lineage, as the Gradients Scheduler logged
it). A tracker that cannot be reached fails this job only, never the round.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

ROUND_ENV = "ROTA_PIPELINE_ROUND"
#: what goes to the trackers as text (params, W&B config), and as numbers (metrics)
LINEAGE = ("pipeline", "round", "state", "base_model", "adapter", "merged_model",
           "data_hash", "chunk", "chunks", "remote_task", "reason")
NUMBERS = ("metric", "base_metric", "accepted")


def lineage(rd: dict[str, Any]) -> dict[str, str]:
    return {k: str(rd[k]) for k in LINEAGE if rd.get(k) is not None}


def numbers(rd: dict[str, Any]) -> dict[str, float]:
    out = {k: float(rd[k]) for k in NUMBERS if isinstance(rd.get(k), int | float)}
    return out


def main() -> int:
    try:
        rd = json.loads(os.environ[ROUND_ENV])
    except (KeyError, ValueError) as e:
        print(f"record: {ROUND_ENV} is missing or not JSON: {e}", file=sys.stderr)
        return 2
    facts, values = lineage(rd), numbers(rd)
    print(json.dumps(values), flush=True)  # Rota records these (and mirrors them to MLflow)
    if os.environ.get("MLFLOW_RUN_ID"):
        import mlflow

        with mlflow.start_run(run_id=os.environ["MLFLOW_RUN_ID"]):
            mlflow.log_params({k: v[:500] for k, v in facts.items()})
            mlflow.set_tags({"rota.pipeline": facts.get("pipeline", ""),
                             "rota.round": facts.get("round", ""),
                             "rota.verdict": facts.get("state", "")})
            mlflow.log_metrics(values)
    if os.environ.get("WANDB_PROJECT"):
        import wandb

        run = wandb.init(project=os.environ["WANDB_PROJECT"], config=facts,
                         name=f"{facts.get('pipeline')}-round-{facts.get('round')}")
        run.log(values)
        run.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
