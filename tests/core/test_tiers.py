"""Tier choice: the cheapest tier a job fits, the one it names, or none."""

from __future__ import annotations

import itertools

import pytest

from rota.core.spec import JobSpec
from rota.core.tiers import CRUCIBLE, Tier, charge, choose, fits, misfit, no_fit
from rota.errors import InvalidSpec

G = 1 << 30


def job(**kw: object) -> JobSpec:
    return JobSpec(command=["train"], **kw)  # type: ignore[arg-type]


def tier_of(tiers: dict[str, Tier], j: JobSpec) -> str | None:
    chosen = choose(tiers, j)
    return chosen[0] if chosen else None


def test_a_job_gets_the_cheapest_crucible_tier_it_fits():
    assert tier_of(CRUCIBLE, job(gpus=1, time_limit="1h")) == "gpu-small"
    # longer than gpu-small's 2 h: the next dearer tier that allows it
    assert tier_of(CRUCIBLE, job(gpus=1, time_limit="5h")) == "gpu-medium"
    # more GPU memory than a T4 has
    assert tier_of(CRUCIBLE, job(gpus=1, gpu_mem="20G", time_limit="1h")) == "gpu-large"
    assert tier_of(CRUCIBLE, job(gpus=0, time_limit=20)) == "cpu-small"
    assert tier_of(CRUCIBLE, job(gpus=0, memory="2G", time_limit=300)) == "cpu-large"


def test_a_job_no_tier_fits_gets_none_and_is_charged_nothing():
    # no time limit passes every limit; 30 h passes the longest (24 h)
    for j in (job(gpus=1), job(gpus=1, time_limit="30h"), job(gpus=1, gpu_mem="40G",
                                                              time_limit="1h")):
        assert choose(CRUCIBLE, j) is None
        assert charge(CRUCIBLE, j) == (None, None)
    why = no_fit(CRUCIBLE, job(gpus=1, time_limit="30h"))
    assert "gpu-large: time limit at most 24h00m, the job gives 30h00m" in why


def test_a_named_tier_is_kept_and_a_limit_it_passes_is_named():
    assert choose(CRUCIBLE, job(gpus=1, time_limit="1h", tier="gpu-large")) == (
        "gpu-large", CRUCIBLE["gpu-large"])
    with pytest.raises(InvalidSpec, match=r"does not fit tier gpu-small: time limit at most "
                                          r"2h00m, the job gives 3h00m") as e:
        choose(CRUCIBLE, job(gpus=1, time_limit="3h", tier="gpu-small"))
    assert e.value.field == "tier"
    with pytest.raises(InvalidSpec, match="no tier 'h100'; the tiers are cpu-large"):
        choose(CRUCIBLE, job(gpus=1, tier="h100"))


def test_every_limit_is_checked():
    t = Tier(price=1.0, gpus=2, gpu_type="A100", gpu_mem="40G", cpus=8, memory="64G",
             time_limit="4h")
    fits = job(gpus=2, gpu_type="a100", gpu_mem="40G", cpus=8, memory="64G", time_limit="4h")
    assert misfit(t, fits) is None
    assert misfit(t, job(gpus=4, time_limit=1)) == "at most 2 GPUs, the job asks 4"
    assert misfit(t, job(gpu_type="H100", time_limit=1)) == ("its GPUs are A100, the job "
                                                             "asks H100")
    assert "per GPU" in str(misfit(t, job(gpu_mem="80G", time_limit=1)))
    assert misfit(t, job(cpus=16, time_limit=1)) == "at most 8 CPUs, the job asks 16"
    assert "memory" in str(misfit(t, job(memory="128G", time_limit=1)))
    assert misfit(Tier(price=0), job()) is None  # a tier with no limits fits all


def test_fits_agrees_with_misfit_on_every_limit_and_its_edge():
    """choose() asks fits() (no message worded): it must say what misfit() says."""
    t = Tier(price=1.0, gpus=2, gpu_type="A100", gpu_mem="40G", cpus=8, memory="64G",
             time_limit="4h")
    tiers = [t, Tier(price=0), *CRUCIBLE.values()]
    values = {"gpus": [0, 0.5, 2, 4], "gpu_type": [None, "a100", "T4"],
              "gpu_mem": [None, "16G", "40G", "41G"], "cpus": [None, 8, 9],
              "memory": [None, "64G", "65G"], "time_limit": [None, 60, "4h", "5h"]}
    checked = 0
    for combo in itertools.product(*values.values()):
        kw = {k: v for k, v in zip(values, combo, strict=True) if v is not None}
        if kw.get("gpu_type") and not kw.get("gpus"):
            continue  # a spec refuses a GPU type with no GPU
        j = job(**kw)
        for tier in tiers:
            assert fits(tier, j) == (misfit(tier, j) is None), (tier, kw)
            checked += 1
    assert checked > 5000


def test_a_named_tier_keeps_its_name_when_rota_toml_drops_it():
    assert charge({}, job(tier="old")) == ("old", None)
    assert charge(CRUCIBLE, job(gpus=1, time_limit=60)) == ("gpu-small", 0.526)


def test_ties_go_to_the_shorter_tier_then_the_name():
    tiers = {"b": Tier(price=1.0, time_limit=100), "a": Tier(price=1.0, time_limit=100),
             "long": Tier(price=1.0, time_limit=1000), "dear": Tier(price=2.0)}
    assert tier_of(tiers, job(time_limit=50)) == "a"
    assert tier_of(tiers, job(time_limit=500)) == "long"
    assert tier_of(tiers, job()) == "dear"


def test_a_yaml_jobs_file_names_a_tier():
    from rota.jobsfile import fmt_for_path, parse_jobs_text

    text = "jobs:\n  - command: [train]\n    tier: gpu-large\n    time_limit: 1h\n"
    [entry] = parse_jobs_text(text, fmt=fmt_for_path("j.yaml"), source="j.yaml").entries
    assert charge(CRUCIBLE, entry.spec) == ("gpu-large", 1.212)
