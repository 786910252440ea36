"""Metrics come only from what a training log looks like: the output of programs a job
runs besides its training (pip, git, compilers, env, the engines' own lines; see
corpus/non_training/README.md) gives none, while the captured trainer logs still give
theirs."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_logs import fixture, read_log

CORPUS = Path(__file__).parent / "corpus" / "non_training"
FILES = sorted(CORPUS.glob("*.txt"))


def test_the_corpus_is_there() -> None:
    assert len(FILES) >= 14


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_non_training_output_gives_no_metric(path: Path, tmp_path: Path) -> None:
    got = read_log(path.read_bytes(), tmp_path)
    assert got.series == {}


def test_trainer_logs_still_give_their_metrics(tmp_path: Path) -> None:
    for sub in ("hf", "k1", "k2"):
        (tmp_path / sub).mkdir()
    hf = read_log(fixture("hf_trainer_4.57.6.log"), tmp_path / "hf")
    assert {"loss", "grad_norm", "learning_rate", "eval_loss", "train_loss"} <= set(hf.series)
    for sub, name in (("k1", "keras_3.15.1_verbose1.log"), ("k2", "keras_3.15.1_verbose2.log")):
        keras = read_log(fixture(name), tmp_path / sub)
        assert {"loss", "accuracy"} <= set(keras.series), name


def test_a_training_line_after_non_training_output_still_counts(tmp_path: Path) -> None:
    data = (CORPUS / "env.txt").read_bytes() + b"step 10: loss=0.5 tokens_seen=1200\n"
    got = read_log(data, tmp_path)
    assert got.series == {"loss": [(10, 0.5)], "tokens_seen": [(10, 1200.0)]}
