"""Manifests: JSON round trip and its validation, the content digest, safe paths, and
build_manifest's walk (regular files only; symlinks and fifos are never opened)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from rota.errors import StorageError
from rota.storage import FileEntry, Manifest, build_manifest, safe_relpath
from rota.storage import manifest as manifest_module

SHA_A = hashlib.sha256(b"a").hexdigest()
SHA_B = hashlib.sha256(b"bb").hexdigest()


def a_manifest(**kw: object) -> Manifest:
    args: dict[str, object] = {"files": (FileEntry("z/b.bin", 2, SHA_B), FileEntry("a", 1, SHA_A)),
                               "created_at": 1700000000.5, "meta": {"run": 7, "note": "é"}}
    return Manifest(**{**args, **kw})  # type: ignore[arg-type]


def test_json_round_trip_is_equal_and_stable() -> None:
    m = a_manifest()
    assert [f.path for f in m.files] == ["a", "z/b.bin"]  # sorted on creation
    assert Manifest.from_json(m.to_json()) == m
    shuffled = a_manifest(files=tuple(reversed(m.files)), meta={"note": "é", "run": 7})
    assert shuffled.to_json() == m.to_json()
    assert m.total_size == 3
    assert m.find("z/b.bin") == FileEntry("z/b.bin", 2, SHA_B)
    assert m.find("z") is None and m.find("zz") is None
    assert Manifest(files=(), created_at=0).meta == {}


def test_digest_names_the_content_only() -> None:
    m = a_manifest()
    same = a_manifest(files=tuple(reversed(m.files)), created_at=5.0, meta={"other": True})
    assert same.digest() == m.digest()
    assert len(m.digest()) == 64
    changed = a_manifest(files=(FileEntry("a", 1, SHA_A), FileEntry("z/b.bin", 2, SHA_A)))
    renamed = a_manifest(files=(FileEntry("a", 1, SHA_A), FileEntry("z/c.bin", 2, SHA_B)))
    assert len({m.digest(), changed.digest(), renamed.digest()}) == 3


def _doc(**files0: object) -> bytes:
    entry = {"path": "a", "size": 1, "sha256": SHA_A, **files0}
    return json.dumps({"format": 1, "created_at": 1.0, "meta": {}, "files": [entry]}).encode()


@pytest.mark.parametrize(("data", "why"), [
    (b"{not json", "manifest is not JSON"),
    (b"[]", "manifest is not a JSON object"),
    (b'{"created_at": 1, "files": {}}', "manifest files is not a list"),
    (b'{"created_at": "yesterday", "files": []}', "created_at 'yesterday' is not a number"),
    (b'{"created_at": 1, "files": [], "meta": []}', "meta is not a JSON object"),
    (b'{"format": 2, "created_at": 1, "files": []}', "manifest format 2 is not known"),
    (b'{"created_at": 1, "files": [7]}', "files[0] is not a JSON object"),
    (_doc(path="../etc/passwd"), "files[0]: file path '../etc/passwd': a path cannot climb"),
    (_doc(path="/etc/passwd"), "files[0]: file path '/etc/passwd': a path must be relative"),
    (_doc(path="a//b"), "files[0]: file path 'a//b' is not normalised: 'a/b'"),
    (_doc(path=""), "a path cannot be empty"),
    (_doc(path=None), "files[0]: file path None: a path cannot be empty"),
    (_doc(size=-1), "files[0]: a: size -1 is not a whole number >= 0"),
    (_doc(size="1"), "files[0]: a: size '1' is not a whole number"),
    (_doc(size=True), "files[0]: a: size True is not a whole number"),
    (_doc(sha256=SHA_A.upper()), "files[0]: a: sha256 '" + SHA_A.upper() + "' is not 64 lower"),
    (_doc(sha256="abc"), "files[0]: a: sha256 'abc' is not 64 lowercase hex digits"),
])
def test_bad_json_is_refused_with_what_is_wrong(data: bytes, why: str) -> None:
    with pytest.raises(StorageError) as e:
        Manifest.from_json(data)
    assert why in str(e.value)


def test_a_path_listed_twice_is_refused() -> None:
    entry = {"path": "a", "size": 1, "sha256": SHA_A}
    data = json.dumps({"created_at": 1, "files": [entry, entry]}).encode()
    with pytest.raises(StorageError, match="manifest lists a twice"):
        Manifest.from_json(data)


def test_meta_that_is_not_json_is_refused_on_writing() -> None:
    with pytest.raises(StorageError, match="manifest meta is not JSON"):
        a_manifest(meta={"when": object()}).to_json()


@pytest.mark.parametrize(("path", "normal"), [
    ("a", "a"), ("a/b/c.txt", "a/b/c.txt"), ("a//b/./c", "a/b/c"), ("./x/", "x"),
    (".hidden/..dots", ".hidden/..dots"),
])
def test_safe_relpath_normalises(path: str, normal: str) -> None:
    assert safe_relpath(path) == normal


@pytest.mark.parametrize(("path", "why"), [
    ("", "cannot be empty"), ("/abs", "must be relative"), ("a/../../b", "cannot climb"),
    ("..", "cannot climb"), ("a\0b", "NUL"), ("./", "must name a file"),
])
def test_safe_relpath_refuses(path: str, why: str) -> None:
    with pytest.raises(StorageError, match=why):
        safe_relpath(path)


def test_build_manifest_lists_regular_files_with_their_hashes(tmp_path: Path) -> None:
    folder = tmp_path / "staged"
    (folder / "a" / "b").mkdir(parents=True)
    (folder / "a" / "b" / "deep.txt").write_bytes(b"deep")
    (folder / "empty").write_bytes(b"")
    (folder / ".hidden").write_bytes(b"h")
    big = os.urandom((1 << 20) * 2 + 3)  # over two of the 1 MiB reads
    (folder / "big.bin").write_bytes(big)
    m = build_manifest(folder, meta={"job": 3}, now=42.0)
    assert m.created_at == 42.0 and m.meta == {"job": 3, "skipped": []}
    assert m.files == (
        FileEntry(".hidden", 1, hashlib.sha256(b"h").hexdigest()),
        FileEntry("a/b/deep.txt", 4, hashlib.sha256(b"deep").hexdigest()),
        FileEntry("big.bin", len(big), hashlib.sha256(big).hexdigest()),
        FileEntry("empty", 0, hashlib.sha256(b"").hexdigest()),
    )


def test_build_manifest_never_opens_symlinks_or_fifos(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"not yours")
    folder = tmp_path / "staged"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "ok.txt").write_bytes(b"ok")
    (folder / "link-to-secret").symlink_to(outside / "secret")
    (folder / "sub" / "link-to-dir").symlink_to(outside)
    (folder / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(folder / "sub" / "pipe")  # opening it for reading would block
    opened: list[str] = []
    real_open = os.open

    def spy(path: object, *args: object, **kw: object) -> int:
        opened.append(os.path.realpath(str(path)))
        return real_open(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(manifest_module.os, "open", spy)
    m = build_manifest(folder, now=1.0)
    monkeypatch.undo()
    assert [f.path for f in m.files] == ["sub/ok.txt"]
    assert m.meta["skipped"] == ["dangling", "link-to-secret", "sub/link-to-dir", "sub/pipe"]
    assert opened == [str(folder / "sub" / "ok.txt")]  # nothing else was even opened
