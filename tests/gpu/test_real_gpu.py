"""On a machine with an NVIDIA GPU: the daemon reads it through NVML, counts memory held by
processes it did not start, records each job's peak, retries a real CUDA out-of-memory,
and the templates train and evaluate on it (bf16 where the GPU has it).

Skipped where no NVIDIA driver answers (CI has none); run on a GPU machine with
``pytest tests/gpu``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rota_testing import DaemonProcess, nvidia_driver_present, wait_until

if not nvidia_driver_present():
    pytest.skip("needs an NVIDIA GPU and its driver (NVML)", allow_module_level=True)

torch = pytest.importorskip("torch")

from hf_testing import OFFLINE, attempts_log, build_tiny_llama, finished, job, submit  # noqa: E402

GIB = 2**30
# A job (or an outside process) that holds N GiB on its GPU for S seconds.
HOLD = ("import os, sys, time, torch\n"
        "print('CUDA_VISIBLE_DEVICES=' + os.environ.get('CUDA_VISIBLE_DEVICES', '-'),\n"
        "      'device_count=' + str(torch.cuda.device_count()), flush=True)\n"
        "x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device='cuda')\n"
        "torch.cuda.synchronize()\n"
        "print('holding', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n")


@pytest.fixture
def gpu_daemon(daemon_factory: type[DaemonProcess]) -> DaemonProcess:
    # GPU readings every 0.2 s, so that short jobs' peaks and outside memory are seen soon
    return daemon_factory(simulate=None, extra_env={**OFFLINE, "ROTA_DEVICE_POLL": "0.2"}).start()


@pytest.fixture
def outside() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes Rota did not start, holding GPU memory; killed at the end."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait(10)


def hold_outside(procs: list[subprocess.Popen[str]], gib: float) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(gib), "600"], text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    procs.append(p)
    assert p.stdout is not None
    for line in p.stdout:
        if line.startswith("holding"):
            return p
    raise AssertionError(f"the outside process did not allocate: exit {p.wait()}")


def gpu0(d: DaemonProcess) -> dict[str, Any]:
    with d.client() as c:
        data = c.gpus()
    assert data["devices"] != "simulated", data
    return next(g for g in data["gpus"] if g["index"] == 0)


def attempts(d: DaemonProcess, job_id: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = job(d, job_id)["attempts_detail"]
    return got


def hold_job(d: DaemonProcess, gib: float, seconds: float, *flags: str) -> int:
    return d.submit(*flags, "--", sys.executable, "-c", HOLD, str(gib), str(seconds))


def test_gpus_read_through_nvml_count_outside_memory(
        gpu_daemon: DaemonProcess, outside: list[subprocess.Popen[str]]) -> None:
    with gpu_daemon.client() as c:
        data = c.gpus()
    assert len(data["gpus"]) == torch.cuda.device_count()
    g = gpu0(gpu_daemon)
    assert "NVIDIA" in g["name"] and g["healthy"] and not g["paused"]
    # NVML's total and CUDA's agree within the driver's reserve
    assert g["memory_total"] == pytest.approx(torch.cuda.get_device_properties(0).total_memory,
                                              rel=0.02)
    before = g["memory_external"]
    hold_outside(outside, 4)
    g = wait_until(lambda: (h := gpu0(gpu_daemon))["memory_external"] >= before + 4 * GIB
                   and h, timeout=10, what="4 GiB held outside Rota to be read")
    assert g["memory_used"] >= g["memory_external"] and g["jobs"] == []
    table = gpu_daemon.cli("gpus")
    assert table.returncode == 0 and "read through NVML" in table.stdout, table.stdout
    outside[0].kill()
    wait_until(lambda: gpu0(gpu_daemon)["memory_external"] < before + GIB, timeout=10,
               what="the outside memory to be freed")


def test_a_job_gets_its_gpu_and_its_peak_memory_is_recorded(gpu_daemon: DaemonProcess) -> None:
    job_id = hold_job(gpu_daemon, 3, 3, "--gpus", "1", "--name", "hold3")
    wait_until(lambda: job(gpu_daemon, job_id)["state"] == "running", timeout=30,
               what="the job to run")
    # while it holds its memory, that memory is the job's, not outside use
    g = wait_until(lambda: (h := gpu0(gpu_daemon))["memory_used"] >= 3 * GIB and h,
                   timeout=20, what="the job's memory to be read")
    assert job_id in g["jobs"] and g["memory_external"] < GIB, g
    finished(gpu_daemon, job_id, timeout=60)
    log = attempts_log(gpu_daemon, job_id)
    assert "CUDA_VISIBLE_DEVICES=0 device_count=1" in log, log
    [attempt] = attempts(gpu_daemon, job_id)
    assert attempt["gpus"] == [0]
    assert 3 * GIB <= attempt["peak_gpu_mem"] < 5 * GIB, attempt  # 3 GiB and CUDA's context


def test_two_half_gpu_jobs_share_the_gpu(gpu_daemon: DaemonProcess) -> None:
    ids = [hold_job(gpu_daemon, 1, 6, "--gpus", "0.5") for _ in range(2)]
    wait_until(lambda: all(job(gpu_daemon, i)["state"] == "running" for i in ids), timeout=30,
               what="both halves to run at once")
    g = gpu0(gpu_daemon)
    assert sorted(g["jobs"]) == ids and g["allocated"] == pytest.approx(1.0), g
    for i in ids:
        finished(gpu_daemon, i, timeout=60)
        assert attempts(gpu_daemon, i)[0]["gpus"] == [0]


def test_a_memory_request_waits_for_memory_held_outside(
        gpu_daemon: DaemonProcess, outside: list[subprocess.Popen[str]]) -> None:
    total = gpu0(gpu_daemon)["memory_total"]
    held = total // GIB // 2
    hold_outside(outside, held)
    wait_until(lambda: gpu0(gpu_daemon)["memory_external"] >= held * GIB, timeout=10,
               what="the outside memory to be read")
    ask = total // GIB - held + 4  # fits the GPU, not what is left of it
    job_id = gpu_daemon.submit("--gpus", "0.5", "--gpu-mem", f"{ask}G", "--", "true")
    with gpu_daemon.client() as c:
        why = wait_until(lambda: (w := c.why(job_id))["code"] == "resources" and w,
                         timeout=10, what="a reason")
    assert job(gpu_daemon, job_id)["state"] == "pending"
    assert why["message"].startswith(f"waits for 0.5 of a GPU with {ask}G free memory each;")
    left = re.search(r", with (\d+)G free memory$", why["message"])
    assert left and int(left[1]) < ask, why
    outside[0].kill()
    finished(gpu_daemon, job_id, timeout=30)


def test_a_cuda_out_of_memory_is_retried_once_with_more_memory(gpu_daemon: DaemonProcess) -> None:
    script = HOLD + "torch.empty(2**50, dtype=torch.uint8, device='cuda')\n"  # 1 PiB: OOM
    job_id = gpu_daemon.submit("--gpus", "0.25", "--gpu-mem", "8G", "--", sys.executable, "-c",
                               script, "6", "1.5")
    ended = wait_until(lambda: (j := job(gpu_daemon, job_id))["state"] in
                       ("completed", "failed") and j, timeout=90, what="the job to end")
    assert ended["state"] == "failed"
    tried = attempts(gpu_daemon, job_id)
    assert len(tried) == 2, tried
    assert "torch.OutOfMemoryError: CUDA out of memory" in attempts_log(gpu_daemon, job_id)
    with gpu_daemon.client() as c:
        [retry] = [e for e in c.events(job_id) if e["kind"] == "oom_retry"]
    assert re.match(r"GPU out of memory \(peak 6\.\dG on one GPU, 8G asked\): "
                    r"retried once with \d+(\.\d)?G per GPU", retry["message"]), retry
    first, second = tried
    assert first["gpu_mem"] == 8 * GIB < second["gpu_mem"], tried
    assert first["peak_gpu_mem"] >= 6 * GIB and second["peak_gpu_mem"] >= 6 * GIB


def test_nanogpt_trains_on_the_gpu(gpu_daemon: DaemonProcess, tmp_path: Path) -> None:
    job_id = submit(gpu_daemon, "nanogpt-shakespeare", tmp_path, out=tmp_path / "run", gpus=1,
                    device="cuda", steps=300, eval_every=100, ckpt_every=100)
    finished(gpu_daemon, job_id, timeout=300)
    log = attempts_log(gpu_daemon, job_id)
    assert "device cuda" in log, log[-2000:]
    losses = [float(v) for v in re.findall(r"^step \d+/300: loss=([\d.]+)", log, re.MULTILINE)]
    assert len(losses) >= 3 and losses[-1] < losses[0] - 0.5, losses
    assert attempts(gpu_daemon, job_id)[0]["peak_gpu_mem"] > 0
    assert sorted(p.name for p in (tmp_path / "run" / "ckpt").iterdir())


def test_lora_finetune_and_eval_on_the_gpu(gpu_daemon: DaemonProcess, tmp_path: Path) -> None:
    tiny = build_tiny_llama(tmp_path / "tiny")
    bf16 = torch.cuda.is_bf16_supported()
    run = tmp_path / "lora"
    job_id = submit(gpu_daemon, "lora-finetune", tmp_path, model=tiny, out=run, gpus=1,
                    device="cuda", steps=40, batch_size=4, lora_r=4, lora_alpha=8,
                    max_len=160, save_every=20)
    finished(gpu_daemon, job_id, timeout=300)
    log = attempts_log(gpu_daemon, job_id)
    assert f"; {'bf16' if bf16 else 'fp32'} on cuda" in log, log[-3000:]
    assert "done at step 40" in log and (run / "adapter" / "adapter_model.safetensors").is_file()

    ev = submit(gpu_daemon, "eval-heldout", tmp_path, model=tiny, adapter=run / "adapter",
                out=tmp_path / "ev", gpus=0.25, device="cuda")
    finished(gpu_daemon, ev, timeout=300)
    assert f"; {'bfloat16' if bf16 else 'float32'} on cuda" in attempts_log(gpu_daemon, ev)
    on_gpu = json.loads((tmp_path / "ev" / "results.json").read_text())
    # the same evaluation on the CPU in float32: bf16 on the GPU agrees to within 2%
    r = subprocess.run([sys.executable, "-m", "rota.templates.eval_heldout", "--model", str(tiny),
                        "--adapter", str(run / "adapter"), "--out", str(tmp_path / "cpu"),
                        "--device", "cpu"], env={**os.environ, **OFFLINE},
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    on_cpu = json.loads((tmp_path / "cpu" / "results.json").read_text())
    assert on_gpu["eval_tokens"] == on_cpu["eval_tokens"] > 0
    assert on_gpu["eval_loss"] == pytest.approx(on_cpu["eval_loss"], rel=0.02)
