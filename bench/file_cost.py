"""What creating a file costs in a folder now: printed beside throughput figures.

On an ext4 without a journal (the development VM's disk) creating a file scans past every
inode deleted in the last 1-5 minutes (the kernel's ``recently_deleted``). Right after a
run removed its 2,000 log files, the next run's creations cost up to 0.9 ms of CPU each
instead of ~17 us, and a system that writes a log per job (Rota, task-spooler keeping its
output) ran at half its speed. The benches keep every run's files until all rounds are
done, and print this probe so a slow spell of the disk can be told from a slow Rota.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path


def file_create_us(folder: Path, files: int = 200) -> float:
    """CPU per ``open(O_CREAT)`` of a new file in ``folder`` now (the probe's files stay:
    removing them would make the next creations dearer)."""
    probe = Path(tempfile.mkdtemp(prefix="create-probe-", dir=folder))
    started = time.process_time()
    for i in range(files):
        os.close(os.open(probe / f"{i}.log", os.O_CREAT | os.O_WRONLY, 0o600))
    return (time.process_time() - started) / files * 1e6


#: CPU per file creation on this VM's disk when nothing was deleted in the last minutes
#: (15-20 us; tmpfs: 7-8 us). Far above it, figures of a system that writes a file per job
#: measure the disk's allocator as much as the system.
SLOW_CREATE_US = 100.0


def warn_if_slow(us: float) -> None:
    if us > SLOW_CREATE_US:
        print(f"warning: creating a file costs {us:.0f} us of CPU here now (15-20 us when "
              "nothing was deleted lately): on an ext4 without a journal, files deleted in "
              "the last 1-5 minutes (an earlier bench's) slow every creation, and Rota writes "
              "a log per job. Run again later, or with TMPDIR on a tmpfs.", flush=True)
