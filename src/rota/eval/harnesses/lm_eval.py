"""lm-evaluation-harness (``pip install 'rota[eval]'``, lm-eval 0.4.x) on a Hugging Face
model: ``python -m lm_eval run --model hf ...``, then its results file read back.

lm-eval writes ``OUT/<model path, sanitised>/results_<timestamp>.json`` whose ``results``
maps each task (and group) to ``{"acc,none": 0.75, "acc_stderr,none": 0.25, "alias": ...}``:
the part after the comma is the filter. Metrics are named ``<task>/<metric>`` for the
``none`` filter (``arc_easy/acc``, ``arc_easy/acc_stderr``) and ``<task>/<metric>/<filter>``
otherwise (``gsm8k/exact_match/strict-match``); values that are not numbers (a stderr of
``"N/A"``) and keys without a filter (``alias``, ``sample_len``) are left out.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rota.eval.harnesses.base import (
    EvalFailed,
    Harness,
    Metrics,
    Target,
    number,
    option_args,
    read_json,
)
from rota.eval.limits import Limits

if TYPE_CHECKING:
    from rota.eval.config import EvalConfig


class LmEval(Harness):
    kind = "lm-eval"
    honours = frozenset(Limits.model_fields)  # every one: --limit, --num_fewshot, model_args

    def steps(self, cfg: EvalConfig, target: Target) -> list[list[str]]:
        h, lim = cfg.harness, cfg.harness.limits
        for path in (target.model, target.adapter or ""):
            if "," in path:  # --model_args is split on commas
                raise EvalFailed(f"lm-eval cannot load {path!r}: its path has a comma")
        model_args = [f"pretrained={target.model}", f"dtype={lim.dtype}"]
        if lim.max_length is not None:
            model_args.append(f"max_length={lim.max_length}")
        if target.adapter:
            model_args.append(f"peft={target.adapter}")
        argv = [sys.executable, "-m", "lm_eval", "run", "--model", "hf",
                "--model_args", ",".join(model_args), "--tasks", ",".join(h.tasks),
                "--batch_size", str(lim.batch_size), "--output_path", str(target.out)]
        if lim.num_fewshot is not None:
            argv += ["--num_fewshot", str(lim.num_fewshot)]
        if lim.max_instances is not None:
            argv += ["--limit", str(lim.max_instances)]
        if h.task_dir:
            argv += ["--include_path", h.task_dir]
        return [argv + option_args(h.args)]

    def parse(self, cfg: EvalConfig, out: Path) -> Metrics:
        files = sorted(out.glob("**/results_*.json"), key=lambda p: p.stat().st_mtime)
        if not files:
            raise EvalFailed(f"lm-eval wrote no results file (results_*.json) under {out}")
        data = read_json(files[-1])
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, dict) or not results:
            raise EvalFailed(f"{files[-1]} holds no results")
        known = set(results) | set(data.get("groups") or {})
        missing = [t for t in cfg.harness.tasks if t not in known]
        if missing:
            raise EvalFailed(f"lm-eval gave no results for task {', '.join(missing)} "
                             f"({files[-1]})")
        return _metrics(results)


def _metrics(results: dict[str, object]) -> Metrics:
    metrics: Metrics = {}
    for task, values in results.items():
        if not isinstance(values, dict):
            continue
        for key, value in values.items():
            name, comma, filt = str(key).partition(",")
            f = number(value)
            if comma and f is not None:
                metrics[f"{task}/{name}" + ("" if filt == "none" else f"/{filt}")] = f
    return metrics
