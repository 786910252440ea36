"""The Lightning callback: a stop from Rota saves a checkpoint named with the step and ends
``fit`` cleanly, on one process and on every rank of a DDP run; a resumed fit goes on from
that step."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:
    import torch  # noqa: F401

    try:
        import lightning.pytorch  # noqa: F401
    except ImportError:
        import pytorch_lightning  # noqa: F401
except ImportError:
    if os.environ.get("ROTA_REQUIRE_TORCH"):
        raise
    pytest.skip("needs torch and Lightning (pip install 'rota[ml]')", allow_module_level=True)

# min_epochs=1 and a validation loop on purpose: Rota's stop must not wait for the epoch's
# end, nor run a validation first; the stop signal comes during step 3 on SIGNAL_RANK.
SCRIPT = textwrap.dedent("""
    import os, signal, sys, torch
    try:
        import lightning.pytorch as pl
        from lightning.pytorch.strategies import DDPStrategy
    except ImportError:
        import pytorch_lightning as pl
        from pytorch_lightning.strategies import DDPStrategy
    from rota import job
    from rota.integrations.lightning import RotaCallback

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)
            self.trained = self.validated = 0

        def training_step(self, batch, i):
            if (self.trainer.global_step == 3 and not job.resume_from()
                    and str(self.global_rank) == os.environ["SIGNAL_RANK"]):
                os.kill(os.getpid(), signal.SIGTERM)
            self.trained += 1
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def validation_step(self, batch, i):
            self.validated += 1

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def data():
        g = torch.Generator().manual_seed(0)
        ds = torch.utils.data.TensorDataset(torch.randn(64, 8, generator=g),
                                            torch.randn(64, 1, generator=g))
        return torch.utils.data.DataLoader(ds, batch_size=2)

    torch.manual_seed(0)
    ddp = int(os.environ.get("WORLD_SIZE", "1")) > 1
    rota_cb = RotaCallback()
    trainer = pl.Trainer(
        accelerator="cpu", devices=2 if ddp else 1,
        strategy=DDPStrategy(process_group_backend="gloo") if ddp else "auto",
        max_steps=int(sys.argv[2]), min_epochs=1, default_root_dir=sys.argv[1],
        num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[rota_cb])
    model = Net()
    trainer.fit(model, train_dataloaders=data(), val_dataloaders=data(),
                ckpt_path=job.resume_from())
    print(f"rank {trainer.global_rank}: trained {model.trained} batches, validated "
          f"{model.validated}, global step {trainer.global_step}, stopped {rota_cb.stopped}",
          flush=True)
    sys.exit(0)
""")


def run(tmp_path: Path, *, steps: int, ranks: int = 1, signal_rank: int = 0,
        resume: Path | None = None) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "fit.py"
    script.write_text(SCRIPT)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ROTA_")},
           "ROTA_EVENTS_FILE": str(tmp_path / "events.jsonl"), "SIGNAL_RANK": str(signal_rank),
           "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    if resume is not None:
        env["ROTA_RESUME_FROM"] = str(resume)
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone",
              "--nproc-per-node", str(ranks)] if ranks > 1 else [sys.executable]
    r = subprocess.run([*launch, str(script), str(tmp_path / "out"), str(steps)], env=env,
                       capture_output=True, text=True, timeout=240, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return r


def reported(tmp_path: Path) -> list[tuple[str, int]]:
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    return [(e["path"], e["step"]) for e in map(json.loads, lines)]


def test_a_stop_saves_at_that_step_and_a_resumed_fit_goes_on(tmp_path: Path) -> None:
    r = run(tmp_path, steps=10)
    # step 3 was running when the signal came: saved after it, at global step 4; no
    # validation, no wait for min_epochs, and fit returned (Lightning did not exit for us)
    assert "rank 0: trained 4 batches, validated 0, global step 4, stopped True" in r.stdout
    ckpt = tmp_path / "out" / "checkpoints" / "epoch=0-step=4.ckpt"
    assert [p.name for p in ckpt.parent.iterdir()] == [ckpt.name]
    assert reported(tmp_path) == [(str(ckpt), 4)]

    r = run(tmp_path, steps=10, resume=ckpt)
    # from step 4 on to max_steps (mid-epoch: no validation yet)
    assert "rank 0: trained 6 batches, validated 0, global step 10, stopped False" in r.stdout


def test_ddp_ranks_stop_together_when_one_is_signalled(tmp_path: Path) -> None:
    """Two ranks under torchrun, DDP on gloo, the signal at rank 1 only: both stop after
    the same step, rank 0 writes the one checkpoint and reports it, both exit 0."""
    r = run(tmp_path, steps=50, ranks=2, signal_rank=1)
    found = sorted(re.findall(r"rank \d: trained \d+ batches, validated \d+, global step \d+, "
                              r"stopped (?:True|False)", r.stdout))
    assert found == [f"rank {k}: trained 4 batches, validated 0, global step 4, stopped True"
                     for k in (0, 1)], r.stdout
    ckpt = tmp_path / "out" / "checkpoints" / "epoch=0-step=4.ckpt"
    assert [p.name for p in ckpt.parent.iterdir()] == [ckpt.name]
    assert reported(tmp_path) == [(str(ckpt), 4)]
