"""On a cluster node: a job that writes into its dataset's cached copy does not change what
the next job of that node reads; the next one's fetch finds the change, fetches the
version again and says so (rota.storage.job_fetch over rota.storage.cache)."""

from __future__ import annotations

import sys
from pathlib import Path

from test_job_fetch import plan, publish, run

from rota.storage import LocalStore
from rota.storage import job_fetch as jf

READ = "import os; print(open(os.environ['ROTA_DATASET_X'] + '/a.txt').read())"
# what a root job (or the owner of the files) can do to a 0444 file in a 0555 folder
WRITE = ("import os; p = os.environ['ROTA_DATASET_X'] + '/a.txt'; os.chmod(p, 0o644); "
         "open(p, 'w').write('changed by a job')")


def test_a_job_that_changes_its_cached_dataset_changes_nothing_for_the_next(
        tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    m = publish(store, tmp_path, "ds/alice/x", {"a.txt": b"the original"})
    env = {jf.FETCH_ENV: plan(f"file://{store.root}",
                              ("ROTA_DATASET_X", "ds/alice/x", m.digest(), "alice/x:v1")),
           jf.CACHE_ENV: str(tmp_path / "cache")}
    cached = tmp_path / "cache" / m.digest()
    writer = run(["--", sys.executable, "-c", WRITE], env)
    assert writer.returncode == 0, writer.stderr
    assert (cached / "a.txt").read_text() == "changed by a job"
    reader = run(["--", sys.executable, "-c", READ], env)
    assert reader.returncode == 0, reader.stderr
    assert reader.stdout == "the original\n"
    assert reader.stderr.splitlines()[0] == (
        "rota: dataset alice/x:v1 was changed in this node's cache since it was verified; "
        "fetched again"), reader.stderr
    again = run(["--", sys.executable, "-c", READ], env)  # intact now: not fetched again
    assert again.stdout == "the original\n" and "changed" not in again.stderr
