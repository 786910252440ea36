"""Helpers for the evaluation tests: configs, running ``python -m rota.eval.run``, and the
vendored real harness output (data/SOURCES.md says where each file comes from)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rota.eval.config import EvalConfig, load_text

DATA = Path(__file__).parent / "data"
HELM_GROUPS = DATA / "helm" / "runs" / "tiny" / "groups"
LM_EVAL_RESULTS = DATA / "lm_eval"
QUIET = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
         "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": "1"}


def config_text(**parts: Any) -> str:
    """A config's YAML: the given top-level parts over a small valid default."""
    base: dict[str, Any] = {
        "version": 1, "name": "tiny-eval", "model": {"uri": "/models/none"},
        "harness": {"kind": "lm-eval", "tasks": ["tiny_mc"]},
        "tracking": {"experiment": "evals",
                     "tags": {"creator": "ana", "lifecycle": "candidate",
                              "datasets": ["tiny"]}}}
    base.update(parts)
    return yaml.safe_dump(base, sort_keys=False)


def config(**parts: Any) -> EvalConfig:
    return load_text(config_text(**parts))


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str

    @property
    def metrics(self) -> dict[str, float]:
        """The last JSON line of stdout: what Rota records as the job's metrics."""
        lines = [s for s in self.stdout.splitlines() if s.startswith("{") and s.endswith("}")]
        assert lines, self.stdout[-3000:] + self.stderr[-3000:]
        got: dict[str, float] = json.loads(lines[-1])
        return got

    @property
    def failure(self) -> str:
        lines = [s for s in self.stderr.splitlines() if s.startswith("rota-eval: FAILED: ")]
        assert len(lines) == 1, self.stdout[-3000:] + self.stderr[-3000:]
        return lines[0]


def run_eval(cwd: Path, *args: str, env: dict[str, str] | None = None,
             timeout: float = 240) -> Ran:
    """``python -m rota.eval.run ARGS`` in ``cwd``, as a job runs it."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("MLFLOW_", "ROTA_", "WANDB_"))}
    r = subprocess.run([sys.executable, "-m", "rota.eval.run", *args], cwd=cwd,
                       capture_output=True, text=True, timeout=timeout, check=False,
                       env={**base, **QUIET, **(env or {})})
    return Ran(r.returncode, r.stdout, r.stderr)


def fake_program(folder: Path, name: str, body: str) -> Path:
    """An executable Python script NAME in FOLDER (argv in ``sys.argv``)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!{sys.executable}\nimport sys, os, shutil, json\n"
                    + textwrap.dedent(body))
    path.chmod(0o755)
    return path


# --- the real harness: a tiny multiple-choice task on local JSON lines ------------------------
ITEMS = [{"question": "2 + 3 =", "choices": ["5", "7"], "answer": 0},
         {"question": "The opposite of hot is", "choices": ["warm", "cold"], "answer": 1},
         {"question": "4 + 9 =", "choices": ["13", "12"], "answer": 0},
         {"question": "The opposite of up is", "choices": ["down", "left"], "answer": 0}]
TASK = """\
task: tiny_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


def write_task(folder: Path) -> Path:
    """The tiny_mc task (its YAML and its data) in ``folder``, for lm-eval's --include_path."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "tiny_mc.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ITEMS))
    (folder / "tiny_mc.yaml").write_text(TASK.format(data=data))
    return folder


def require(module: str) -> Any:
    """``pytest.importorskip(module)``, except where the run requires the real parts
    (ROTA_REQUIRE_TORCH, set by scripts/test.sh): there a missing module fails the test."""
    import importlib

    import pytest

    if os.environ.get("ROTA_REQUIRE_TORCH"):
        return importlib.import_module(module)
    return pytest.importorskip(module)


def require_real_harness() -> None:
    """At a test module's top: skip it where torch, transformers, lm-eval or mlflow is
    missing, unless the run requires them (ROTA_REQUIRE_TORCH)."""
    import pytest

    try:
        import lm_eval  # noqa: F401
        import mlflow  # noqa: F401
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        if os.environ.get("ROTA_REQUIRE_TORCH"):
            raise
        pytest.skip("needs torch, transformers, lm-eval and mlflow (pip install "
                    "'rota[ml,eval,trackers]')", allow_module_level=True)
