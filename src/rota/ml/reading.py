"""What one line of a job's output says (:class:`Reading`), and how the parser gathers it.

:class:`rota.ml.parse.LineParser` hands each line's findings to a ``_Draft``, which keeps
the rules that hold whatever format a value came from: which step count wins when a line
has several (the ranks below), which names fill the progress fields instead of metrics,
which names are measurements, and that the first built-in value of a name wins while a
job's own pattern overrides. The formats themselves are :mod:`rota.ml.parse`'s (and
:mod:`rota.ml.bars`' for progress bars). Pure: no I/O, no clock, no global state.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_A = re.ASCII  # \d and \w would otherwise take other scripts' digits and letters


@dataclass(frozen=True, slots=True)
class Reading:
    """What one line says. Empty fields mean the line did not say."""

    metrics: dict[str, float]
    step: int | None = None
    total_steps: int | None = None
    epoch: float | None = None
    total_epochs: int | None = None
    rate: float | None = None
    eta_s: float | None = None

    @property
    def empty(self) -> bool:
        """Nothing at all was found."""
        return not self.metrics and all(
            v is None for v in (self.step, self.total_steps, self.epoch,
                                self.total_epochs, self.rate, self.eta_s))


# --- what names mean -----------------------------------------------------------------------

# Ranks of step sources: a lower rank is a more global count and wins.
_CUSTOM, _GLOBAL, _STEP, _ITER, _BAR, _BATCH, _NONE = -1, 0, 1, 2, 3, 4, 99
_STEP_KEYS = {"global_step": _GLOBAL, "global step": _GLOBAL, "step": _STEP,
              "iteration": _ITER, "iter": _ITER, "batch": _BATCH}
_TOTAL_STEP_KEYS = frozenset({"total_steps", "max_steps"})
_TOTAL_EPOCH_KEYS = frozenset({"epochs", "num_epochs", "total_epochs"})
#: Identifiers that tools print in metric form; never metrics of the built-in rules.
#: ``eta`` too: its own rule reads it as eta_s ("eta: 1 day, 2:03:04" is not eta=1).
_IGNORED = frozenset({"v_num", "pid", "rank", "local_rank", "world_size", "seed", "eta"})
# A run's setup is not a measurement of it: identifiers, seeds, device lists and counts of
# the machine's or the model's parts (``job_id``, ``random_seed``, ``CUDA_VISIBLE_DEVICES``,
# ``num_gpus``, ``n_layer``) hold still for the whole run. The trackers keep them apart
# (W&B's run config, MLflow's params: recorded once, never charted), and so does Rota.
# ``lr`` stays a metric: a schedule moves it every step, and the Trainer, Lightning's
# LearningRateMonitor and the W&B and MLflow integrations all log it as a series.
#: A name whose last word is one of these names a thing, not an amount.
_SETUP_LAST = frozenset({"id", "ids", "uuid", "pid", "seed", "rank", "port", "device",
                         "devices", "gpus", "node", "nodes"})
#: Parts of a machine or a model that a setting counts (``num_workers``, ``n_head``,
#: ``OMP_NUM_THREADS``); a count of work done (``num_tokens``) is a measurement.
_COUNTED = frozenset({"gpu", "gpus", "device", "devices", "node", "nodes", "worker",
                      "workers", "proc", "procs", "process", "processes", "thread", "threads",
                      "cpu", "cpus", "rank", "ranks", "replica", "replicas", "layer",
                      "layers", "head", "heads"})
_COUNT_WORDS = frozenset({"num", "n", "nb", "number"})
#: Words that make a name a measurement of training or evaluation wherever it appears
#: (``train/loss``, ``eval_acc``, ``rouge1``, ``learning_rate``). A pair whose name has
#: none counts only on a line that looks like training output (see ``_Draft.put``).
_METRIC_WORDS = frozenset({
    "loss", "losses", "acc", "acc1", "acc5", "accuracy", "ppl", "perplexity", "lr",
    "learning", "grad", "gnorm", "reward", "rewards", "return", "bleu", "rouge", "rouge1",
    "rouge2", "rougel", "rougelsum", "f1", "wer", "cer", "mfu", "auc", "auroc", "map",
    "map50", "iou", "miou", "precision", "recall", "mse", "mae", "rmse", "nll", "kl",
    "entropy", "top1", "top5", "psnr", "ssim", "fid", "exact", "score", "throughput",
    "tflops"})
_NAME_WORD = re.compile(r"[a-z0-9]+", _A)


def _metric_like(name: str) -> bool:
    return any(w in _METRIC_WORDS for w in _NAME_WORD.findall(name))


def _setup(name: str) -> bool:
    """A name of the run's setup (see ``_SETUP_LAST``): never a metric of the built-in
    rules, whatever the line (a job's own pattern may still name one)."""
    words = _NAME_WORD.findall(name)
    if not words:
        return False
    return (name in _IGNORED or words[-1] in _SETUP_LAST or "world" in words
            or any(w in _COUNT_WORDS and any(c in _COUNTED for c in words[i + 1:])
                   for i, w in enumerate(words)))


class _Draft:
    """Accumulates one line's findings; first built-in value wins, custom overrides."""

    __slots__ = ("epoch", "eta_s", "key_total", "loose", "metrics", "rank", "rate",
                 "shaped", "step", "total_epochs", "total_steps")

    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}
        # pairs whose name says nothing (``batch_size: 2``, ``OMP_NUM_THREADS=4``): kept
        # only when the line is shaped like training output (progress, or a metric's name)
        self.loose: dict[str, float] = {}
        self.shaped = False
        self.step: int | None = None
        self.total_steps: int | None = None
        self.rank = _NONE
        self.key_total: int | None = None
        self.epoch: float | None = None
        self.total_epochs: int | None = None
        self.rate: float | None = None
        self.eta_s: float | None = None

    def progress(self, rank: int, step: int, total: int | None) -> None:
        # Step and total travel as a pair: a global step over a per-epoch total is wrong.
        self.shaped = True
        if rank < self.rank:
            self.rank, self.step, self.total_steps = rank, step, total

    def set_epoch(self, epoch: float, total: int | None = None, *, force: bool = False) -> None:
        if epoch < 0:
            return
        self.shaped = True
        if force or self.epoch is None:
            self.epoch = epoch
        if total is not None and total > 0 and (force or self.total_epochs is None):
            self.total_epochs = total

    def put(self, name: str, value: float, *, custom: bool = False,
            trusted: bool = False) -> None:
        """A name and a number from text, JSON or a custom group. ``trusted``: a JSON
        object's, which a program prints on purpose, so any name is a metric."""
        if not math.isfinite(value):
            return
        name = name.strip().lower()
        if not name:
            return
        whole = value.is_integer() and value >= 0
        if name in _STEP_KEYS:
            if whole:
                if custom:
                    self.rank, self.step = _CUSTOM, int(value)
                else:
                    self.progress(_STEP_KEYS[name], int(value), None)
        elif name == "epoch":
            self.set_epoch(value, force=custom)
        elif name in _TOTAL_STEP_KEYS:
            if whole and value > 0 and (custom or self.key_total is None):
                self.key_total = int(value)
        elif name in _TOTAL_EPOCH_KEYS:
            if whole and value > 0 and (custom or self.total_epochs is None):
                self.total_epochs = int(value)
        elif custom:
            self.metrics[name] = value
        elif _setup(name) or name in self.metrics or name in self.loose:
            return  # the first value of a name wins
        elif trusted or _metric_like(name):
            self.metrics[name] = value
            self.shaped = True
        else:
            self.loose[name] = value

    def reading(self) -> Reading | None:
        total = self.total_steps if self.total_steps is not None else self.key_total
        metrics = {**self.loose, **self.metrics} if self.shaped else dict(self.metrics)
        r = Reading(metrics, self.step, total, self.epoch, self.total_epochs,
                    self.rate, self.eta_s)
        return None if r.empty else r
