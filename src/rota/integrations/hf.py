"""A Hugging Face Trainer callback: save and stop cleanly when Rota asks, on every rank.

    from rota.integrations.hf import RotaCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[RotaCallback()])
    trainer.train(resume_from_checkpoint=rota.job.resume_from())

At the end of each step every rank asks ``stop_requested()`` (the stop agreed across
ranks); when it is True the Trainer saves a checkpoint (``checkpoint-STEP`` in
``output_dir``) and stops training, and rank 0 tells Rota the checkpoint is complete, so a
retry or a preempted job's next attempt resumes from it (give the job
``--checkpoint-dir OUTPUT_DIR``, or rely on the report). Needs ``transformers``.
"""

from __future__ import annotations

import os
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from rota import job
from rota.integrations.stop import stop_requested


class RotaCallback(TrainerCallback):
    def __init__(self) -> None:
        self.stopping = False

    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: Any) -> TrainerControl:
        if not self.stopping and stop_requested():
            self.stopping = True
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kwargs: Any) -> TrainerControl:
        if state.is_world_process_zero:  # the checkpoint is whole once the Trainer saved it
            path = os.path.join(args.output_dir or ".", f"checkpoint-{state.global_step}")
            job.checkpoint_saved(path, step=state.global_step)
        return control
