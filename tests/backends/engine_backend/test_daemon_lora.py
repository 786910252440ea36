"""The seed trainer on a cluster pool: the lora-finetune template as a 2-node job on the
private Slurm (one gloo rank on each node, the CPU), preempted through Slurm's signal on
every rank, handed over again and resumed from its checkpoint."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.baselines.slurm import PrivateSlurm

from hf_testing import (
    OFFLINE,
    TRAIN,
    build_tiny_llama,
    finished,
    job,
    lora_sets,
    preempt_after_first_checkpoint,
    stopped_and_resumed,
    submit,
    write_jsonl,
)
from rota_testing import DaemonProcess, kill_job_processes

try:
    import peft  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
except ImportError:
    if os.environ.get("ROTA_REQUIRE_TORCH"):
        raise
    pytest.skip("needs torch, transformers and peft (pip install 'rota[ml]')",
                allow_module_level=True)


@pytest.fixture(scope="module")
def daemon(slurm: PrivateSlurm, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[DaemonProcess]:
    home = tmp_path_factory.mktemp("lora-pool")
    (home / "rota.toml").write_text(
        f'[pools.hpc]\nengine = "slurm"\nshared_workspaces = true\n'
        f'slurm_conf = "{slurm.env["SLURM_CONF"]}"\n')
    # the private nodes' names do not resolve here: rank 0's address for the rendezvous
    d = DaemonProcess(home, extra_env={**OFFLINE, "MASTER_ADDR": "127.0.0.1"}).start()
    try:
        yield d
    finally:
        d.stop()
        kill_job_processes(home)


def test_lora_finetune_on_two_nodes_is_preempted_on_every_rank_and_resumes(
        daemon: DaemonProcess, tmp_path: Path) -> None:
    tiny = build_tiny_llama(tmp_path / "tiny")
    run = tmp_path / "run"
    data = write_jsonl(tmp_path / "train.jsonl", TRAIN)
    job_id = submit(daemon, "lora-finetune", tmp_path, "--pool", "hpc",
                    **lora_sets(tiny, data, run, steps=200, nodes=2, batch_size=2))
    spec = job(daemon, job_id)["spec"]
    assert (spec["nodes"], spec["pool"]) == (2, "hpc")
    assert "--nnodes" in spec["command"] and "--standalone" not in spec["command"]
    preempt_after_first_checkpoint(daemon, job_id, run)
    done = finished(daemon, job_id, timeout=300)
    assert [a["backend"] for a in done["attempts_detail"]] == ["slurm:hpc", "slurm:hpc"]
    assert done["attempts_detail"][0]["outcome"] == "preempted"
    stopped_and_resumed(daemon, job_id, ranks=2)  # both ranks stopped at one step
    assert (run / "adapter" / "adapter_model.safetensors").is_file()
