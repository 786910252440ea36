"""The pieces of `rota metrics` that turn numbers into text."""

from __future__ import annotations

from rota.cli.ml import progress_text, sparkline


def test_sparkline_scales_and_buckets() -> None:
    assert sparkline([]) == ""
    assert sparkline([1.0]) == "▁"
    assert sparkline([3.0, 2.0, 1.0]) == "█▅▁"
    assert sparkline([5.0] * 7) == "▁" * 7
    line = sparkline([float(i) for i in range(1000)], width=40)
    assert len(line) == 40 and line[0] == "▁" and line[-1] == "█"
    assert list(line) == sorted(line)


def test_progress_text() -> None:
    assert progress_text(None) == ""
    assert progress_text({"fraction": 0.45, "step": 450, "total_steps": 1000, "rate": 14.8,
                          "eta_s": 37}) == "45%, step 450/1000, 14.8 steps/s, ETA 37s"
    assert progress_text({"epoch": 2, "total_epochs": 10, "rate": 0.4}) == \
        "epoch 2/10, 2.5 s/step"
