"""A round's data step: ``python -m rota.pipeline.prep --round N --out DIR --cache DIR``.

The pipeline's config comes as JSON in ``ROTA_PIPELINE_CONFIG`` (rota.pipeline.steps). The
examples are prepared once per data hash (rota.pipeline.config.PipelineConfig.data_hash) in
``CACHE/<hash>/`` (``examples.jsonl``: the training part, merged and shuffled;
``heldout.jsonl``: the tail, never in a chunk; ``info.json``), built in a hidden folder and
renamed into place, so a cut-short run never leaves half a cache. A present cache is used
as it is: the sources are not read again.

The round's chunk goes to ``OUT/train.jsonl`` (and ``test.jsonl``, ``synth.jsonl`` for
InstructTextWithFixedDatasets); with an ``upload`` section it also goes to the bucket as a
JSON list (what Gradients reads), with a presigned URL that expires. The result is
``OUT/prep.json`` (mode 0600: the URLs are credentials; they are never printed). Exit 2:
the data or the config cannot make a round; 1: a source or the bucket could not be reached.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rota.errors import RotaError
from rota.pipeline import data
from rota.pipeline.config import PipelineConfig
from rota.pipeline.results import write_private
from rota.pipeline.steps import CONFIG_ENV, HELDOUT_FILE
from rota.storage import s3_transfers as s3

RETRY_WAITS_S = (2.0, 8.0)  # a passing S3 error gets two more tries


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Prepare a pipeline round's data.")
    p.add_argument("--round", type=int, required=True, help="the round's number (from 1)")
    p.add_argument("--out", required=True, help="the round's folder")
    p.add_argument("--cache", required=True, help="the pipeline's data cache")
    args = p.parse_args(argv)
    try:
        cfg = PipelineConfig.model_validate_json(os.environ[CONFIG_ENV])
    except KeyError:
        print(f"prep: {CONFIG_ENV} is not set (Rota sets it)", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"prep: {CONFIG_ENV}: not a pipeline config: {e}", file=sys.stderr)
        return 2
    if args.round < 1:
        p.error("--round starts at 1")
    try:
        result = prepare(cfg, args.round, Path(args.out), Path(args.cache))
    except data.DataUnavailable as e:
        print(f"prep: {e}", file=sys.stderr)
        return 1
    except RotaError as e:
        print(f"prep: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: result[k] for k in ("rows", "chunk_rows", "heldout_rows")}),
          flush=True)
    return 0


def prepare(cfg: PipelineConfig, number: int, out: Path, cache: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    client = _S3(cfg)
    folder = cached(cfg, cache, client)
    info = json.loads((folder / "info.json").read_text())
    train = data.read_jsonl(folder / "examples.jsonl")
    sp = data.Split(train, [], info["chunk_size"])
    index, chunk = sp.chunk_of(number)
    files: dict[str, list[dict[str, Any]]] = (
        data.fixed_sets(chunk, cfg.random_seed + number)
        if cfg.task_type == "InstructTextWithFixedDatasets" else {"train": chunk})
    paths = {}
    for kind, rows in files.items():
        paths[kind] = str((out / f"{kind}.jsonl").resolve())
        data.write_jsonl(Path(paths[kind]), rows)
    print(f"round {number}: chunk {index + 1} of {sp.chunks} ({len(chunk)} examples; "
          f"{info['heldout_rows']} held out, never trained on)", flush=True)
    result: dict[str, Any] = {
        "round": number, "data_hash": cfg.data_hash(), "rows": info["rows"],
        "train_rows": info["train_rows"], "heldout_rows": info["heldout_rows"],
        "chunk": index, "chunks": sp.chunks, "chunk_rows": len(chunk), "files": paths,
        "heldout": str((folder / HELDOUT_FILE).resolve())}
    if cfg.upload is not None:
        result.update(upload(cfg, number, files, client))
    write_private(out / "prep.json", result)
    return result


def cached(cfg: PipelineConfig, cache: Path, client: _S3) -> Path:
    """The prepared examples of this data hash, made now if not there yet."""
    folder = cache / cfg.data_hash()
    if (folder / "info.json").is_file():
        print(f"data {cfg.data_hash()}: prepared before, reused ({folder})", flush=True)
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    aside = Path(tempfile.mkdtemp(prefix=f".{cfg.data_hash()}.", dir=cache))
    try:
        merged, per = [], {}
        for ds in cfg.datasets:
            rows = data.limited(data.load(ds, s3=client.get), ds, cfg.random_seed)
            mapped = data.standardise(rows, ds, cfg.task_type)
            per[ds.name] = len(mapped)
            print(f"dataset {ds.name}: {len(mapped)} examples", flush=True)
            merged += mapped
        examples = data.shuffled(merged, cfg.random_seed)
        sp = data.split(examples, cfg)
        data.write_jsonl(aside / "examples.jsonl", sp.train)
        # the heldout harness scores instructions or text: a conversation is scored as its
        # turns' text (its perplexity), and kept as it is beside
        data.write_jsonl(aside / HELDOUT_FILE, sp.heldout if cfg.task_type != "Chat"
                         else [data.as_text(r) for r in sp.heldout])
        if cfg.task_type == "Chat":
            data.write_jsonl(aside / "heldout-conversations.jsonl", sp.heldout)
        info = {"data_hash": cfg.data_hash(), "rows": len(examples), "per_dataset": per,
                "train_rows": len(sp.train), "heldout_rows": len(sp.heldout),
                "chunks": sp.chunks, "chunk_size": sp.chunk_size}
        (aside / "info.json").write_text(json.dumps(info, indent=1))
        try:
            os.rename(aside, folder)
        except OSError:  # another prep of the same hash finished first: its copy stands
            if not (folder / "info.json").is_file():
                raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    return folder


class _S3:
    """The bucket's client, made once on first use: the endpoint and keys as the Gradients
    Scheduler read them (S3_COMPATIBLE_*), else boto3's own chain."""

    def __init__(self, cfg: PipelineConfig) -> None:
        self.cfg = cfg
        self._client: Any = None

    def get(self) -> Any:
        if self._client is None:
            up = self.cfg.upload
            self._client = s3.make_client(
                endpoint_url=(up.endpoint_url if up is not None else None)
                or os.environ.get("S3_COMPATIBLE_ENDPOINT") or None,
                region=(up.region if up else None) or os.environ.get("AWS_DEFAULT_REGION")
                or "us-east-1",
                access_key=os.environ.get("S3_COMPATIBLE_ACCESS_KEY") or None,
                secret_key=os.environ.get("S3_COMPATIBLE_SECRET_KEY"))
        return self._client


def upload(cfg: PipelineConfig, number: int, files: dict[str, list[dict[str, Any]]],
           client: _S3) -> dict[str, Any]:
    """Each file as a JSON list in the bucket, and a presigned URL for it."""
    up = cfg.upload
    assert up is not None
    bucket = up.bucket or os.environ.get("S3_BUCKET_NAME")
    if not bucket:
        raise data.DataError("upload: no bucket (set upload.bucket, or store the secret "
                             "S3_BUCKET_NAME)")
    tag = secrets.token_hex(8)
    names = {"train": "dataset"} if set(files) == {"train"} else \
        {"train": "train_data", "test": "test_data", "synth": "synth_data"}
    urls, objects = {}, []
    for kind, rows in files.items():
        key = "/".join(p for p in (up.prefix.strip("/"), cfg.name, f"round-{number}",
                                   f"{tag}_{names[kind]}.json") if p)
        body = json.dumps(rows, ensure_ascii=False, default=str).encode()
        uri = f"s3://{bucket}/{key}"
        _with_retries(f"upload of {uri}",
                      lambda uri=uri, body=body: s3.upload_bytes(
                          body, uri, client=client.get(), content_type="application/json"))
        url = _with_retries(f"a URL for {uri}",
                            lambda uri=uri: s3.presigned_get(uri, up.expires,
                                                             client=client.get()))
        urls["dataset" if names[kind] == "dataset" else kind] = url
        objects.append(f"s3://{bucket}/{key}")
        print(f"uploaded s3://{bucket}/{key} ({len(rows)} examples, {len(body)} bytes)",
              flush=True)
    return {"urls": urls, "objects": objects, "expires_at": time.time() + up.expires}


def _with_retries(what: str, call: Any) -> Any:
    for wait in (*RETRY_WAITS_S, None):
        try:
            return call()
        except Exception as e:
            err = data.s3_error(what, e)
            if not isinstance(err, data.DataUnavailable) or wait is None:
                raise err from None
            print(f"{err}; trying again in {wait:g} s", file=sys.stderr, flush=True)
            time.sleep(wait)
    raise AssertionError("unreachable")


if __name__ == "__main__":
    sys.exit(main())
