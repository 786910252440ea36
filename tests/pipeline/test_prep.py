"""The data step as its job runs it (``python -m rota.pipeline.prep``): every local format
and a folder, an S3 prefix and the chunk's upload on moto's server (its presigned URL gives
the chunk back), Gradients' field mappings (Chat roles included, and the fixed-datasets
files Gradients' own scheduler could not make), the held-out tail in no chunk of any round,
balanced chunks that cycle, the cache reused without the sources, and errors that name the
dataset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

try:
    import boto3  # noqa: F401  (needed: skipped or failed without it)
    import httpx
    import pyarrow as pa
    import pyarrow.parquet as pq
    from moto.server import ThreadedMotoServer  # noqa: F401
except ImportError:
    if os.environ.get("ROTA_REQUIRE_TORCH"):
        raise
    pytest.skip("needs boto3, pyarrow and moto (pip install 'rota[test]')",
                allow_module_level=True)

from s3_testing import s3_client

from rota.pipeline.config import PipelineConfig


def config(datasets: list[dict[str, Any]], **more: Any) -> PipelineConfig:
    return PipelineConfig.model_validate({
        "version": 1, "name": "t", "model_repo": "m", "datasets": datasets,
        "samples_per_training": 30, "final_test_size": 0.1, "random_seed": 7, **more})


def prep(cfg: PipelineConfig, n: int, tmp: Path, env: dict[str, str] | None = None
         ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp / f"round-{n}"
    r = subprocess.run([sys.executable, "-m", "rota.pipeline.prep", "--round", str(n),
                        "--out", str(out), "--cache", str(tmp / "cache")],
                       env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                            "ROTA_PIPELINE_CONFIG": cfg.model_dump_json(), **(env or {})},
                       capture_output=True, text=True, timeout=300, check=False)
    result = json.loads((out / "prep.json").read_text()) if r.returncode == 0 else {}
    return r, result


def lines(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in Path(path).read_text().splitlines()]


def qa(i: int) -> dict[str, Any]:
    return {"question": f"q{i}", "context": f"c{i}", "answer": f"a{i}", "extra": i}


MAP = {"field_instruction": "question", "field_input": "context", "field_output": "answer"}


def test_every_local_format_is_read_mapped_merged_and_cut(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "folder").mkdir(parents=True)
    (src / "a.jsonl").write_text("".join(json.dumps(qa(i)) + "\n" for i in range(40)))
    (src / "b.json").write_text(json.dumps([qa(i) for i in range(40, 60)]))
    pq.write_table(pa.Table.from_pylist([qa(i) for i in range(60, 80)]),
                   src / "folder" / "c.parquet")
    (src / "folder" / "d.csv").write_text("question,context,answer,extra\n" + "".join(
        f"q{i},c{i},a{i},{i}\n" for i in range(80, 100)))
    (src / "folder" / ".hidden.jsonl").write_text(json.dumps(qa(999)) + "\n")
    cfg = config([{"name": str(src / "a.jsonl"), **MAP},
                  {"name": str(src / "b.json"), **MAP},
                  {"name": str(src / "folder"), **MAP, "max_rows": 30}])
    seen: dict[int, list[str]] = {}
    for n in (1, 2, 3, 4):
        r, got = prep(cfg, n, tmp_path)
        assert r.returncode == 0, r.stderr
        seen[n] = [x["instruction"] for x in lines(got["files"]["train"])]
        assert json.loads(r.stdout.strip().splitlines()[-1]) == {
            "rows": 90, "chunk_rows": len(seen[n]), "heldout_rows": 9}
    assert (got["rows"], got["train_rows"], got["heldout_rows"], got["chunks"]) == (90, 81,
                                                                                    9, 3)
    assert [len(seen[n]) for n in (1, 2, 3)] == [27, 27, 27]  # balanced, none over 30
    assert seen[4] == seen[1]  # the chunks cycle
    heldout = [x["instruction"] for x in lines(got["heldout"])]
    trained = seen[1] + seen[2] + seen[3]
    assert not set(heldout) & set(trained) and len(set(trained)) == 81
    assert {x for x in trained + heldout} <= {f"q{i}" for i in range(100)}
    assert "q999" not in trained + heldout  # hidden files are not data
    row = next(x for x in lines(got["files"]["train"]))
    assert set(row) == {"instruction", "input", "output"}
    assert row["input"] == "c" + row["instruction"][1:]


def test_the_cache_is_reused_without_the_sources_and_the_seed_orders(tmp_path: Path) -> None:
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps(qa(i)) + "\n" for i in range(50)))
    cfg = config([{"name": str(src), **MAP}])
    r, first = prep(cfg, 1, tmp_path)
    assert r.returncode == 0, r.stderr
    src.unlink()
    r, _ = prep(cfg, 1, tmp_path / "again")
    assert r.returncode != 0  # another cache folder: the source is needed ...
    r, _ = prep(cfg, 2, tmp_path)
    assert r.returncode == 0 and "prepared before, reused" in r.stdout  # ... not here
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")]
    src.write_text("".join(json.dumps(qa(i)) + "\n" for i in range(50)))
    other = config([{"name": str(src), **MAP}], random_seed=8)
    r, third = prep(other, 1, tmp_path / "seed-8")
    assert r.returncode == 0
    assert lines(third["files"]["train"]) != lines(first["files"]["train"])


def test_chat_turns_take_the_standard_roles(tmp_path: Path, s3_url: str) -> None:
    src = tmp_path / "chat.jsonl"
    src.write_text("".join(json.dumps({"messages": [
        {"from": "human", "value": f"hi {i}"}, {"from": "gpt", "value": f"hello {i}"},
        {"from": "system", "value": "be kind"}]}) + "\n" for i in range(20)))
    cfg = config([{"name": str(src), "chat_column": "messages", "chat_role_field": "from",
                   "chat_content_field": "value", "chat_user_reference": "human",
                   "chat_assistant_reference": "gpt"}], task_type="Chat",
                 train={"where": "gradients"},
                 upload={"bucket": "chunks", "endpoint_url": s3_url})
    s3_client(s3_url).create_bucket(Bucket="chunks")
    r, got = prep(cfg, 1, tmp_path, aws_env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert list(got["urls"]) == ["dataset"]  # one file, as /v1/tasks/create_chat reads
    assert httpx.get(got["urls"]["dataset"]).json() == lines(got["files"]["train"])
    turns = lines(got["files"]["train"])[0]["conversations"]
    assert [t["role"] for t in turns] == ["user", "assistant", "system"]
    assert turns[0]["content"].startswith("hi ")
    # the held-out conversations, as text the heldout harness scores
    [held, *_] = lines(got["heldout"])
    n = held["text"].split("\n")[0].removeprefix("user: hi ")
    assert held == {"text": f"user: hi {n}\nassistant: hello {n}\nsystem: be kind"}


def test_fixed_datasets_make_three_files_none_empty(tmp_path: Path) -> None:
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps(qa(i)) + "\n" for i in range(60)))
    cfg = config([{"name": str(src), **MAP}], task_type="InstructTextWithFixedDatasets")
    r, got = prep(cfg, 1, tmp_path)
    assert r.returncode == 0, r.stderr
    sizes = {k: len(lines(v)) for k, v in got["files"].items()}
    assert sizes == {"train": 23, "test": 2, "synth": 2}  # a chunk of 27: 80/10/10
    names = [x["instruction"] for v in got["files"].values() for x in lines(v)]
    assert len(names) == len(set(names)) == got["chunk_rows"]


@pytest.mark.parametrize(("dataset", "message"), [
    ({"name": "./nowhere.jsonl"}, "prep: dataset ./nowhere.jsonl: no such file or folder"),
    ({"name": "someone/some-dataset"}, "prep: dataset someone/some-dataset: not a local file "
                                       "or folder, and the Hugging Face hub could not give "
                                       "it"),
    ({"name": "{src}", "field_output": "response"}, "prep: dataset {src}: no column response "
                                                    "(it has answer, context, extra, "
                                                    "question)"),
])
def test_errors_name_the_dataset(tmp_path: Path, dataset: dict[str, str],
                                 message: str) -> None:
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps(qa(i)) + "\n" for i in range(20)))
    ds = {**MAP, **{k: v.format(src=src) for k, v in dataset.items()}}
    r, _ = prep(config([ds]), 1, tmp_path)
    assert r.returncode == 2
    assert r.stderr.startswith(message.format(src=src)), r.stderr


def aws_env(tmp: Path) -> dict[str, str]:
    """The keys as a pipeline's secrets give them, and no ambient AWS setup."""
    none = str(tmp / "none")
    return {"S3_COMPATIBLE_ACCESS_KEY": "k", "S3_COMPATIBLE_SECRET_KEY": "s",
            "AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none,
            "AWS_EC2_METADATA_DISABLED": "true"}


def test_an_s3_source_and_the_upload_with_its_presigned_url(tmp_path: Path,
                                                            s3_url: str) -> None:
    s3 = s3_client(s3_url)
    for b in ("data", "chunks"):
        s3.create_bucket(Bucket=b)
    s3.put_object(Bucket="data", Key="qa/part-1.jsonl",
                  Body="".join(json.dumps(qa(i)) + "\n" for i in range(30)).encode())
    s3.put_object(Bucket="data", Key="qa/part-2.json",
                  Body=json.dumps([qa(i) for i in range(30, 50)]).encode())
    s3.put_object(Bucket="data", Key="qa/README.md", Body=b"not data")
    cfg = config([{"name": "s3://data/qa/", **MAP}], task_type="InstructTextWithFixedDatasets",
                 upload={"endpoint_url": s3_url, "prefix": "runs", "expires": "1h"})
    env = {"S3_BUCKET_NAME": "chunks", **aws_env(tmp_path)}
    r, got = prep(cfg, 2, tmp_path, env)
    assert r.returncode == 0, r.stderr
    assert got["rows"] == 50 and sorted(got["urls"]) == ["synth", "test", "train"]
    for kind, url in got["urls"].items():
        assert "X-Amz-Expires=3600" in url and url not in r.stdout + r.stderr
        answer = httpx.get(url)
        assert answer.status_code == 200
        assert answer.json() == lines(got["files"][kind])  # a JSON list, as Gradients reads
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="chunks", Prefix="runs/")["Contents"]]
    assert sorted(k.rsplit("_", 2)[-2] for k in keys) == ["synth", "test", "train"]
    assert all(k.startswith("runs/t/round-2/") for k in keys), keys
    assert (tmp_path / "round-2" / "prep.json").stat().st_mode & 0o077 == 0
    # a bucket that is not there fails the step, naming it (never a URL of nothing)
    r, _ = prep(cfg, 3, tmp_path, {**env, "S3_BUCKET_NAME": "no-such-bucket"})
    assert r.returncode == 2 and "no-such-bucket" in r.stderr and "NoSuchBucket" in r.stderr
