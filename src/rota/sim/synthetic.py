"""A seeded synthetic trace shaped like Alibaba's openb pods (for the benchmark and
``rota sim --synthetic N``)."""

from __future__ import annotations

import math
import random

from rota.sim.trace import SimJob

#: (gpus_milli, weight): openb's num_gpu == 1 shares and its multi-GPU pods, roughly
SHAPES = ((1000, 0.50), (810, 0.15), (470, 0.11), (320, 0.05), (650, 0.04), (230, 0.03),
          (460, 0.03), (160, 0.02), (2000, 0.03), (4000, 0.02), (8000, 0.02))
MEDIAN_RUN_S = 600.0  # openb's median run time is ~616 s
SIGMA = 1.0  # of the log-normal run time


def synthetic(n: int, gpus: int, load: float, rng: random.Random,
              users: int = 20) -> list[SimJob]:
    """``n`` jobs arriving as a Poisson stream that offers ``load`` of ``gpus`` GPUs'
    time (1.0 = exactly full on average); priorities 0-2, ``users`` users."""
    milli, weights = zip(*SHAPES, strict=True)
    mean_run = MEDIAN_RUN_S * math.exp(SIGMA ** 2 / 2)
    mean_gpus = sum(m * w for m, w in SHAPES) / sum(weights) / 1000
    rate = load * gpus / (mean_gpus * mean_run)  # arrivals per second
    t, jobs = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        jobs.append(SimJob(id=i, submit=round(t, 3),
                           duration=round(rng.lognormvariate(math.log(MEDIAN_RUN_S), SIGMA), 1),
                           gpus_milli=rng.choices(milli, weights)[0],
                           priority=rng.randrange(3), user=f"u{rng.randrange(users)}"))
    return jobs
