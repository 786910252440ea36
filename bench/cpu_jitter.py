"""How steady this machine's CPU is: the same small piece of Python work, timed over and
over for 20 s. On a shared VM the spread of these times bounds how steady any latency
figure measured on it can be.

    python bench/cpu_jitter.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import sys
import time


def _work() -> int:
    total = 0
    for i in range(20_000):
        total += i
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--seconds", type=float, default=20.0)
    args = p.parse_args(argv)
    for _ in range(200):  # warm up
        _work()
    times: list[float] = []
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        _work()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()

    def q(pct: float) -> float:
        return times[int(pct / 100 * (len(times) - 1))]

    print(f"{len(times)} runs of the same work: p50 {q(50):.3f} ms, p90 {q(90):.3f} ms, "
          f"p99 {q(99):.3f} ms, max {times[-1]:.1f} ms; p90/p50 {q(90) / q(50):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
