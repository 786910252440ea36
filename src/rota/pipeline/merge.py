"""A round's merge step: ``python -m rota.pipeline.merge --base MODEL --adapter ADAPTER
--out DIR --round-dir ROUND [--tokenizer ID] [--publish DEST [--public]]``.

The LoRA adapter (a folder, or a Hugging Face repo as Gradients' miners give) is merged
into its base (peft ``merge_and_unload``) and saved with the tokenizer (the base's, or
``--tokenizer``'s, the embeddings then resized to its vocabulary) in ``DIR``: written aside
and renamed, so a merge cut short never looks like a model; ``DIR/rota-merge.json`` names
what it was made from, so a second run of the same merge (the job's retry) reuses it.

``--publish`` keeps it elsewhere too: a folder (copied aside, then renamed), ``s3://B/P``
(every file, then ``rota-manifest.json`` of names, sizes and sha256 last: a reader knows
the upload is whole), ``mlflow`` (artifacts of the run Rota opened for the job), or
``hf:OWNER/NAME`` (a **private** repository unless ``--public``; ``{hf_username}`` is
HF_USERNAME). A failed merge or upload fails the job (exit 2; 1 for a passing upload
error): it never hands on the adapter as if it were a merged model. The result is
``ROUND/merge.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from rota.errors import RotaError, StorageError
from rota.pipeline.results import write_private
from rota.storage.s3_edge import translate_error
from rota.storage.s3_transfers import upload_prefix

MERGE_RECORD = "rota-merge.json"
MANIFEST = "rota-manifest.json"
RETRY_WAITS_S = (2.0, 8.0)


class MergeFailed(RotaError):
    pass


class PublishUnavailable(RotaError):
    """An upload that failed in a way that may pass (the network, a 5xx)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Merge a LoRA adapter into its base model.")
    p.add_argument("--base", required=True)
    p.add_argument("--adapter", required=True)
    p.add_argument("--out", required=True, help="the merged model's folder")
    p.add_argument("--round-dir", required=True, help="where merge.json goes")
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--dtype", default="auto",
                   choices=("auto", "float32", "float16", "bfloat16"))
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--publish", default=None)
    p.add_argument("--public", action="store_true")
    p.add_argument("--mlflow-experiment", default="rota-pipelines")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out).resolve()
    try:
        if _reusable(out, args):
            print(f"merge: {out} already holds this merge; reused", flush=True)
        else:
            merge(args, out)
        published = publish(args, out) if args.publish else None
    except PublishUnavailable as e:
        print(f"merge: {e}", file=sys.stderr)
        return 1
    except (RotaError, OSError) as e:
        print(f"merge: {e}", file=sys.stderr)
        return 2
    files = sorted(p for p in out.rglob("*") if p.is_file())
    result = {"model": str(out), "published": published, "base": args.base,
              "adapter": args.adapter, "tokenizer": args.tokenizer, "files": len(files),
              "bytes": sum(p.stat().st_size for p in files),
              "sha256": hashlib.sha256(json.dumps(_manifest(out)).encode()).hexdigest()}
    write_private(Path(args.round_dir) / "merge.json", result)
    print(json.dumps({"merged_bytes": result["bytes"]}), flush=True)
    return 0


def _identity(args: argparse.Namespace) -> dict[str, Any]:
    adapter = Path(args.adapter)
    weights = sorted(adapter.glob("adapter_model.*")) if adapter.is_dir() else []
    return {"base": args.base, "adapter": args.adapter, "tokenizer": args.tokenizer,
            "dtype": args.dtype,
            "adapter_sha256": [_sha256(p) for p in weights]}


def _reusable(out: Path, args: argparse.Namespace) -> bool:
    try:
        return bool(json.loads((out / MERGE_RECORD).read_text()) == _identity(args))
    except (OSError, ValueError):
        return False


def merge(args: argparse.Namespace, out: Path) -> None:
    adapter = Path(args.adapter)
    if adapter.exists() and not (adapter / "adapter_config.json").is_file():
        raise MergeFailed(f"--adapter {args.adapter}: not a peft adapter (no "
                          "adapter_config.json)")
    if not adapter.exists() and args.adapter.startswith(("/", "./", "../")):
        raise MergeFailed(f"--adapter {args.adapter}: no such folder")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = {"auto": "auto", "float32": torch.float32, "float16": torch.float16,
             "bfloat16": torch.bfloat16}[args.dtype]
    device = "cuda" if args.device == "cuda" or (args.device == "auto" and
                                                 torch.cuda.is_available()) else "cpu"
    try:
        base = AutoModelForCausalLM.from_pretrained(args.base, torch_dtype=dtype)
    except Exception as e:
        raise MergeFailed(f"--base {args.base} does not load: {type(e).__name__}: {e}") \
            from None
    base = base.to(device)  # type: ignore[arg-type]
    try:
        from peft import PeftModel

        merged = PeftModel.from_pretrained(base, args.adapter).merge_and_unload()
    except Exception as e:
        raise MergeFailed(f"--adapter {args.adapter} does not apply to {args.base}: "
                          f"{type(e).__name__}: {e}") from None
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.base)
    if args.tokenizer:
        before = merged.get_input_embeddings().weight.shape[0]
        merged.resize_token_embeddings(len(tokenizer))
        print(f"merge: tokenizer {args.tokenizer}: embeddings {before} -> {len(tokenizer)}",
              flush=True)
    aside = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(aside, ignore_errors=True)
    merged.save_pretrained(aside, safe_serialization=True)
    tokenizer.save_pretrained(aside)
    write_private(aside / MERGE_RECORD, _identity(args))
    if out.exists():
        shutil.rmtree(out)
    os.rename(aside, out)
    print(f"merge: {args.adapter} merged into {args.base}: {out}", flush=True)


# --- publishing ----------------------------------------------------------------------------
def publish(args: argparse.Namespace, out: Path) -> str:
    dest = str(args.publish)
    if dest.startswith("s3://"):
        return _to_s3(out, dest)
    if dest == "mlflow":
        return _to_mlflow(out, args.mlflow_experiment)
    if dest.startswith("hf:"):
        return _to_hub(out, dest, private=not args.public)
    return _to_folder(out, Path(dest))


def _to_folder(out: Path, dest: Path) -> str:
    dest = dest.resolve()
    if (dest / MERGE_RECORD).is_file() and \
            (dest / MERGE_RECORD).read_bytes() == (out / MERGE_RECORD).read_bytes():
        return str(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    aside = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(aside, ignore_errors=True)
    shutil.copytree(out, aside)
    if dest.exists():
        shutil.rmtree(dest)
    os.rename(aside, dest)
    print(f"merge: published to {dest}", flush=True)
    return str(dest)


def _manifest(out: Path) -> list[dict[str, Any]]:
    return [{"name": p.relative_to(out).as_posix(), "size": p.stat().st_size,
             "sha256": _sha256(p)} for p in sorted(out.rglob("*")) if p.is_file()]


def _to_s3(out: Path, dest: str) -> str:
    """Every file (each retried alone), then the manifest (storage.s3_transfers.upload_prefix)."""
    manifest = _manifest(out)
    body = json.dumps({"files": manifest}, indent=1).encode()
    upload_prefix(out, dest, last={MANIFEST: body}, attempt=_retrying)
    print(f"merge: published to {dest} ({len(manifest)} files, manifest last)", flush=True)
    return dest


def _to_mlflow(out: Path, experiment: str) -> str:
    import mlflow

    run_id = os.environ.get("MLFLOW_RUN_ID")
    if not run_id:
        mlflow.set_experiment(experiment)
    with mlflow.start_run(run_id=run_id) as run:
        mlflow.log_artifacts(str(out), artifact_path="model")
        uri = f"runs:/{run.info.run_id}/model"
    print(f"merge: logged to MLflow as {uri}", flush=True)
    return uri


def _to_hub(out: Path, dest: str, *, private: bool) -> str:
    from huggingface_hub import HfApi

    repo = dest.removeprefix("hf:")
    if "{hf_username}" in repo:
        user = os.environ.get("HF_USERNAME")
        if not user:
            raise MergeFailed(f"--publish {dest}: HF_USERNAME is not set (store it: rota "
                              "secret set HF_USERNAME)")
        repo = repo.replace("{hf_username}", user)
    api = HfApi(token=os.environ.get("HF_TOKEN"))
    try:
        api.create_repo(repo, private=private, exist_ok=True, repo_type="model")
        api.upload_folder(repo_id=repo, folder_path=str(out), repo_type="model")
    except Exception as e:
        raise MergeFailed(f"--publish {dest}: the Hub refused: {type(e).__name__}: {e}") \
            from None
    print(f"merge: published to the Hugging Face Hub as {repo} "
          f"({'private' if private else 'public'})", flush=True)
    return repo


def _retrying(what: str, call: Any) -> Any:
    for wait in (*RETRY_WAITS_S, None):
        try:
            return call()
        except Exception as e:  # by the storage layer's rules (rota.storage.s3_edge)
            err = translate_error(e, what)
            if not (isinstance(err, StorageError) and err.passing):
                raise MergeFailed(str(err)) from None
            if wait is None:
                raise PublishUnavailable(str(err)) from None
            print(f"merge: {err}; trying again in {wait:g} s", file=sys.stderr, flush=True)
            time.sleep(wait)
    raise AssertionError("unreachable")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


if __name__ == "__main__":
    sys.exit(main())
