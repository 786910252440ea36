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
    assert progress_text({"step": 450, "loss": 0.73251, "eta_s": 37}) == \
        "step 450, loss 0.7325, ETA 37s"


def test_estimate_sizes_for_this_machine_and_learns_time_limits(rota, daemon, tmp_path,  # type: ignore[no-untyped-def]
                                                                until) -> None:
    import json
    import sys

    r = rota("estimate", "qwen2.5-7b", "--mode", "lora", "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    # the daemon's simulated GPUs have 24 GiB: 7B x 2 B x 1.3 = 18.2 GB -> 0.75 of one
    assert got["gpus"] == 0.75 and any("largest GPU of this machine" in x
                                       for x in got["reasons"])
    script = tmp_path / "train_small.py"
    script.write_text("import torch\nnet = torch.nn.Linear(2, 2).cuda()\nnet(1).backward()\n")
    job = json.loads(rota("submit", "--json", "--gpus", "0", "--", sys.executable, "-c",
                          "import time; time.sleep(0.5)", str(script)).stdout)["jobs"][0]
    until(lambda: daemon.client.job(job["id"])["state"] == "completed", what="the past run")
    r = rota("estimate", str(script))
    assert r.exit_code == 0, r.output
    assert "1 past run of train_small.py" in r.stdout and "time limit 5m" in r.stdout
    assert "suggested: rota submit --gpus 1 --time-limit 5m -- ..." in r.stdout
    bad = tmp_path / "broken.py"
    bad.write_text("def f(:\n")
    r = rota("estimate", str(bad))
    assert r.exit_code != 0 and "line 1" in r.output
    cfg = tmp_path / "model"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps({"hidden_size": 4096}))
    r = rota("estimate", str(cfg))
    assert r.exit_code != 0 and "num_hidden_layers" in r.output


def test_metrics_and_checkpoints_take_a_job_by_name(rota, daemon, tmp_path,  # type: ignore[no-untyped-def]
                                                    until) -> None:
    import json
    import sys

    script = "print({'loss': '0.5', 'epoch': '1.0'}, flush=True)"
    job = json.loads(rota("submit", "--json", "--gpus", "0", "--name", "named-run", "--",
                          sys.executable, "-c", script).stdout)["jobs"][0]
    until(lambda: daemon.client.job(job["id"])["state"] == "completed", what="the run")
    until(lambda: daemon.client.metrics(job["id"])["series"], what="its metrics")
    by_name = json.loads(rota("metrics", "named-run", "--json").stdout)
    assert by_name == json.loads(rota("metrics", str(job["id"]), "--json").stdout)
    assert by_name["series"]["loss"][0][1] == 0.5
    r = rota("checkpoints", "named-run", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["id"] == job["id"]
    assert json.loads(r.stdout)["checkpoint_dir"] is None
    assert "give the job --checkpoint-dir" in rota("checkpoints", "named-run").stdout
    # a job that has one is not told to add it
    given = json.loads(rota("submit", "--json", "--gpus", "0", "--checkpoint-dir", "ckpt",
                            "--", sys.executable, "-c", "pass").stdout)["jobs"][0]
    until(lambda: daemon.client.job(given["id"])["state"] == "completed", what="the run")
    out = " ".join(rota("checkpoints", str(given["id"])).stdout.split())
    assert "no checkpoints found in its --checkpoint-dir ckpt" in out, out
    assert "give the job --checkpoint-dir" not in out
    r = rota("metrics", "no-such-run")
    assert r.exit_code != 0 and "no job is named 'no-such-run'" in r.output
