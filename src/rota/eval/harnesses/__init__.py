"""Evaluation harnesses behind one interface (base.Harness); one module and one line in
HARNESSES each."""

from __future__ import annotations

from rota.eval.harnesses.base import EvalFailed, Harness, Metrics, Target
from rota.eval.harnesses.heldout import Heldout
from rota.eval.harnesses.helm import Helm
from rota.eval.harnesses.lm_eval import LmEval

HARNESSES: dict[str, type[Harness]] = {
    LmEval.kind: LmEval,
    Helm.kind: Helm,
    Heldout.kind: Heldout,
}


def get(kind: str) -> Harness:
    try:
        return HARNESSES[kind]()
    except KeyError:
        raise EvalFailed(f"no harness {kind!r}; known: {', '.join(HARNESSES)}") from None


__all__ = ["HARNESSES", "EvalFailed", "Harness", "Metrics", "Target", "get"]
