"""`rota estimate` on this machine (issue 38): on 4 simulated GPUs of 24 GiB it says whether
the model fits here, what would when it does not, in GiB as `--gpu-mem` reads them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

GIB = 1 << 30


def cli(daemon: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """`rota ARGS` as a user runs it (80 columns, no terminal)."""
    env = {**os.environ, **daemon.env, "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-m", "rota", *args], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def submitted(daemon: Any, *options: str) -> subprocess.CompletedProcess[str]:
    """`rota submit --hold OPTIONS -- true`, cancelled again when the daemon took it."""
    r = cli(daemon, "submit", "--json", "--hold", *options, "--", "true")
    if r.returncode == 0:
        for job in json.loads(r.stdout)["jobs"]:
            daemon.client.cancel(job["id"])
    return r


def test_a_70b_model_does_not_fit_four_24g_gpus_and_is_told_what_would(daemon: Any) -> None:
    r = cli(daemon, "estimate", "llama-70b", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["gpus"] == 8 and got["fits_here"] is False
    assert submitted(daemon, *got["submit_options"]).returncode != 0  # refused here, indeed
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for alt in got["alternatives"]:
        by_kind.setdefault(alt["kind"], []).append(alt)
    # fewer bytes per weight: int8 takes the 4 GPUs there are, and the daemon takes it
    int8 = next(a for a in by_kind["sizing"] if "int8" in a["what"])
    assert int8["fits_here"] and int8["gpus"] == 4 and "--dtype int8" in int8["how"]
    assert submitted(daemon, *int8["submit_options"]).returncode == 0
    assert by_kind["pool"][0]["submit_options"][:2] == ["--pool", "NAME"]  # none declared
    force = by_kind["force"][0]["submit_options"]
    assert force[0] == "--force" and submitted(daemon, *force).returncode == 0
    text = cli(daemon, "estimate", "llama-70b").stdout
    assert "does not fit here" in text and "what would:" in text
    assert "suggested: rota submit --gpus 8" not in text
    assert "rota submit --force --gpus 8 -- ..." in text


def test_training_it_is_told_lora_and_qlora(daemon: Any) -> None:
    got = json.loads(cli(daemon, "estimate", "llama-70b", "--mode", "full", "--json").stdout)
    assert got["fits_here"] is False
    qlora = next(a for a in got["alternatives"] if "--mode qlora" in a["how"])
    assert qlora["fits_here"] and qlora["gpus"] <= 4
    assert any("--mode lora" in a["how"] for a in got["alternatives"])


def test_a_small_model_fits_in_gib_as_gpu_mem_reads_them(daemon: Any) -> None:
    r = cli(daemon, "estimate", "gpt2", "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["fits_here"] is True and got["gpus"] == 0.25 and got["alternatives"] == []
    assert submitted(daemon, *got["submit_options"]).returncode == 0
    r = cli(daemon, "estimate", "qwen2.5-7b")
    got = json.loads(cli(daemon, "estimate", "qwen2.5-7b", "--json").stdout)
    text = r.stdout
    assert " GB" not in text and "fits here" in text
    # the memory each GPU holds, the GPU's size and the --gpu-mem asked: one unit
    assert f"{got['gpu_mem'] / GIB:.1f} GiB each" in text
    assert "24.0 GiB" in text  # the simulated GPUs: 24G
    asked = re.search(r"--gpu-mem (\d+)G", text)
    assert asked and int(asked[1]) == -(-got["gpu_mem"] // GIB)
