"""A busy machine, as the docs show it: every page renders a realistic mix of jobs and GPUs.

`ROTA_SCREENSHOTS=docs/img pytest tests/ui/test_screenshots.py` refreshes the pictures in
docs/dashboard.md; without it they go to a temp dir and only the checks count.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_evals_page import submit_eval_runs

from rota_testing import wait_until

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture fails (ROTA_REQUIRE_BROWSER) or skips the test
    expect = None

# A stand-in for a training script: it prints what one prints, slowly, until cancelled.
TRAIN = """
import math, random, sys, time
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
random.seed(7)
print(f"loading {args.get('--model', 'model')} in bf16, LoRA r=16", flush=True)
print("trainable params: 19,988,480 of 6,758,404,096 (0.30%)", flush=True)
for step in range(1, 100000):
    loss = 1.9 * math.exp(-step / 90) + 0.85 + random.random() * 0.04
    print(f"step {step:5d} | loss {loss:.4f} | lr {args.get('--lr', '2e-4')} | 2.41 it/s",
          flush=True)
    if step % 40 == 0:
        print(f"saved checkpoint to checkpoints/step-{step}", flush=True)
    time.sleep(0.02)
"""
SECRET = "hf_showcase_secret_9d1c"


@pytest.fixture
def busy(tmp_path: Path, new_dashboard: Callable[[Path], Any]) -> Iterator[Any]:
    with new_dashboard(tmp_path / "home") as dash:
        yield dash


def test_pages_of_a_busy_machine(busy: Any, open_page: Callable[..., Any],
                                 shots: Callable[..., Path], tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(TRAIN)
    def sub(user: str = "alice", **spec: Any) -> int:
        return int(busy.submit(user, **spec)["id"])

    quick = sub(name="eval-mmlu-5shot", gpus=0.25,
                command=["python3", "-c", "print('mmlu 5-shot accuracy: 0.634')"])
    sub("bob", name="tokenize-shards", gpus=0, command=["sh", "-c", "echo 512 shards done"])
    sub("bob", name="finetune-mistral-bs64", gpus=1, gpu_mem="22G",
        command=["sh", "-c", "echo 'torch.cuda.OutOfMemoryError: CUDA out of memory' >&2; exit 1"])
    wait_until(lambda: busy.job(quick)["state"] == "completed", what="the quick job")
    gone = sub(name="debug-dataloader", gpus=0.25, command=["sleep", "600"], hold=True)
    with busy.api() as c:
        c.post(f"/v1/jobs/{gone}/cancel").raise_for_status()
        c.post("/v1/gpus/3/simulate", json={"external_mem": 7 << 30, "external_util": 0.35})
        c.post("/v1/gpus/3/pause").raise_for_status()
    train = sub(name="llama-7b-lora", gpus=1, gpu_mem="20G", time_limit="2h", priority=-1,
                env={"WANDB_PROJECT": "lora-sweeps", "HF_TOKEN": SECRET},
                secret_env=["HF_TOKEN"], cwd=str(work),
                command=["python3", "-u", "train.py", "--model", "meta-llama/Llama-2-7b-hf",
                         "--lr", "2e-4", "--out", "checkpoints/llama 7b lora"])
    for lr in ("3e-4", "1e-4"):
        sub("bob", name=f"sweep-lr={lr}", gpus=0.5, gpu_mem="9G", cwd=str(work),
            command=["python3", "-u", "train.py", "--model", "Qwen/Qwen2.5-1.5B", "--lr", lr])
    sub(name="qwen2.5-7b-eval", gpus=0.5, gpu_mem="16G", command=["sleep", "600"])
    sub(name="pretrain-1b-4gpu", gpus=4, command=["sleep", "600"])
    sub("bob", name="ablation-no-warmup", gpus=1, command=["sleep", "600"], hold=True)
    wait_until(lambda: busy.job(train)["state"] == "running", what="the training job")

    page = open_page(on=busy, height=800)
    expect(page.locator("tr[data-state=running]")).to_have_count(4)
    expect(page.locator("tr[data-state=pending] .reason")).to_contain_text("GPU")
    page.mouse.move(0, 0)
    page.wait_for_timeout(1500)
    shots(page, "queue", full_page=False)

    page.goto(busy.url + f"#/jobs/{train}")
    expect(page.locator("pre.log")).to_contain_text("saved checkpoint")
    expect(page.locator("table.env")).to_contain_text("***")
    # `step 40 | loss 1.02 | lr 2e-4 | 2.41 it/s` lines became a loss curve and progress
    expect(page.locator("figure[data-metric=loss] polyline")).to_have_count(1)
    expect(page.locator("figure[data-metric=lr]")).to_be_visible()
    page.wait_for_timeout(1000)
    shots(page, "job")

    page.goto(busy.url + "#/submit")
    page.get_by_label("Command").fill("python3 train.py --config 'configs/llama 7b.yaml' --lr 2e-4")
    page.get_by_label("Name", exact=True).fill("llama-7b-lora-v2")
    page.get_by_label("GPUs").fill("1.5")
    page.get_by_label("GPU memory").fill("20G")
    page.get_by_label("Time limit").fill("2 hours")
    page.get_by_label("Environment", exact=True).fill("WANDB_PROJECT=lora-sweeps")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#s-gpus-error")).to_be_visible()
    page.wait_for_timeout(300)
    shots(page, "submit")

    for name, kwargs, where in (("phone", {"width": 375, "height": 812}, "#/jobs"),
                                ("phone-job", {"width": 375, "height": 812}, f"#/jobs/{train}"),
                                ("dark", {"scheme": "dark", "height": 800}, "#/gpus"),
                                ("dark-job", {"scheme": "dark", "height": 800}, f"#/jobs/{train}")):
        p = open_page(on=busy, hash=where, **kwargs)
        expect(p.locator(".live")).to_contain_text("live")
        p.wait_for_timeout(1200)
        assert SECRET not in p.content()
        shots(p, name, full_page=False)

    page.goto(busy.url + "#/gpus")
    expect(page.locator(".gpu-card .badge-paused")).to_have_count(1)
    expect(page.locator("[data-gpu='3']")).to_contain_text("outside Rota 7G")
    page.wait_for_timeout(500)  # the charts have a few samples by now
    shots(page, "gpus")

    signin = open_page(None, on=busy, height=640)
    expect(signin.get_by_label("API token")).to_be_focused()
    shots(signin, "signin", full_page=False)
    assert not re.search(SECRET, page.content())


# Evaluations as `rota eval submit` runs them: two configs, three models, a LoRA adapter.
EVAL_RUNS = [
    ("lm-eval-core", "meta-llama/Llama-3.2-1B",
     {"arc_easy/acc": 0.6532, "arc_easy/acc_stderr": 0.0098, "hellaswag/acc": 0.4771,
      "hellaswag/acc_stderr": 0.005, "mmlu/acc": 0.3102, "wikitext/word_perplexity": 11.87}),
    ("lm-eval-core", "Qwen/Qwen2.5-1.5B",
     {"arc_easy/acc": 0.7205, "arc_easy/acc_stderr": 0.0092, "hellaswag/acc": 0.5012,
      "hellaswag/acc_stderr": 0.005, "mmlu/acc": 0.5981, "wikitext/word_perplexity": 10.42}),
    ("lm-eval-core", "runs:/8c41f0/llama-1b-lora",
     {"arc_easy/acc": 0.6719, "arc_easy/acc_stderr": 0.0096, "hellaswag/acc": 0.4825,
      "hellaswag/acc_stderr": 0.005, "mmlu/acc": 0.3377, "wikitext/word_perplexity": 12.31}),
    ("gsm8k-5shot", "Qwen/Qwen2.5-1.5B",
     {"gsm8k/exact_match/strict-match": 0.6171, "gsm8k/exact_match_stderr/strict-match": 0.0134}),
]


def test_the_evaluations_page(busy: Any, open_page: Callable[..., Any],
                              shots: Callable[..., Path]) -> None:
    submit_eval_runs(busy, EVAL_RUNS)
    page = open_page(on=busy, hash="#/evals", height=800)
    expect(page.locator("table.evals tbody tr")).to_have_count(len(EVAL_RUNS))
    expect(page.locator("figure.ev-chart")).to_have_count(5)
    page.mouse.move(0, 0)
    shots(page, "evals")
