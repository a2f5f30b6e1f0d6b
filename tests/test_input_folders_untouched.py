"""Input folders are only ever read (issue 33): ``eval`` and ``data verify`` keep their remembered checksums
in the harness's cache (``<cache>/checksums/``), never as a sidecar in the dataset folder they are given,
be it a user's own writable folder or a shared mirror."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from fault_snapshot import assert_unchanged, snapshot
from test_integrity import eval_args, toy_dataset

from harness.cli import main
from harness.core.fileio import file_digest
from harness.core.paths import checksums_dir
from harness.datasets import checksums as checksums_module
from harness.datasets.beir import load_dataset
from harness.datasets.checksums import SIDECAR_FILE, ChecksumStore, store_file


@pytest.fixture
def user_scifact(tmp_path: Path, beir_mirror: Path) -> Path:
    """A user's own writable copy of scifact in a data folder (without the mirror's shipped sidecar)."""
    data = tmp_path / "data"
    shutil.copytree(beir_mirror / "scifact", data / "scifact", ignore=shutil.ignore_patterns(".*"))
    for folder in (data / "scifact", data / "scifact" / "qrels"):
        folder.chmod(0o755)
    return data / "scifact"


def _stored_files(cache: Path) -> list[Path]:
    return sorted((cache / "checksums").glob("*.json"))


@pytest.mark.parametrize("how", ["by folder path", "by registry name"])
def test_data_verify_writes_nothing_into_the_dataset_folder(
    user_scifact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, how: str
):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(cache))
    before = snapshot(user_scifact)
    name = str(user_scifact) if how == "by folder path" else "scifact"
    assert main(["data", "verify", name, "--data-dir", str(user_scifact.parent)]) == 0, (
        capsys.readouterr().err
    )
    assert_unchanged(before, user_scifact)  # no sidecar, nothing else either
    (stored,) = _stored_files(cache)
    remembered = json.loads(stored.read_text(encoding="utf-8"))
    assert remembered["folder"] == str(user_scifact.resolve())
    assert remembered["entries"]["sha256:corpus.jsonl"]["value"] == file_digest(user_scifact / "corpus.jsonl")


def test_eval_writes_nothing_into_the_dataset_folder(tmp_path: Path, capsys):
    inputs = toy_dataset(tmp_path / "inputs" / "toy")
    before = snapshot(inputs)
    assert main(eval_args(tmp_path, inputs)) == 0, capsys.readouterr().err
    assert_unchanged(before, inputs)
    # The remembered hashes are in a cache: the one eval was given, or the environment's.
    stored = _stored_files(tmp_path / "cache") + [store_file(inputs, checksums_dir())]
    assert any(path.is_file() for path in stored), stored


def test_the_shared_mirror_is_read_and_never_written(beir_mirror: Path, tmp_path: Path, capsys):
    """Straight from the shared mirror (/work/shared/data): every file and folder there stays as it was."""
    mirror = beir_mirror / "scifact"
    before = snapshot(mirror)
    args = ["data", "verify", str(mirror)]
    assert main(args) == 0, capsys.readouterr().err
    assert main(eval_args(tmp_path, mirror, "bm25", "--top-k", "10")) == 0, capsys.readouterr().err
    assert_unchanged(before, mirror)


def test_remembered_values_spare_the_next_process_a_rehash(
    user_scifact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    store = ChecksumStore(tmp_path / "cache" / "checksums")
    first = load_dataset(user_scifact, checksums=store).fingerprint()

    def no_hashing(*args, **kwargs):
        raise AssertionError("re-hashed an unchanged file")

    monkeypatch.setattr(checksums_module, "file_digest", no_hashing)
    fresh = ChecksumStore(tmp_path / "cache" / "checksums")  # what a new process has: the stored file only
    assert load_dataset(user_scifact, checksums=fresh).fingerprint() == first
    assert not (user_scifact / SIDECAR_FILE).exists()

    monkeypatch.undo()
    with open(user_scifact / "queries.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"_id": "extra", "text": "unjudged"}) + "\n")
    changed = load_dataset(
        user_scifact, checksums=ChecksumStore(tmp_path / "cache" / "checksums")
    ).fingerprint()
    assert changed["queries.jsonl"] == file_digest(user_scifact / "queries.jsonl") != first["queries.jsonl"]


def test_two_folders_of_the_same_name_are_remembered_apart(tmp_path: Path):
    store = ChecksumStore(tmp_path / "cache" / "checksums")
    roots = [toy_dataset(tmp_path / side / "toy") for side in ("a", "b")]
    (roots[1] / "corpus.jsonl").write_text('{"_id": "x", "title": "", "text": "other"}\n', encoding="utf-8")
    os.utime(roots[1] / "corpus.jsonl", ns=(0, (roots[0] / "corpus.jsonl").stat().st_mtime_ns))
    digests = [store.sha256(root, "corpus.jsonl") for root in roots]
    fresh = ChecksumStore(tmp_path / "cache" / "checksums")
    assert [fresh.sha256(root, "corpus.jsonl") for root in roots] == digests
    assert digests == [file_digest(root / "corpus.jsonl") for root in roots] and digests[0] != digests[1]
    assert len(_stored_files(tmp_path / "cache")) == 2


def test_a_sidecar_left_in_the_folder_is_not_trusted(
    user_scifact: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    """A tampered corpus with an old sidecar vouching for it (same size and mtime) fails verification."""
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    corpus = user_scifact / "corpus.jsonl"
    status = corpus.stat()
    pinned = file_digest(corpus)
    sidecar = {
        "version": 1,
        "entries": {
            "sha256:corpus.jsonl": {"stamp": [[status.st_size, status.st_mtime_ns]], "value": pinned}
        },
    }
    (user_scifact / SIDECAR_FILE).write_text(json.dumps(sidecar), encoding="utf-8")
    data = bytearray(corpus.read_bytes())
    data[data.index(b"the")] = ord("T")  # same size
    corpus.write_bytes(bytes(data))
    os.utime(corpus, ns=(status.st_atime_ns, status.st_mtime_ns))  # same mtime
    before = snapshot(user_scifact)

    code = main(["data", "verify", "scifact", "--data-dir", str(user_scifact.parent)])
    captured = capsys.readouterr()
    assert code == 2 and "Traceback" not in captured.err
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("error: verification failed") and "corpus.jsonl mismatch" in line
    assert "MISMATCH" in captured.out
    assert_unchanged(before, user_scifact)
