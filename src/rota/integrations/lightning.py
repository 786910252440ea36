"""A Lightning callback: save and stop cleanly when Rota asks, on every rank.

    import rota.job
    from rota.integrations.lightning import RotaCallback
    rota_cb = RotaCallback()  # saves to <default_root_dir>/checkpoints unless dirpath= says
    trainer = Trainer(..., callbacks=[rota_cb])
    trainer.fit(model, ckpt_path=rota.job.resume_from())
    if rota_cb.stopped:
        sys.exit(0)  # Rota runs the job again, from the checkpoint just saved

At the end of each training batch every rank asks ``stop_requested()`` (the stop agreed
across ranks); when it is True every rank calls ``trainer.save_checkpoint`` (Lightning
writes from rank 0, then waits for all), rank 0 tells Rota the checkpoint is complete, and
the Trainer stops. The file is ``epoch=E-step=S.ckpt``, so Rota reads the step from its
name; give the job ``--checkpoint-dir`` on that folder, or rely on the report.

While fitting, the stop signal is Rota's alone: Lightning's own SIGTERM handler would end
``fit`` after the batch with no checkpoint (and under DDP broadcasts from inside the
handler, out of step with the other ranks); Lightning puts the earlier handlers back when
``fit`` ends. A stop is not an early stop that ``min_epochs``/``min_steps`` may veto, and
the validation Lightning runs before an early stop is skipped: the grace is for saving.

Uses ``lightning.pytorch`` when it is installed, else ``pytorch_lightning``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

try:
    from lightning.pytorch import Callback, LightningModule, Trainer
except ImportError:
    from pytorch_lightning import Callback, LightningModule, Trainer

from rota import job
from rota.integrations.stop import stop_requested

__all__ = ["RotaCallback"]


class RotaCallback(Callback):
    def __init__(self, dirpath: str | os.PathLike[str] | None = None) -> None:
        self.dirpath = None if dirpath is None else Path(dirpath)
        self.stopped = False
        self.saved: Path | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        job.should_stop()  # Rota's handler from here on: a stop while loading is kept

    def on_sanity_check_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        job.take_stop_signal()  # Lightning has installed its own by now

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        job.take_stop_signal()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        if self.stopped or not stop_requested():  # every rank asks, every batch
            return
        self.stopped = True
        step = trainer.global_step
        folder = self.dirpath or Path(trainer.default_root_dir) / "checkpoints"
        self.saved = folder / f"epoch={trainer.current_epoch}-step={step}.ckpt"
        trainer.save_checkpoint(self.saved)  # every rank: rank 0 writes, all wait for it
        if trainer.is_global_zero:
            job.checkpoint_saved(self.saved, step=step)
        trainer.should_stop = True
        trainer.fit_loop.min_epochs = None  # Rota's stop is not theirs to veto
        trainer.fit_loop.epoch_loop.min_steps = None
        trainer.limit_val_batches = 0  # no validation before stopping: the grace is short
