"""Pools as rota.toml declares them: local always there, engines by name, clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from rota.config import load_settings
from rota.errors import InvalidSpec
from rota.pools import KubernetesPool, LocalPool, Pools, SlurmPool, no_workspace


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


def _settings_from_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Pools:
    (tmp_path / "rota.toml").write_text(text)
    monkeypatch.setenv("ROTA_HOME", str(tmp_path))
    return load_settings().pool_set


def test_local_container_defaults_are_read_from_rota_toml(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # [pools.local] needs no engine line, as docs/configuration.md writes it
    pools = _settings_from_toml(tmp_path, monkeypatch, '[pools.local]\n'
                                'container_shm_size = "512M"\ncontainer_cpus = 2.5\n'
                                'container_memory = "16G"\n')
    local = pools.get("local")[1]
    assert isinstance(local, LocalPool)
    assert (local.container_shm_size, local.container_cpus, local.container_memory) == \
        (512 << 20, 2.5, 16 << 30)
    # an integer is bytes, as the settings sent to API workers carry it (JSON)
    assert LocalPool(container_shm_size=64 << 20).container_shm_size == 64 << 20


def test_local_container_defaults_without_settings() -> None:
    from rota.backends.container.request import DEFAULT_SHM_SIZE

    local = LocalPool()
    assert (local.container_shm_size, local.container_cpus, local.container_memory) == \
        (DEFAULT_SHM_SIZE, None, None) == (8 << 30, None, None)


@pytest.mark.parametrize(("line", "words"), [
    ('container_shm_size = "8X"',
     "setting pools.local.container_shm_size: cannot read '8X' as a memory size"),
    ("container_shm_size = 8",
     'setting pools.local.container_shm_size: 8 bytes is less than 1M; write the unit, '
     'e.g. "8G"'),
    ('container_memory = "1M"',
     "setting pools.local.container_memory: 1048576 bytes is less than 6M"),
    ("container_cpus = 0", "setting pools.local.container_cpus: Input should be greater "
                           "than 0"),
    ('container_shm = "8G"', "setting pools.local.container_shm: Extra inputs are not "
                             "permitted"),
])
def test_a_bad_container_default_names_the_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, words: str) -> None:
    with pytest.raises(InvalidSpec, match=re.escape(words)) as e:
        _settings_from_toml(tmp_path, monkeypatch, f"[pools.local]\n{line}\n")
    assert e.value.field is not None and e.value.field.startswith("pools.local.container_")


def test_how_each_pool_gives_its_jobs_a_workspace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's folder; the same path on nodes that share it; a claim's folder; a
    copy synced with the workspaces' bucket where the pool gives none; else none, and
    submit's reason names the setting that would give one."""
    (tmp_path / "rota.toml").write_text(
        '[pools.hpc]\nengine = "slurm"\n[pools.nfs]\nengine = "slurm"\n'
        'shared_workspaces = true\n[pools.rc]\nengine = "ray"\n'
        '[pools.k8s]\nengine = "kubernetes"\n'
        '[pools.pvc]\nengine = "kubernetes"\nworkspace_claim = "team-ws"\n')
    monkeypatch.setenv("ROTA_HOME", str(tmp_path))
    s = load_settings()
    assert {p: s.workspace_kind(p) for p in ("local", "hpc", "nfs", "rc", "k8s", "pvc")} == {
        "local": "here", "hpc": None, "nfs": "shared", "rc": None, "k8s": None,
        "pvc": "claim"}
    (tmp_path / "rota.toml").write_text(
        (tmp_path / "rota.toml").read_text() + '[storage]\nworkspace_url = "s3://ws/team"\n')
    s = load_settings()
    assert {p: s.workspace_kind(p) for p in ("local", "hpc", "nfs", "rc", "k8s", "pvc")} == {
        "local": "here", "hpc": "synced", "nfs": "shared", "rc": "synced", "k8s": "synced",
        "pvc": "claim"}
    why = no_workspace("k8s", s.pool_set.get("k8s")[1])
    assert why.startswith('pool k8s gives its jobs no workspace: it needs workspace_claim = '
                          '"PVC" (a ReadWriteMany claim holding the workspaces) in [pools.k8s]')
    assert "shared_workspaces = true" in no_workspace("rc", s.pool_set.get("rc")[1])
