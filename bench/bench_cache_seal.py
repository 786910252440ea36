"""What checking a cached dataset version before a job reads it costs (rota.storage.cache_seal:
one lstat per file, no content read), beside reading the same files' bytes.

    python bench/bench_cache_seal.py [--small 10000] [--gib 1] [--big-files 4] [--rounds 5]

Two versions placed in a DatasetCache in a temporary folder (from a local store): one of
``--small`` files of 4 KiB in folders of 100, one of ``--gib`` GiB in ``--big-files`` files.
Per version: the median of ``--rounds`` checks (DatasetCache.intact, as the daemon runs it
at a launch), the seal alone, and one read of every byte (``cat``-like, page cache warm).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from rota.storage import LocalStore, build_manifest
from rota.storage.cache import DatasetCache
from rota.storage.cache_seal import seal_of


def _make(folder: Path, files: int, size: int, per_folder: int = 100) -> None:
    block = os.urandom(min(size, 1 << 20))
    for i in range(files):
        path = folder / f"d{i // per_folder:04d}" / f"f{i:06d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            left = size
            while left > 0:
                out.write(block[:left])
                left -= len(block)


def _median_ms(fn, rounds: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def _read_all(top: Path) -> None:
    for parent, _, names in os.walk(top):
        for name in names:
            with open(os.path.join(parent, name), "rb") as f:
                while f.read(1 << 20):
                    pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--big-files", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rota-seal-") as tmp:
        root = Path(tmp)
        store = LocalStore(root / "store")
        cache = DatasetCache(root / "cache", None)
        cases = {f"{a.small} files of 4 KiB": (a.small, 4096),
                 f"{a.gib:g} GiB in {a.big_files} files":
                     (a.big_files, int(a.gib * (1 << 30)) // a.big_files)}
        for what, (files, size) in cases.items():
            staged = root / f"staged-{files}"
            _make(staged, files, size)
            manifest = build_manifest(staged, now=time.time())
            key = f"ds/{files}"
            store.publish(key, staged, manifest, move=True)
            t = time.perf_counter()
            path = cache.fetch(store, key, manifest.digest(), now=time.time())
            placed = time.perf_counter() - t
            digest = manifest.digest()
            check = _median_ms(lambda d=digest: cache.intact(d), a.rounds)
            seal = _median_ms(lambda p=path: seal_of(p), a.rounds)
            read = _median_ms(lambda p=path: _read_all(p), 1)
            print(f"{what}: check {check:.1f} ms (seal alone {seal:.1f} ms), reading every "
                  f"byte {read:.0f} ms; placing it (fetch) {placed:.2f} s", flush=True)


if __name__ == "__main__":
    main()
