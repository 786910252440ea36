"""A job's card: its facts shown in Markdown and in HTML (every value escaped there), and
its loss curve drawn as an SVG polyline of at most CURVE_POINTS points."""

from __future__ import annotations

import re

from rota.server.cards import CURVE_POINTS, CardFacts, curve_metric, curve_svg, html_page, markdown


def facts(**more: object) -> CardFacts:
    base: dict[str, object] = dict(
        job={"id": 7, "name": "<script>alert(1)</script>", "user": "alice",
             "project": "vision", "state": "completed", "created_at": 0.0,
             "ended_at": 10.0, "end_reason": None},
        spec={"command": ["python", "train.py", "--lr", "1e-4 & rm -rf"], "gpus": 0.5,
              "cwd": "/work", "env": {"SEED": "1", "TOKEN": "s3cr3t"},
              "secret_env": ["TOKEN"], "tags": ["a", "b"]},
        attempts=2, gpu_hours=1.25, cost=3.5,
        metrics={"acc": [(1, 0.5), (2, 0.75)],
                 "loss": [(i, 1.0 / (i + 1)) for i in range(1000)]},
        checkpoint="/work/ckpt/step-1000", outputs=[
            {"path": "out/model.bin", "size": 1024, "sha256": "ab" * 32}])
    base.update(more)
    return CardFacts(**base)  # type: ignore[arg-type]


def test_the_markdown_card_tells_command_cost_metrics_and_outputs() -> None:
    text = markdown(facts())
    assert "| Command | `python train.py --lr '1e-4 & rm -rf'` |" in text
    assert "| Cost | 3.50 |" in text and "| GPU-hours | 1.250 |" in text
    assert "| Attempts | 2 |" in text
    assert "| loss | 0.001 | 0.001 | 1 | 1000 |" in text
    assert "| acc | 0.75 | 0.5 | 0.75 | 2 |" in text
    assert "![loss by step](loss.svg)" in text
    assert "| out/model.bin | 1024 | `abababababababab` |" in text
    assert "TOKEN=***" in text and "s3cr3t" not in text  # a secret's value never shown
    assert "| Cost | - |" in markdown(facts(cost=None))
    assert "No metrics were read" in markdown(facts(metrics={}))


def test_the_html_card_escapes_every_value() -> None:
    page = html_page(facts())
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "1e-4 &amp; rm -rf" in page
    assert "<svg" in page and "s3cr3t" not in page


def test_the_curve_is_the_loss_thinned_to_its_points() -> None:
    f = facts()
    assert curve_metric(f.metrics) == "loss"
    assert curve_metric({"acc": [(1, 0.1)]}) == "acc"
    svg = curve_svg("loss", f.metrics["loss"])
    points = re.search(r'points="([^"]+)"', svg)
    assert points is not None and len(points.group(1).split()) == CURVE_POINTS
    assert "loss: 1 to 0.001" in svg and "step 0 to 999" in svg
    one = curve_svg("x", [(None, 2.0)])  # a single sample, no step: drawn, not divided by 0
    assert 'points="36.0,204.0"' in one

