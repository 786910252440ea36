"""How the client sends a dataset's files (rota.client.uploads.send_files): small files
whole, many to a tar request under the request bound; large ones in chunks; nothing the
daemon has already; a file changed since it was listed is refused by name."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from rota.client.uploads import BATCH_FILES, SMALL_FILE, LocalFile, dataset_files, send_files
from rota.errors import InvalidSpec

CHUNK = 1 << 20


Sent = tuple[list[tuple[str, int, int]], list[dict[str, bytes]], list[tuple[int, int]]]


def sent(files: list[LocalFile], received: dict[str, int] | None = None,
         chunk: int = CHUNK) -> Sent:
    """(chunks as (path, offset, size), each tar's files, progress) of sending ``files``."""
    chunks: list[tuple[str, int, int]] = []
    tars: list[dict[str, bytes]] = []
    progress: list[tuple[int, int]] = []

    def put_files(tar: bytes) -> None:
        assert len(tar) <= chunk
        with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as t:
            tars.append({m.name: t.extractfile(m).read()  # type: ignore[union-attr]
                         for m in t.getmembers()})

    send_files(lambda f, offset, data: chunks.append((f.entry["path"], offset, len(data))),
               put_files, files, chunk, lambda s, t: progress.append((s, t)), received)
    return chunks, tars, progress


def test_small_files_go_many_to_a_request_and_large_ones_in_chunks(tmp_path: Path) -> None:
    for i in range(600):  # 600 x 4 KiB: two requests (the request bound), not 600
        (tmp_path / "small" / f"{i:04}.txt").parent.mkdir(exist_ok=True)
        (tmp_path / "small" / f"{i:04}.txt").write_bytes(bytes([i % 256]) * 4096)
    (tmp_path / "big.bin").write_bytes(b"b" * (SMALL_FILE + 1))
    (tmp_path / "empty").write_bytes(b"")
    files = dataset_files(tmp_path)
    chunks, tars, progress = sent(files)
    assert chunks == [("big.bin", 0, SMALL_FILE + 1)]
    assert len(tars) == 3, [len(t) for t in tars]  # ~240 files of 4.5 KiB fit in 1 MiB
    got = {k: v for t in tars for k, v in t.items()}
    assert len(got) == 600 and got["small/0007.txt"] == bytes([7]) * 4096
    total = 600 * 4096 + SMALL_FILE + 1
    assert progress[-1] == (total, total)
    assert [s for s, _ in progress] == sorted(s for s, _ in progress)


def test_a_request_carries_at_most_batch_files_files(tmp_path: Path) -> None:
    for i in range(BATCH_FILES + 5):
        (tmp_path / f"{i:05}").write_bytes(b"x")
    _, tars, _ = sent(dataset_files(tmp_path), chunk=8 * CHUNK)
    assert [len(t) for t in tars] == [BATCH_FILES, 5]


def test_what_the_daemon_has_is_not_sent_again(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"a" * 100)
    (tmp_path / "b.txt").write_bytes(b"b" * 100)
    (tmp_path / "big.bin").write_bytes(b"c" * (3 * CHUNK))
    files = dataset_files(tmp_path)
    chunks, tars, progress = sent(files, {"a.txt": 100, "b.txt": 40, "big.bin": CHUNK + 7})
    assert tars == [{"b.txt": b"b" * 100}]  # a partial small file goes whole again
    assert chunks == [("big.bin", CHUNK + 7, CHUNK), ("big.bin", 2 * CHUNK + 7, CHUNK - 7)]
    total = 200 + 3 * CHUNK
    assert progress[0] == (100 + 40 + CHUNK + 7, total) and progress[-1] == (total, total)


def test_a_file_changed_since_it_was_listed_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"a" * 100)
    files = dataset_files(tmp_path)
    (tmp_path / "a.txt").write_bytes(b"a" * 90)
    with pytest.raises(InvalidSpec) as e:
        sent(files)
    assert f"{tmp_path / 'a.txt'}: changed while it was sent (90 bytes, 100 when listed)" \
        in str(e.value)
