"""Embedding cache: shards, hits and misses, resume after a kill, and `harness cache list|clear`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO_ROOT
from tiny_bert import tiny_record

from harness.cli import main
from harness.core.cache import cache_entries
from harness.datasets.beir import load_dataset
from harness.encoding.embedding_cache import EmbeddingCache, ShardJob, encode_corpus_shards, shard_paths
from harness.encoding.encoder import Encoder
from harness.encoding.onnx_export import ensure_exported
from harness.encoding.runtime_choice import build_encoder
from harness.models.resolve import resolve_model, resolve_record
from harness.retrieval.bm25 import BM25Retriever
from harness.retrieval.dense import build_or_load_index, parse_index_spec

DOCS = [
    ("d0", "Immune cells", "They fight cancer in the blood."),
    ("d1", "", "dna and rna"),
    ("d2", "Virus", "virus and bacteria increase the risk of disease"),
    ("d3", "Gene", "a gene study in mouse models"),
    ("d4", "Brain", "brain protein levels were low"),
    ("d5", "", "human data analysis methods"),
    ("d6", "Treatment", "treatment effects for patients with high risk"),
    ("d7", "Tumor", "tumor cells and immune response"),
    ("d8", "", "results of the study"),
    ("d9", "Blood", "blood levels decrease with treatment"),
    ("d10", "Model", "a model of protein and gene"),
]
QUERIES = {"q1": "immune cells in cancer", "q2": "virus risk", "q3": "protein levels"}


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


@pytest.fixture
def beir_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "tinyset"
    (folder / "qrels").mkdir(parents=True)
    _write_jsonl(folder / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in DOCS])
    _write_jsonl(folder / "queries.jsonl", [{"_id": q, "text": text} for q, text in QUERIES.items()])
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\nq2\td2\t1\n")
    (folder / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq3\td4\t1\n")
    return folder


class CountingEncoder(Encoder):
    """An Encoder that records how many documents and queries it was asked to encode."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.documents_encoded = 0
        self.queries_encoded = 0

    def encode_documents(self, docs, *, progress=None):
        self.documents_encoded += len(docs)
        return super().encode_documents(docs, progress=progress)

    def encode_queries(self, texts, *, progress=None):
        self.queries_encoded += len(texts)
        return super().encode_queries(texts, progress=progress)


def _encoder(model_dir: Path, **overrides) -> CountingEncoder:
    model = resolve_record(tiny_record(model_dir, **overrides))
    return build_encoder(model, device="cpu", batch_size=2, encoder_class=CountingEncoder)


def test_corpus_is_stored_in_file_order_shards_equal_to_direct_encoding(tmp_path, beir_folder, tiny_bert_dir):
    dataset = load_dataset(beir_folder, "test")
    encoder = _encoder(tiny_bert_dir)
    corpus = EmbeddingCache(tmp_path / "cache").corpus(dataset, encoder, shard_size=4, progress=False)

    assert (corpus.num_docs, corpus.num_shards, corpus.dim, corpus.shard_size) == (11, 3, 32, 4)
    assert [len(ids) for ids, _ in corpus.shards()] == [4, 4, 3]
    ids, vectors = corpus.load_all()
    assert ids == [doc_id for doc_id, _, _ in DOCS]
    direct = encoder.encode_documents(list(dataset.iter_documents()))
    np.testing.assert_allclose(vectors, direct, atol=1e-6)
    for _, shard in corpus.shards():
        assert isinstance(shard, np.memmap) and shard.dtype == np.float32
    manifest = json.loads((corpus.directory / "manifest.json").read_text())
    assert manifest["complete"] and manifest["finished_shards"] == [0, 1, 2]
    assert manifest["key"] == corpus.key == EmbeddingCache(tmp_path).corpus_key(dataset, encoder, 4)
    assert not list(corpus.directory.glob("*.tmp"))


def test_identical_rerun_encodes_nothing_and_loads_no_model(tmp_path, beir_folder, tiny_bert_dir):
    cache = EmbeddingCache(tmp_path / "cache")
    first = _encoder(tiny_bert_dir)
    corpus = cache.corpus(load_dataset(beir_folder, "test"), first, shard_size=4, progress=False)
    query_ids, queries = cache.queries(load_dataset(beir_folder, "test"), first)
    assert (first.documents_encoded, first.queries_encoded) == (11, 2)
    assert query_ids == ["q1", "q2"]  # the judged queries of the split, in file order

    again = _encoder(tiny_bert_dir)
    dataset = load_dataset(beir_folder, "test")
    hit = cache.corpus(dataset, again, shard_size=4, progress=False)
    hit_ids, hit_queries = cache.queries(dataset, again)
    assert (again.documents_encoded, again.queries_encoded) == (0, 0)
    assert again.loaded.weights.st_model is None  # a full hit never even loads the model
    assert hit.directory == corpus.directory
    np.testing.assert_array_equal(hit.load_all()[1], corpus.load_all()[1])
    assert hit_ids == query_ids
    np.testing.assert_array_equal(hit_queries, queries)


def test_changed_max_length_misses_the_cache(tmp_path, beir_folder, tiny_bert_dir):
    cache = EmbeddingCache(tmp_path / "cache")
    dataset = load_dataset(beir_folder, "test")
    base = cache.corpus(dataset, _encoder(tiny_bert_dir, max_length=16), shard_size=4, progress=False)

    longer = _encoder(tiny_bert_dir, max_length=8)
    changed = cache.corpus(dataset, longer, shard_size=4, progress=False)
    assert longer.documents_encoded == 11
    assert changed.key != base.key and changed.directory != base.directory
    assert not np.allclose(changed.load_all()[1], base.load_all()[1])
    for setting in (
        {"doc_prefix": "passage: "},
        {"pooling": "cls"},
        {"normalize": True},
        {"title_join": ". "},
    ):
        assert cache.corpus_key(dataset, _encoder(tiny_bert_dir, **setting), 4) != base.key, setting


def test_changed_data_misses_and_queries_key_covers_the_split(tmp_path, beir_folder, tiny_bert_dir):
    cache = EmbeddingCache(tmp_path / "cache")
    encoder = _encoder(tiny_bert_dir)
    test_split = load_dataset(beir_folder, "test")
    before = cache.corpus_key(test_split, encoder, 4)
    train_ids, _ = cache.queries(load_dataset(beir_folder, "train"), encoder)
    test_ids, _ = cache.queries(test_split, encoder)
    assert (train_ids, test_ids) == (["q3"], ["q1", "q2"])
    assert encoder.queries_encoded == 3  # the train entry did not answer for the test split

    with open(beir_folder / "corpus.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"_id": "d11", "title": "", "text": "one more document"}) + "\n")
    assert cache.corpus_key(load_dataset(beir_folder, "test"), encoder, 4) != before


def test_missing_shard_is_the_only_one_re_encoded(tmp_path, beir_folder, tiny_bert_dir):
    cache = EmbeddingCache(tmp_path / "cache")
    dataset = load_dataset(beir_folder, "test")
    corpus = cache.corpus(dataset, _encoder(tiny_bert_dir), shard_size=4, progress=False)
    reference = corpus.load_all()[1]
    shard_paths(corpus.directory, 1)[1].unlink()  # as if the run died between its two files

    rerun = _encoder(tiny_bert_dir)
    repaired = cache.corpus(dataset, rerun, shard_size=4, progress=False)
    assert rerun.documents_encoded == 4
    np.testing.assert_array_equal(repaired.load_all()[1], reference)


def test_workers_can_fill_disjoint_shards_of_one_entry(tmp_path, beir_folder, tiny_bert_dir):
    cache = EmbeddingCache(tmp_path / "cache")
    dataset = load_dataset(beir_folder, "test")
    worker_a, worker_b = _encoder(tiny_bert_dir), _encoder(tiny_bert_dir)
    key = cache.corpus_key(dataset, worker_a, 4)
    directory = cache._entry_dir(dataset, worker_a, "corpus", key)
    written_a = encode_corpus_shards(ShardJob(dataset, worker_a, directory, 4), [0, 2])
    written_b = encode_corpus_shards(ShardJob(dataset, worker_b, directory, 4), [1])
    assert [(m["index"], m["count"]) for m in written_a + written_b] == [(0, 4), (2, 3), (1, 4)]
    assert (worker_a.documents_encoded, worker_b.documents_encoded) == (7, 4)

    coordinator = _encoder(tiny_bert_dir)
    corpus = cache.corpus(dataset, coordinator, shard_size=4, progress=False)
    assert coordinator.documents_encoded == 0
    assert corpus.load_all()[0] == [doc_id for doc_id, _, _ in DOCS]


_KILLED_CHILD = """
import sys, time
from pathlib import Path
from harness.encoding.embedding_cache import EmbeddingCache
from harness.datasets.beir import load_dataset
from harness.encoding.runtime_choice import build_encoder
from harness.models.model_registry import ModelRecord
from harness.models.resolve import resolve_record

data_dir, model_dir, cache_dir = sys.argv[1:4]
record = ModelRecord(name="tiny", model_id=model_dir, kind="transformers", pooling="mean",
                     normalize=False, similarity="dot", max_length=16)
encoder = build_encoder(resolve_record(record), device="cpu", batch_size=2)
encode = encoder.encode_documents
calls = []

def stall_on_third_shard(docs, **kwargs):
    calls.append(len(docs))
    if len(calls) == 3:
        time.sleep(600)  # the parent kills this process here, mid-run
    return encode(docs, **kwargs)

encoder.encode_documents = stall_on_third_shard
EmbeddingCache(Path(cache_dir)).corpus(load_dataset(data_dir, "test"), encoder, shard_size=3, progress=False)
"""


def test_killed_run_resumes_from_finished_shards_with_identical_embeddings(
    tmp_path, beir_folder, tiny_bert_dir
):
    cache_dir = tmp_path / "cache"
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_CHILD, str(beir_folder), str(tiny_bert_dir), str(cache_dir)],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        deadline = time.monotonic() + 180
        while not list(cache_dir.glob("embeddings/*/shard-00001.json")):
            assert child.poll() is None, child.stderr.read().decode()
            assert time.monotonic() < deadline, "child never finished two shards"
            time.sleep(0.2)
        child.kill()
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -9  # really killed, not finished
    (directory,) = cache_dir.glob("embeddings/*")
    assert sorted(p.name for p in directory.glob("shard-*.json")) == ["shard-00000.json", "shard-00001.json"]
    assert not json.loads((directory / "manifest.json").read_text()).get("complete")

    dataset = load_dataset(beir_folder, "test")
    rerun = _encoder(tiny_bert_dir)
    resumed = EmbeddingCache(cache_dir).corpus(dataset, rerun, shard_size=3, progress=False)
    assert rerun.documents_encoded == 11 - 2 * 3  # only shards 2 and 3
    assert resumed.directory == directory

    uninterrupted = EmbeddingCache(tmp_path / "fresh").corpus(
        dataset, _encoder(tiny_bert_dir), shard_size=3, progress=False
    )
    assert resumed.load_all()[0] == uninterrupted.load_all()[0]
    np.testing.assert_array_equal(resumed.load_all()[1], uninterrupted.load_all()[1])


def test_cache_list_and_clear_through_the_cli(tmp_path, beir_folder, tiny_bert_dir, capsys):
    cache_dir = tmp_path / "cache"
    cache = EmbeddingCache(cache_dir)
    dataset = load_dataset(beir_folder, "test")
    encoder = _encoder(tiny_bert_dir)
    corpus = cache.corpus(dataset, encoder, shard_size=4, progress=False)
    cache.queries(dataset, encoder)
    entries = cache_entries(cache_dir)
    assert sorted(entry.details["part"] for entry in entries) == ["corpus", "queries"]
    assert all(entry.kind == "embeddings" and entry.complete and entry.bytes > 0 for entry in entries)

    assert main(["cache", "list", "--cache-dir", str(cache_dir)]) == 0
    listing = capsys.readouterr().out
    assert corpus.key[:12] in listing and "tinyset" in listing and "3/3" in listing
    assert main(["cache", "list", "--cache-dir", str(cache_dir), "--json"]) == 0
    assert {e["key"] for e in json.loads(capsys.readouterr().out)} == {e.key for e in entries}

    assert main(["cache", "clear", "--cache-dir", str(cache_dir)]) == 2
    assert main(["cache", "clear", "ffffnotakey", "--cache-dir", str(cache_dir)]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and all(line.startswith("error: ") for line in errors)
    assert "ffffnotakey" in errors[1]

    assert main(["cache", "clear", corpus.key[:10], "--cache-dir", str(cache_dir)]) == 0
    assert "removed 1 entry" in capsys.readouterr().out
    assert not corpus.directory.exists()
    assert [entry.details["part"] for entry in cache_entries(cache_dir)] == ["queries"]
    assert main(["cache", "clear", "--all", "--cache-dir", str(cache_dir)]) == 0
    assert cache_entries(cache_dir) == []


def test_cache_lists_and_clears_every_kind_with_sizes(tmp_path, beir_folder, tiny_bert_dir, capsys):
    """Embeddings, a FAISS index over them, a BM25 index, an ONNX export and the exact-runtime verdict
    (kept on its own, reused by every model of the same architecture), all in one listing."""
    cache_dir = tmp_path / "cache"
    dataset = load_dataset(beir_folder, "test")
    encoder = build_encoder(
        resolve_record(tiny_record(tiny_bert_dir)), device="cpu", batch_size=2, cache_dir=cache_dir
    )
    corpus = EmbeddingCache(cache_dir).corpus(dataset, encoder, shard_size=4, progress=False)
    build_or_load_index(parse_index_spec("HNSW8"), corpus)
    BM25Retriever(resolve_model("bm25").record, cache_dir=cache_dir, progress=False).retrieve(dataset, 5)
    ensure_exported(encoder.load(), encoder.model, cache_dir)
    (cache_dir / "bm25" / ".half-written.abc.tmp").mkdir()  # what a killed BM25 build leaves

    entries = cache_entries(cache_dir)
    assert sorted(entry.kind for entry in entries) == ["bm25", "embeddings", "faiss", "onnx", "onnx"]
    assert all(entry.complete and entry.bytes > 0 for entry in entries)
    verdicts = [entry for entry in entries if entry.path.name.startswith("exact-runtime-")]
    assert len(verdicts) == 1 and verdicts[0].details["exact_check"]
    by_kind = {entry.kind: entry for entry in entries if entry not in verdicts}
    assert by_kind["faiss"].path.parent == corpus.directory
    assert by_kind["bm25"].dataset == dataset.name and dataset.name.startswith("tinyset@")
    assert by_kind["bm25"].details["count"] == len(DOCS)
    # Sizes add up to what is on disk: nothing counted twice (the FAISS file sits in the embeddings folder).
    on_disk = sum(p.stat().st_size for p in cache_dir.rglob("*") if p.is_file() and ".tmp" not in str(p))
    assert sum(entry.bytes for entry in entries) == on_disk

    assert main(["cache", "list", "--cache-dir", str(cache_dir), "--kind", "bm25", "--json"]) == 0
    assert [e["kind"] for e in json.loads(capsys.readouterr().out)] == ["bm25"]
    assert main(["cache", "list", "--cache-dir", str(cache_dir)]) == 0
    listing = capsys.readouterr().out
    assert all(kind in listing for kind in ("embeddings", "faiss", "bm25", "onnx", "HNSW8"))
    assert "1 leftover temporary file(s)" in listing

    assert main(["cache", "clear", "--leftovers", "--cache-dir", str(cache_dir)]) == 0
    assert "removed 0 entries and 1 leftover file(s)" in capsys.readouterr().out
    assert len(cache_entries(cache_dir)) == 5 and not list(cache_dir.rglob("*.tmp"))
    assert main(["cache", "clear", "--all", "--kind", "onnx", "--cache-dir", str(cache_dir)]) == 0
    assert sorted(entry.kind for entry in cache_entries(cache_dir)) == ["bm25", "embeddings", "faiss"]
    assert main(["cache", "clear", "--all", "--cache-dir", str(cache_dir)]) == 0
    assert cache_entries(cache_dir) == [] and "freed" in capsys.readouterr().out
