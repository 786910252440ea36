"""Pools as rota.toml declares them: local always there, engines by name, clear errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rota.errors import InvalidSpec
from rota.pools import KubernetesPool, LocalPool, Pools, SlurmPool


def test_local_is_always_there_and_the_default() -> None:
    assert Pools().get(None) == ("local", LocalPool())


def test_clusters_are_read_by_engine_and_named_in_errors() -> None:
    pools = Pools.model_validate({"pools": {
        "hpc": {"engine": "slurm", "partition": "gpu", "sbatch_args": ["--exclusive"]},
        "k8s": {"engine": "kubernetes", "namespace": "ml", "kueue_queue": "team-a"}},
        "default": "hpc"})
    name, pool = pools.get(None)
    assert name == "hpc" and isinstance(pool, SlurmPool) and pool.partition == "gpu"
    assert isinstance(pools.get("k8s")[1], KubernetesPool)
    with pytest.raises(InvalidSpec, match=r"no pool 'ray'; the pools are: hpc, k8s, local"):
        pools.get("ray")


@pytest.mark.parametrize(("raw", "words"), [
    ({"pools": {"Big_Cluster": {"engine": "slurm"}}}, "pool name 'Big_Cluster'"),
    ({"pools": {"local": {"engine": "slurm"}}}, "the pool 'local' is this machine"),
    ({"pools": {"hpc": {"engine": "lsf"}}},
     "'lsf' found using 'engine'.*'local', 'slurm', 'ray', 'kubernetes'"),
    ({"pools": {"hpc": {"engine": "slurm", "partiton": "gpu"}}}, "partiton"),
    ({"default": "hpc"}, "default pool 'hpc' is not declared"),
])
def test_bad_pools_are_refused_with_what_is_wrong(raw: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        Pools.model_validate(raw)
