"""A run's setup is not a metric (issue 38): identifiers, seeds, device lists and counts a
job prints beside its learning rate give no metric and no chart; the learning rate does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from trainer_logs import fixture, read_log

from rota.ml.reading import _setup

CORPUS = Path(__file__).parent / "corpus" / "non_training"
# What the reporter saw: the job prints its settings before it trains.
REPORTED = ("print(f'lr={0.001} seed={0} "
            "CUDA_VISIBLE_DEVICES={os.environ[\"CUDA_VISIBLE_DEVICES\"]}')")


def test_a_settings_line_gives_the_learning_rate_only(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", f"import os; {REPORTED}"], check=True,
                         capture_output=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"})
    assert out.stdout == b"lr=0.001 seed=0 CUDA_VISIBLE_DEVICES=0\n"
    got = read_log(out.stdout, tmp_path)
    assert got.series == {"lr": [(None, 0.001)]}


def test_what_env_says_of_the_run_is_setup() -> None:
    # a real `env` of a job (corpus/non_training/README.md): the device list, the job's id,
    names = {line.split("=", 1)[0].lower()
             for line in (CORPUS / "env.txt").read_text().splitlines() if "=" in line}
    # the rendezvous port, the world size, the rank and the thread count are the run's setup
    setup = {"cuda_visible_devices", "rota_job_id", "master_port", "world_size", "local_rank",
             "omp_num_threads"}
    assert setup <= names
    assert all(_setup(n) for n in setup)
    assert not any(_setup(n) for n in names - setup)  # home, path, lang, shlvl, rota_attempt


def test_counts_of_parts_are_setup_counts_of_work_are_not() -> None:
    for name in ("num_gpus", "n_gpu", "num_workers", "n_layer", "n_head", "nb_nodes",
                 "gpu_ids", "random_seed", "data_seed", "node_rank", "device", "run_id"):
        assert _setup(name), name
    # what a trainer measures as it goes: tokens seen, GPU memory, the learning rate
    for name in ("num_tokens", "num_input_tokens_seen", "tokens_seen", "gpu_mem", "lr",
                 "learning_rate", "train/loss", "mean_token_accuracy"):
        assert not _setup(name), name


def test_the_captured_trainer_logs_lose_no_metric(tmp_path: Path) -> None:
    hf = read_log(fixture("hf_trainer_4.57.6.log"), tmp_path)
    assert hf.series and not any(_setup(n) for n in hf.series)
