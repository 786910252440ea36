"""HELM (``pip install crfm-helm``; not installed with Rota: it is heavy): ``helm-run`` on
the config's run entries, then ``helm-summarize``, then the summary's tables read back.

The tasks are HELM run entries (``mmlu:subject=anatomy``); one without ``model=`` gets the
evaluated model's. A local folder is registered with ``--enable-local-huggingface-models``
(HELM names it ``huggingface/<folder name>``), a hub name with
``--enable-huggingface-models``. The suite is the config's name. Limits: ``max_instances``
is ``--max-eval-instances``, and ``num_fewshot`` is HELM's own run-entry argument
``max_train_instances=N`` added to each entry (one that names it already is refused with a
few-shot count given: one place says it). helm-run has no batch size, dtype or maximum
length: a config that sets one is refused (rota.eval.config). Adapters are not supported
(merge the adapter into the model first).

``helm-summarize`` writes ``OUT/runs/<suite>/groups/<group>.json``: a list of tables, each
``{"title", "header": [{"value": column}], "rows": [[{"value": model}, {"value": 0.5},
...]]}``. Every numeric cell becomes ``<table title>/<column>`` in snake case
(``subject_philosophy/em``, ``accuracy/mmlu_em``); a table without a title is named by its
group, and a table with several rows (several models) puts the row's label between the two.
The first value of a name wins when two groups show the same column.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rota.eval.harnesses.base import (
    EvalFailed,
    Harness,
    Metrics,
    Target,
    number,
    option_args,
    read_json,
    snake,
    tool,
)
from rota.eval.limits import Limits

if TYPE_CHECKING:
    from rota.eval.config import EvalConfig

_HAS_MODEL = re.compile(r"(^|[:,])model=")
_HAS_FEWSHOT = re.compile(r"(^|[:,])max_train_instances=")


def _with(entry: str, arg: str) -> str:
    """The run entry ``name[:k=v,...]`` with one more argument."""
    return f"{entry}{',' if ':' in entry else ':'}{arg}"


class Helm(Harness):
    kind = "helm"
    honours = frozenset({"max_instances", "num_fewshot"})
    instead = {
        "batch_size": "helm-run sends the model one request at a time and has no batch size",
        "dtype": "HELM loads a Hugging Face model as its model deployment says, not as "
                 "helm-run is told: leave dtype auto",
        "max_length": "HELM takes the context length from the model's deployment, not from "
                      "helm-run",
    }

    @classmethod
    def refused_limits(cls, limits: Limits, tasks: list[str]) -> dict[str, str]:
        out = super().refused_limits(limits, tasks)
        if limits.num_fewshot is not None:
            own = [t for t in tasks if _HAS_FEWSHOT.search(t)]
            if own:
                out["num_fewshot"] = (f"the run entry {own[0]} sets its own few-shot count "
                                      "(max_train_instances): give it in one place")
        return out

    def steps(self, cfg: EvalConfig, target: Target) -> list[list[str]]:
        if target.adapter:
            raise EvalFailed("helm: a LoRA adapter is not supported here; merge it into the "
                             "model first")
        local = os.path.isdir(target.model)
        name = f"huggingface/{os.path.basename(os.path.normpath(target.model))}" if local \
            else target.model
        lim = cfg.harness.limits
        entries = [e if _HAS_MODEL.search(e) else _with(e, f"model={name}")
                   for e in cfg.harness.tasks]
        if lim.num_fewshot is not None:  # HELM's own run expander: adapter_spec's count
            entries = [_with(e, f"max_train_instances={lim.num_fewshot}") for e in entries]
        out = str(target.out)
        run = [tool("helm-run"), "--run-entries", *entries, "--suite", cfg.name,
               "--output-path", out, "--local-path", os.path.join(out, "prod_env"),
               "--enable-local-huggingface-models" if local else "--enable-huggingface-models",
               target.model]
        if lim.max_instances is not None:
            run += ["--max-eval-instances", str(lim.max_instances)]
        summarize = [tool("helm-summarize"), "--suite", cfg.name, "--output-path", out]
        return [run + option_args(cfg.harness.args), summarize]

    def parse(self, cfg: EvalConfig, out: Path) -> Metrics:
        return summary_metrics(out / "runs" / cfg.name / "groups")


def summary_metrics(groups: Path) -> Metrics:
    """The metrics of every ``groups/*.json`` table of one HELM suite's summary."""
    files = sorted(groups.glob("*.json"))
    if not files:
        raise EvalFailed(f"HELM wrote no summary tables ({groups}/*.json): did "
                         "helm-summarize run?")
    metrics: Metrics = {}
    for path in files:
        tables = read_json(path)
        if not isinstance(tables, list):
            raise EvalFailed(f"{path}: not a list of HELM tables")
        for table in tables:
            if isinstance(table, dict):
                for name, value in table_metrics(table, group=path.stem).items():
                    metrics.setdefault(name, value)
    return metrics


def table_metrics(table: dict[str, Any], *, group: str) -> Metrics:
    columns = [snake(str(_value(h) or "")) for h in table.get("header") or []]
    rows = [r for r in table.get("rows") or [] if isinstance(r, list) and r]
    title = snake(str(table.get("title") or "")) or snake(group)
    metrics: Metrics = {}
    for row in rows:
        prefix = title if len(rows) == 1 else f"{title}/{snake(str(_value(row[0]) or ''))}"
        for column, cell in zip(columns[1:], row[1:], strict=False):
            f = number(_value(cell))
            if column and f is not None:
                metrics.setdefault(f"{prefix}/{column}", f)
    return metrics


def _value(cell: object) -> Any:
    return cell.get("value") if isinstance(cell, dict) else None
