"""A pipeline's data: load each dataset, map its fields, merge, shuffle with the seed, hold
out the final tail, and cut the rest in balanced chunks that cycle by round.

Pure where it can be: the mapping, the shuffle and the cutting take records (dicts) and
give records; only :func:`load` reads (local files, an S3 prefix, a Hugging Face name).
The shuffle is ``random.Random(seed)`` over positions, so which example lands where depends
on the seed and the count only, never on the examples' content.
"""

from __future__ import annotations

import io
import json
import math
import os
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from rota.errors import NotFound, RotaError, StorageError
from rota.pipeline.config import Dataset, PipelineConfig

FORMATS = (".jsonl", ".json", ".parquet", ".csv")
INSTRUCT = ("instruction", "input", "output")
CHAT = "conversations"


class DataError(RotaError):
    """The data cannot make a round (a missing dataset or column, an empty result)."""


class DataUnavailable(RotaError):
    """A source could not be reached now (the network, a server's 5xx): may pass."""


@dataclass(frozen=True)
class Split:
    """The merged, shuffled examples cut into the held-out tail and the chunks."""

    train: list[dict[str, Any]]
    heldout: list[dict[str, Any]]
    chunk_size: int

    @property
    def chunks(self) -> int:
        return max(1, math.ceil(len(self.train) / self.chunk_size)) if self.train else 0

    def chunk_of(self, round_number: int) -> tuple[int, list[dict[str, Any]]]:
        """Round N's chunk (0-based index, examples): they cycle, N=1 takes the first."""
        i = (round_number - 1) % self.chunks
        return i, self.train[i * self.chunk_size:(i + 1) * self.chunk_size]


# --- reading -----------------------------------------------------------------------------
S3Client = Any  # boto3's S3 client (typed loosely: boto3 has no types here)


def load(ds: Dataset, *, s3: Callable[[], S3Client]) -> list[dict[str, Any]]:
    """Every record of one dataset, in its order. ``s3`` makes the S3 client when needed."""
    name = ds.name
    if name.startswith("s3://"):
        return list(_from_s3(name, s3()))
    path = Path(os.path.expanduser(name))
    if path.exists():
        files = _files(path)
        if not files:
            raise DataError(f"dataset {name}: no {', '.join(FORMATS)} file in the folder")
        return [r for f in files for r in _parse(f.name, f.read_bytes(), name)]
    if name.startswith(("/", "./", "../", "~")):
        raise DataError(f"dataset {name}: no such file or folder")
    return _from_hub(name)


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in FORMATS
                  and not any(part.startswith(".") for part in p.relative_to(path).parts))


def _parse(file_name: str, body: bytes, dataset: str) -> list[dict[str, Any]]:
    """The records of one file, by its extension."""
    suffix = Path(file_name).suffix
    try:
        if suffix == ".jsonl" or (suffix == ".json" and not body.lstrip().startswith(b"[")):
            rows = [json.loads(line) for line in body.decode("utf-8").splitlines()
                    if line.strip()]
        elif suffix == ".json":
            rows = json.loads(body.decode("utf-8"))
        elif suffix == ".parquet":
            import pyarrow.parquet as pq

            rows = pq.read_table(io.BytesIO(body)).to_pylist()
        elif suffix == ".csv":
            import pyarrow.csv as pcsv

            rows = pcsv.read_csv(io.BytesIO(body)).to_pylist()
        else:
            raise DataError(f"dataset {dataset}: {file_name}: not one of {', '.join(FORMATS)}")
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(f"dataset {dataset}: {file_name} cannot be read: {e}") from None
    except Exception as e:  # pyarrow's own errors
        if type(e).__module__.startswith("pyarrow"):
            raise DataError(f"dataset {dataset}: {file_name} cannot be read: {e}") from None
        raise
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise DataError(f"dataset {dataset}: {file_name} is not a list of records")
    return rows


def _from_s3(uri: str, client: S3Client) -> Iterator[dict[str, Any]]:
    from rota.storage.s3_transfers import list_objects, read_object

    bucket = uri.removeprefix("s3://").partition("/")[0]
    what = f"dataset {uri}"
    try:
        keys = sorted(k for k, _ in list_objects(uri, client=client, what=what)
                      if Path(k).suffix in FORMATS)
    except (StorageError, NotFound) as e:
        raise _data_error(e) from None
    if not keys:
        raise DataError(f"dataset {uri}: no {', '.join(FORMATS)} object under the prefix")
    for key in keys:
        try:
            body = read_object(f"s3://{bucket}/{key}", client=client, what=what)
        except (StorageError, NotFound) as e:
            raise _data_error(e) from None
        yield from _parse(key, body, uri)


def s3_error(what: str, e: Exception) -> RotaError:
    """boto3's error as Rota's, by the storage layer's rules (rota.storage.s3_edge):
    DataUnavailable when it may pass (the network, 5xx, throttling), DataError otherwise."""
    from rota.storage.s3_edge import translate_error

    return _data_error(translate_error(e, what))


def _data_error(err: RotaError) -> RotaError:
    passing = isinstance(err, StorageError) and err.passing
    return (DataUnavailable if passing else DataError)(str(err))


def _from_hub(name: str) -> list[dict[str, Any]]:
    try:
        import datasets
    except ImportError:
        raise DataError(f"dataset {name}: a Hugging Face dataset name, and the datasets "
                        "library is not installed (pip install 'rota[pipeline]')") from None
    try:
        got = datasets.load_dataset(name)
    except Exception as e:
        raise DataError(f"dataset {name}: not a local file or folder, and the Hugging Face "
                        f"hub could not give it: {type(e).__name__}: {e}") from None
    if isinstance(got, datasets.DatasetDict):
        if "train" not in got:
            raise DataError(f"dataset {name}: it has no train split (it has "
                            f"{', '.join(got)})")
        got = got["train"]
    return list(got.to_list())


# --- mapping -----------------------------------------------------------------------------
def standardise(rows: list[dict[str, Any]], ds: Dataset, task_type: str
                ) -> list[dict[str, Any]]:
    """The records with Gradients' standard columns: instruction/input/output, or Chat's
    ``conversations`` of {role, content} with the user and assistant names mapped."""
    if not rows:
        return []
    columns = sorted({k for r in rows[:1000] for k in r})
    if task_type == "Chat":
        _need(ds, [ds.chat_column], columns)
        roles = {ds.chat_user_reference: "user", ds.chat_assistant_reference: "assistant"}
        return [{CHAT: [_turn(t, ds, roles) for t in (r.get(ds.chat_column) or [])]}
                for r in rows]
    assert ds.field_instruction is not None and ds.field_output is not None
    _need(ds, [ds.field_instruction, ds.field_output], columns)
    return [{"instruction": _text(r.get(ds.field_instruction)),
             "input": _text(r.get(ds.field_input)) if ds.field_input else "",
             "output": _text(r.get(ds.field_output))} for r in rows]


def _need(ds: Dataset, wanted: list[str], columns: list[str]) -> None:
    missing = [c for c in wanted if c not in columns]
    if missing:
        raise DataError(f"dataset {ds.name}: no column {', '.join(missing)} (it has "
                        f"{', '.join(columns)})")


def _turn(t: Any, ds: Dataset, roles: dict[str, str]) -> dict[str, str]:
    if not isinstance(t, dict):
        raise DataError(f"dataset {ds.name}: a turn of {ds.chat_column} is not a mapping")
    role = _text(t.get(ds.chat_role_field))
    return {"role": roles.get(role, role), "content": _text(t.get(ds.chat_content_field))}


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, datetime | date):
        return v.isoformat()
    return v if isinstance(v, str) else json.dumps(v, default=str)


# --- merging and cutting -----------------------------------------------------------------
def shuffled(rows: list[Any], seed: int) -> list[Any]:
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    return [rows[i] for i in order]


def limited(rows: list[dict[str, Any]], ds: Dataset, seed: int) -> list[dict[str, Any]]:
    """At most ``max_rows``: shuffled with the seed first, as Gradients does."""
    if ds.max_rows is None or len(rows) <= ds.max_rows:
        return rows
    return shuffled(rows, seed)[:ds.max_rows]


def split(examples: list[dict[str, Any]], cfg: PipelineConfig) -> Split:
    """The held-out tail and the balanced chunks (none over ``samples_per_training``)."""
    train_size = int(len(examples) * (1 - cfg.final_test_size))
    train, heldout = examples[:train_size], examples[train_size:]
    if not train or not heldout:
        raise DataError(f"{len(examples)} examples leave {len(train)} to train on and "
                        f"{len(heldout)} held out (final_test_size {cfg.final_test_size}): "
                        "more data is needed")
    chunks = math.ceil(train_size / cfg.samples_per_training)
    return Split(train, heldout, math.ceil(train_size / chunks))


def fixed_sets(chunk: list[dict[str, Any]], seed: int) -> dict[str, list[dict[str, Any]]]:
    """InstructTextWithFixedDatasets' three files from a chunk: 80% train, 10% test, 10%
    synthetic (each at least one example where the chunk has three)."""
    rows = shuffled(chunk, seed)
    n = len(rows)
    test = max(1, n // 10) if n >= 3 else 0
    synth = max(1, n // 10) if n >= 3 else 0
    return {"train": rows[:n - test - synth], "test": rows[n - test - synth:n - synth],
            "synth": rows[n - synth:]}


def as_text(conversation: dict[str, Any]) -> dict[str, str]:
    """A conversation as the heldout harness's text record: ``role: content`` per turn."""
    return {"text": "\n".join(f"{t['role']}: {t['content']}"
                               for t in conversation.get(CHAT, []))}


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False, default=str) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
