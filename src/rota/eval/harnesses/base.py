"""The one interface every evaluation harness implements, and what harnesses share.

A harness turns (config, model folder, adapter folder, an empty output folder) into the
argv of the programs to run, in order, and reads what they left in that folder back as
metrics ``{"task/metric": value}``. It never runs anything itself: rota.eval.run does, and
it treats every problem a harness reports (:class:`EvalFailed`) as the evaluation failing.

It declares which ``harness.limits`` it passes on (``honours``); the config refuses any
other limit it sets, by its path, with the harness's reason (``instead``), so that no limit
is silently dropped (rota.eval.config).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rota.errors import RotaError
from rota.eval.limits import Limits

if TYPE_CHECKING:
    from rota.eval.config import EvalConfig

Metrics = dict[str, float]
_NOT_WORD = re.compile(r"[^0-9a-z]+")


class EvalFailed(RotaError):
    """An evaluation that must not count as a success; the message says why in one line."""


@dataclass(frozen=True)
class Target:
    """What a harness evaluates and where it writes."""

    model: str  # a local folder, or a name the harness resolves itself (Hugging Face)
    adapter: str | None  # a LoRA adapter (peft) folder, or None
    out: Path  # the harness's own output folder, empty when the evaluation starts


class Harness(ABC):
    kind: ClassVar[str]
    #: the fields of ``harness.limits`` that ``steps`` passes on; a config that sets another
    #: is refused
    honours: ClassVar[frozenset[str]]
    #: for a limit not honoured: why, and what to do instead (said in the refusal)
    instead: ClassVar[dict[str, str]] = {}

    @classmethod
    def refused_limits(cls, limits: Limits, tasks: list[str]) -> dict[str, str]:
        """``{limit: sentence}`` for each limit the config sets that this harness cannot
        honour (with these tasks); empty when it honours them all."""
        out = {}
        for name in limits.asked():
            if name not in cls.honours:
                note = cls.instead.get(name)
                out[name] = (f"the {cls.kind} harness does not take "
                             f"{Limits.NOUNS.get(name, name)}" + (f" ({note})" if note else ""))
        return out

    @abstractmethod
    def steps(self, cfg: EvalConfig, target: Target) -> list[list[str]]:
        """The argv of each program to run, in order: lists, never shell strings."""

    @abstractmethod
    def parse(self, cfg: EvalConfig, out: Path) -> Metrics:
        """The metrics the programs left in ``out``; raises EvalFailed when a result that
        must be there is not (an empty dict is left to the runner to refuse)."""


def number(value: Any) -> float | None:
    """A finite int or float (not a bool, not a string) as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def snake(text: str) -> str:
    """``"MMLU - EM (Robustness)"`` -> ``mmlu_em_robustness``; ``"# eval"`` -> ``num_eval``."""
    return _NOT_WORD.sub("_", text.replace("#", " num ").lower()).strip("_")


def option_args(args: dict[str, str]) -> list[str]:
    """The config's ``harness.args`` as ``--NAME VALUE`` pairs, in the order written."""
    return [w for name, value in args.items() for w in (f"--{name}", value)]


def tool(name: str) -> str:
    """A console script of the running environment (a venv's bin/ first, then PATH); the
    bare name when absent, so the runner can say it is not installed."""
    here = os.path.dirname(sys.executable)
    return shutil.which(name, path=os.pathsep.join([here, os.environ.get("PATH", "")])) or name


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise EvalFailed(f"cannot read {path}: {e}") from None
