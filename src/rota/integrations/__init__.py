"""Callbacks that make training frameworks stop cleanly when Rota asks, on every rank.

``stop_requested()`` is ``rota.job.should_stop()`` agreed across the ranks of a
``torch.distributed`` run: as soon as any rank has been asked to stop, every rank sees it
at the same step, so no rank is left waiting in a collective for one that has gone (the
original PyTorchJob trainer's callback checked rank 0 only and hung the others).
``rota.integrations.hf.RotaCallback`` uses it for the Hugging Face Trainer and
``rota.integrations.lightning.RotaCallback`` for Lightning (each imports its framework, so
importing this package needs neither).
"""

from __future__ import annotations

from rota.integrations.stop import stop_requested

__all__ = ["stop_requested"]
