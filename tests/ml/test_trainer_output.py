"""Metrics and progress from the console output of the trainers people use, read as the
daemon reads a job's log: output of real runs made here where the package is installed
(Hugging Face Trainer, Lightning, Accelerate, tqdm), and output captured once from real
runs where CI does not install the package (transformers 4, Keras 3: tests/ml/fixtures,
each file's header says how it was made)."""

from __future__ import annotations

import importlib.util
import json
import os
import textwrap
from pathlib import Path

import pytest
from trainer_logs import FIXTURES, Read, fixture, read_log

from hf_testing import TINY_TRAINER, run_captured
from rota.ml.checkpoints import find, newest_valid

REQUIRE = bool(os.environ.get("ROTA_REQUIRE_TORCH"))


def needs(*modules: str) -> None:
    """Skip unless every module is installed; under ROTA_REQUIRE_TORCH (CI), fail."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        if REQUIRE:
            pytest.fail(f"ROTA_REQUIRE_TORCH is set but {', '.join(missing)} is missing")
        pytest.skip(f"needs {', '.join(missing)} (pip install 'rota[ml]')")


def approx_list(values: list[float], rel: float = 2e-3) -> object:
    return pytest.approx(values, rel=rel)


def check_hf_trainer(got: Read, history: list[dict[str, float]], max_steps: int) -> None:
    """What was read matches the Trainer's own record of its logs (trainer_state.json)."""
    losses = [h["loss"] for h in history if "loss" in h]
    assert got.values("loss") == approx_list(losses)
    assert got.values("learning_rate") == approx_list(
        [h["learning_rate"] for h in history if "learning_rate" in h])
    assert got.values("grad_norm") == approx_list(
        [h["grad_norm"] for h in history if "grad_norm" in h])
    assert got.values("eval_loss") == approx_list(
        [h["eval_loss"] for h in history if "eval_loss" in h])
    assert len(got.values("train_loss")) == 1
    # the evaluation bar drawn inside the training bar (its 0/8 at each evaluation) is
    # no training progress: the evaluation's metrics keep the step it ran at
    assert [s for s, _ in got.series["eval_loss"]] == [
        h["step"] for h in history if "eval_loss" in h]
    p = got.progress
    assert (p.step, p.total_steps, p.epoch) == (max_steps, max_steps, 1.0)
    assert "epoch" not in got.series  # a progress field, not a metric


def test_hf_trainer_with_the_installed_transformers(tmp_path: Path) -> None:
    """transformers 5 prints its values as strings: {'loss': '3.9', ...}."""
    needs("torch", "transformers")
    data = run_captured(TINY_TRAINER, "out", "8", cwd=tmp_path)
    got = read_log(data, tmp_path)
    state = json.loads((tmp_path / "out" / "checkpoint-8" / "trainer_state.json").read_text())
    check_hf_trainer(got, state["log_history"], 8)
    # its checkpoints are found without --checkpoint-dir, complete by their content
    import time
    now = time.time()
    found = find(None, str(tmp_path), now=now)
    assert [(Path(c.path).name, c.valid) for c in found] == [
        ("checkpoint-4", True), ("checkpoint-8", True)]
    weights = tmp_path / "out" / "checkpoint-8" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # as if the save had been cut short
    best = newest_valid(find(None, str(tmp_path), now=now))
    assert best is not None and Path(best.path).name == "checkpoint-4"


def test_hf_trainer_4_captured(tmp_path: Path) -> None:
    """transformers 4 prints numbers: {'loss': 3.9001, ...}; the evaluation bar too."""
    got = read_log(fixture("hf_trainer_4.57.6.log"), tmp_path)
    state = json.loads((FIXTURES / "hf_trainer_4.57.6.trainer_state.json").read_text())
    check_hf_trainer(got, state["log_history"], 8)


LIGHTNING = textwrap.dedent("""
    import json, sys, torch
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)
            self.last = {}
        def training_step(self, batch, i):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss, prog_bar=True)
            self.last["train_loss"] = loss.item()
            return loss
        def validation_step(self, batch, i):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y), prog_bar=True)
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    def data(n):
        g = torch.Generator().manual_seed(n)
        ds = torch.utils.data.TensorDataset(torch.randn(n, 8, generator=g),
                                            torch.randn(n, 1, generator=g))
        return torch.utils.data.DataLoader(ds, batch_size=4)

    torch.manual_seed(0)
    trainer = pl.Trainer(accelerator="cpu", max_epochs=2, default_root_dir=".", logger=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    net = Net()
    trainer.fit(net, train_dataloaders=data(64), val_dataloaders=data(20))
    json.dump({**net.last, "val_loss": trainer.callback_metrics["val_loss"].item()},
              open("truth.json", "w"))
""")


def test_lightning_progress_bar(tmp_path: Path) -> None:
    needs("torch")
    if importlib.util.find_spec("lightning") is None:
        needs("pytorch_lightning")
    data = run_captured(LIGHTNING, cwd=tmp_path)
    truth = json.loads((tmp_path / "truth.json").read_text())
    got = read_log(data, tmp_path)
    # 16 training batches an epoch; the validation bar (5 batches) is no training progress
    p = got.progress
    assert (p.epoch, p.step, p.total_steps) == (1.0, 16, 16)
    # the bar shows the last logged loss with 3 significant digits
    assert got.values("train_loss")[-1] == pytest.approx(float(f"{truth['train_loss']:.3g}"))
    assert got.values("val_loss")[-1] == pytest.approx(float(f"{truth['val_loss']:.3g}"))
    assert "v_num" not in got.series
    # its default checkpoint is found without --checkpoint-dir
    import time
    best = newest_valid(find(None, str(tmp_path), now=time.time()))
    assert best is not None and best.valid and best.path.endswith("epoch=1-step=32.ckpt")


ACCELERATE = textwrap.dedent("""
    import json, logging, math, torch
    from accelerate import Accelerator
    from accelerate.logging import get_logger
    from tqdm.auto import tqdm

    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
                        datefmt="%m/%d/%Y %H:%M:%S", level=logging.INFO)
    logger = get_logger(__name__)
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 8, generator=g), torch.randint(0, 2, (64,), generator=g)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    progress_bar = tqdm(range(16), disable=not accelerator.is_local_main_process)
    truth = []
    for epoch in range(2):
        for xb, yb in loader:
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            accelerator.backward(loss)
            opt.step(); opt.zero_grad()
            progress_bar.update(1)
        with torch.no_grad():
            eval_loss = torch.nn.functional.cross_entropy(model(x), y).item()
            accuracy = (model(x).argmax(-1) == y).float().mean().item()
        # as Accelerate's examples print and log
        accelerator.print(f"epoch {epoch}:", {"accuracy": accuracy, "f1": accuracy / 2})
        logger.info(f"epoch {epoch}: perplexity: {math.exp(eval_loss)} eval_loss: {eval_loss}")
        truth.append({"accuracy": accuracy, "perplexity": math.exp(eval_loss),
                      "eval_loss": eval_loss})
    json.dump(truth, open("truth.json", "w"))
""")


def test_accelerate_print_and_logging(tmp_path: Path) -> None:
    needs("torch", "accelerate")
    data = run_captured(ACCELERATE, cwd=tmp_path)
    truth = json.loads((tmp_path / "truth.json").read_text())
    got = read_log(data, tmp_path)
    for name in ("accuracy", "perplexity", "eval_loss"):
        assert got.values(name) == approx_list([t[name] for t in truth], rel=1e-9), name
    assert got.values("f1") == approx_list([t["accuracy"] / 2 for t in truth], rel=1e-9)
    p = got.progress
    assert (p.step, p.total_steps, p.epoch) == (16, 16, 1.0)


TQDM = textwrap.dedent("""
    import json, sys
    from tqdm import tqdm
    truth = []
    bar = tqdm(range(30), desc="train", postfix={"loss": 5.0}, mininterval=0)
    for step in bar:
        loss, lr = 5.0 / (step + 1), 1e-3 * 0.9 ** step
        bar.set_postfix(loss=loss, lr=lr)
        truth.append((loss, lr))
    json.dump(truth, open("truth.json", "w"))
""")


def test_tqdm_postfix(tmp_path: Path) -> None:
    needs("tqdm")
    data = run_captured(TQDM, cwd=tmp_path)
    truth = json.loads((tmp_path / "truth.json").read_text())
    got = read_log(data, tmp_path)
    # tqdm prints a float postfix with 3 significant digits; every redraw is a sample
    want = [float(f"{loss:.3g}") for loss, _ in truth]
    seen = got.values("loss")
    assert seen[0] == 5.0 and seen[-1] == want[-1] and set(seen) <= {5.0, *want}
    assert got.values("lr")[-1] == pytest.approx(float(f"{truth[-1][1]:.3g}"))
    assert (got.progress.step, got.progress.total_steps) == (30, 30)


@pytest.mark.parametrize("verbose", [1, 2])
def test_keras_3_captured(tmp_path: Path, verbose: int) -> None:
    """Keras 3's bar (verbose=1) redraws with backspaces; verbose=2 prints one line an
    epoch. Keras is not among Rota's extras: the output was captured once."""
    got = read_log(fixture(f"keras_3.15.1_verbose{verbose}.log"), tmp_path)
    # the end-of-epoch lines: values as printed
    assert got.values("val_loss") == [0.5724, 0.5676, 0.5628]
    assert got.values("val_accuracy") == [0.7031, 0.6875, 0.7031]
    end_losses = [0.6106, 0.6041, 0.5972]
    if verbose == 1:  # the redraws at step 1 of each epoch come first
        assert got.values("loss") == [0.5444, 0.6106, 0.6872, 0.6041, 0.4594, 0.5972]
    else:
        assert got.values("loss") == end_losses
    p = got.progress
    assert (p.epoch, p.total_epochs, p.step, p.total_steps) == (3.0, 3, 6, 6)
