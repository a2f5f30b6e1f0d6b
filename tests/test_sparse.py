"""Learned sparse (SPLADE) retrieval on tiny random models built at test time: the vectors are
sentence-transformers' own, SPLADE's maths holds, exact top-k equals a dense brute force in trec_eval
order, FLOPS as sentence-transformers computes it, sparse shards checked and rebuilt, pyserini impacts,
seismic's recall against exact, and one line for each bad input."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse
import torch
from tiny_bert import build_tiny_bert_mlm, build_tiny_splade

from harness.core.errors import HarnessError
from harness.core.ranking import ranking_order
from harness.encoding.sparse import (
    SparseCache,
    SparseTextEncoder,
    quantize_impacts,
    sparse_params,
    sparse_shard_files,
    sparsity_stats,
    to_csr,
)
from harness.models.model_registry import ModelRecord
from harness.models.resolve import ResolvedModel
from harness.retrieval.settings import RetrievalSettings
from harness.retrieval.sparse import (
    SeismicSpec,
    SparseRetriever,
    exact_sparse_search,
    key_scores,
    order_keys,
    parse_sparse_index,
    recall_against_exact,
)

QUERIES = ["what cells increase the risk", "the protein of the virus", "brain blood study", "xyz"]
TEXTS = [
    ("cells and risk", "the immune cells increase risk of cancer"),
    ("", "protein of the virus and bacteria"),
    ("brain", "blood brain study in mouse model"),
    ("gene", "dna rna gene expression levels"),
    ("", "the patients treatment effect results"),
    ("cells and risk", "the immune cells increase risk of cancer"),  # a duplicate: an exact tie
    ("method", "data analysis method of human studies"),
]


@dataclass
class Doc:
    id: str
    title: str
    text: str


@dataclass
class TinyDataset:
    """A dataset double: what the sparse retriever reads from a BEIR dataset."""

    name: str = "tiny"
    split: str = "test"
    docs: list[Doc] = field(default_factory=lambda: [Doc(f"d{i}", t, x) for i, (t, x) in enumerate(TEXTS)])
    queries: dict[str, str] = field(default_factory=lambda: {f"q{i}": q for i, q in enumerate(QUERIES)})
    qrels: dict = field(default_factory=dict)
    excluded_ids: dict = field(default_factory=dict)
    drop_identical_ids: bool = False

    @property
    def num_docs(self) -> int:
        return len(self.docs)

    def fingerprint(self) -> dict[str, str]:
        return {"corpus.jsonl": "c" * 8, "queries.jsonl": "q" * 8}

    def iter_documents(self, start=None):
        return iter(self.docs)

    def shard_starts(self, shard_size: int):
        return None


@pytest.fixture(scope="module")
def splade_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("splade")
    mlm = build_tiny_bert_mlm(root / "mlm")
    return {
        "mlm": mlm,
        "splade": build_tiny_splade(root / "splade", mlm),
        "free": build_tiny_splade(root / "free", mlm, inference_free_query=True),
    }


def sparse_model(folder: Path, **settings) -> ResolvedModel:
    record = ModelRecord(name="tiny-splade", model_id=str(folder), kind="sparse", max_length=32, **settings)
    return ResolvedModel(record, str(folder), {"model_id": str(folder)}, "tiny-splade")


@pytest.fixture(scope="module")
def encoder(splade_dirs) -> SparseTextEncoder:
    return SparseTextEncoder.load(sparse_model(splade_dirs["splade"]))


def dense(matrix) -> np.ndarray:
    return np.asarray(matrix.todense(), dtype=np.float32)


# ---- vectors: sentence-transformers' own, SPLADE's maths --------------------------------------------


def test_vectors_equal_sparse_encoder_encode_query_and_document(encoder):
    docs = TinyDataset().docs
    library = encoder.document_model
    want_docs = library.encode_document(
        [f"{d.title} {d.text}".strip() for d in docs], convert_to_sparse_tensor=False
    )
    want_queries = library.encode_query(QUERIES, convert_to_sparse_tensor=False)
    np.testing.assert_allclose(dense(encoder.encode_documents(docs)), want_docs.numpy(), atol=1e-6, rtol=0)
    np.testing.assert_allclose(
        dense(encoder.encode_queries(QUERIES)), want_queries.numpy(), atol=1e-6, rtol=0
    )
    assert encoder.encode_queries(QUERIES).indices.dtype == np.int32


def test_splade_vectors_are_the_max_of_log1p_relu_mlm_logits_under_the_mask(encoder, splade_dirs):
    from transformers import AutoTokenizer, BertForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(splade_dirs["mlm"])
    model = BertForMaskedLM.from_pretrained(splade_dirs["mlm"]).eval()
    batch = tokenizer(QUERIES, padding=True, truncation=True, max_length=32, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    by_hand = torch.max(
        torch.log(1 + torch.relu(logits)) * batch["attention_mask"].unsqueeze(-1), dim=1
    ).values
    assert (by_hand > 0).any()
    np.testing.assert_allclose(dense(encoder.encode_queries(QUERIES)), by_hand.numpy(), atol=1e-5, rtol=0)


def test_max_active_dims_keeps_the_top_weights_and_changes_the_cache_key(splade_dirs, encoder):
    pruned = SparseTextEncoder.load(sparse_model(splade_dirs["splade"], params={"max_active_dims": 3}))
    full, top = encoder.encode_queries(QUERIES), pruned.encode_queries(QUERIES)
    assert (np.diff(top.indptr) <= 3).all() and (np.diff(full.indptr) > 3).any()
    for row in range(len(QUERIES)):
        kept = np.sort(top[row].data)
        np.testing.assert_allclose(kept, np.sort(full[row].data)[-len(kept) :], atol=1e-6)
    assert pruned.settings()["max_active_dims"] == 3 and pruned.settings() != encoder.settings()


def test_inference_free_queries_are_the_static_embedding(splade_dirs):
    free = SparseTextEncoder.load(sparse_model(splade_dirs["free"], params={"inference_free_query": True}))
    want = free.query_model.encode_query(QUERIES, convert_to_sparse_tensor=False)
    np.testing.assert_allclose(dense(free.encode_queries(QUERIES)), want.numpy(), atol=1e-6, rtol=0)
    with pytest.raises(HarnessError, match=r"params.inference_free_query .*set it to true"):
        SparseTextEncoder.load(sparse_model(splade_dirs["free"]))


# ---- bad input: one line ----------------------------------------------------------------------------


def test_bad_params_are_one_line_naming_the_key(splade_dirs):
    for params, wanted in (
        ({"max_active_dims": 0}, "params: max_active_dims"),
        ({"max_dims": 4}, "unknown key 'max_dims'"),
    ):
        with pytest.raises(HarnessError, match=wanted) as caught:
            sparse_params(sparse_model(splade_dirs["splade"], params=params).record)
        assert "\n" not in str(caught.value)


def test_a_token_budget_beyond_the_position_embeddings_is_one_line(splade_dirs):
    with pytest.raises(
        HarnessError, match=r"document max length 128 exceeds the model's 64 position"
    ) as caught:
        SparseTextEncoder.load(sparse_model(splade_dirs["splade"], params={"doc_max_length": 128}))
    assert "\n" not in str(caught.value) and "params.doc_max_length" in str(caught.value)


def test_a_faiss_index_for_a_sparse_model_is_one_line():
    with pytest.raises(HarnessError, match=r"FAISS index for dense vectors; model m is sparse"):
        parse_sparse_index("HNSW32,efSearch=64", "m")
    with pytest.raises(HarnessError, match="unknown seismic setting"):
        parse_sparse_index("seismic,nprobe=3", "m")
    assert parse_sparse_index("Flat", "m") is None
    assert parse_sparse_index("seismic,query_cut=5,heap_factor=0.9", "m") == SeismicSpec(
        query_cut=5, heap_factor=0.9
    )


# ---- exact search -------------------------------------------------------------------------------------


def brute_force(queries, documents, doc_ids, k) -> list[list[tuple[str, float]]]:
    """Dense numpy matmul of the same vectors, ranked by harness.core.ranking (trec_eval order)."""
    scores = dense(queries) @ dense(documents).T
    ranked = []
    for row in scores:
        order = [i for i in ranking_order(doc_ids, row.astype(np.float64)).tolist() if row[i] != 0]
        ranked.append([(doc_ids[i], float(row[i])) for i in order[:k]])
    return ranked


def as_pairs(hits) -> list[list[tuple[str, float]]]:
    return [
        [(doc_id, float(score)) for doc_id, score in zip(names, scores, strict=True) if doc_id]
        for names, scores in zip(hits.doc_ids, hits.scores, strict=True)
    ]


def test_order_keys_sort_as_score_then_rank_and_give_the_scores_back():
    scores = np.array([[-2.0, -1.0, 0.5, 0.5, 3.25, -0.0]], dtype=np.float32)
    ranks = np.array([[0, 1, 2, 5, 3, 4]])
    keys = order_keys(scores, ranks)
    assert np.argsort(keys[0]).tolist() == [0, 1, 5, 2, 3, 4]
    np.testing.assert_array_equal(key_scores(keys), scores)


def test_exact_top_k_equals_a_dense_brute_force_with_ties_in_trec_eval_order():
    rng = np.random.default_rng(3)
    # Small integer weights: every sum is exact in float32, so ties are real ties, many of them.
    documents = scipy.sparse.random(300, 50, density=0.08, random_state=4, format="csr", dtype=np.float32)
    documents.data = rng.integers(1, 4, documents.nnz).astype(np.float32)
    queries = scipy.sparse.random(40, 50, density=0.1, random_state=5, format="csr", dtype=np.float32)
    queries.data = rng.integers(1, 3, queries.nnz).astype(np.float32)
    doc_ids = [f"doc{rng.integers(0, 10**6)}-{i}" for i in range(300)]
    shards = [(doc_ids[:130], documents[:130]), (doc_ids[130:], documents[130:])]
    want = brute_force(queries, documents, doc_ids, 25)
    assert any(len({s for _, s in row}) < len(row) for row in want)  # ties really occur
    for chunk, block in ((7, 3), (1000, 1000)):
        hits = exact_sparse_search(queries, shards, 25, doc_chunk=chunk, query_block=block)
        assert as_pairs(hits) == want


def test_exact_top_k_of_the_tiny_models_vectors_equals_the_brute_force(encoder):
    docs = TinyDataset().docs
    documents, queries = encoder.encode_documents(docs), encoder.encode_queries(QUERIES)
    doc_ids = [d.id for d in docs]
    hits = exact_sparse_search(
        queries, [(doc_ids[:4], documents[:4]), (doc_ids[4:], documents[4:])], 5, doc_chunk=2
    )
    want = brute_force(queries, documents, doc_ids, 5)
    got = as_pairs(hits)
    assert [[d for d, _ in row] for row in got] == [[d for d, _ in row] for row in want]
    np.testing.assert_allclose(
        [s for row in got for _, s in row], [s for row in want for _, s in row], rtol=1e-5
    )
    tied = [row for row in got if "d0" in dict(row)][0]  # d0 and its duplicate d5 tie: d5 (larger id) first
    assert [d for d, _ in tied].index("d5") == [d for d, _ in tied].index("d0") - 1


# ---- FLOPS and sparsity as sentence-transformers computes them ---------------------------------------


def test_flops_and_active_dims_equal_sentence_transformers(encoder):
    from sentence_transformers.util.tensor import compute_count_vector

    library = encoder.document_model
    doc_texts = [f"{t} {x}".strip() for t, x in TEXTS]
    q = library.encode_query(QUERIES, convert_to_sparse_tensor=True)
    d = library.encode_document(doc_texts, convert_to_sparse_tensor=True)
    # SparseInformationRetrievalEvaluator._calculate_avg_flops, on one batch each.
    want_flops = float(
        torch.dot(compute_count_vector(q) / len(QUERIES), compute_count_vector(d) / len(TEXTS))
    )
    stats = sparsity_stats(to_csr(q), [to_csr(d)[:3], to_csr(d)[3:]], encoder.vocab)
    assert stats["avg_flops"] == want_flops
    assert stats["query_active_dims"] == pytest.approx(library.sparsity(q)["active_dims"])
    assert stats["corpus_sparsity_ratio"] == pytest.approx(library.sparsity(d)["sparsity_ratio"])


# ---- pyserini impacts ---------------------------------------------------------------------------------


def test_pyserini_impacts_against_hand_worked_values():
    weights = scipy.sparse.csr_matrix(np.array([[1.0, 2.5, 0.0078125, 0.048828125, 3.0]], dtype=np.float32))
    # round(w / 5 * 256): 51.2 -> 51, 128 -> 128, 0.4 -> 0 (dropped), 2.5 -> 2 (half to even), 153.6 -> 154
    np.testing.assert_array_equal(dense(quantize_impacts(weights, 256 / 5)), [[51, 128, 0, 2, 154]])
    # anserini's factor 100: 100, 250, 0.78 -> 1, 4.88 -> 5, 300
    np.testing.assert_array_equal(dense(quantize_impacts(weights, 100)), [[100, 250, 1, 5, 300]])
    assert quantize_impacts(weights, 256 / 5).nnz == 4


# ---- cache: sparse shards, corrupt ones rebuilt -------------------------------------------------------


def count_encodes(encoder, monkeypatch) -> list[int]:
    calls: list[int] = []
    original = SparseTextEncoder.encode_documents

    def counting(self, docs):
        calls.append(len(docs))
        return original(self, docs)

    monkeypatch.setattr(SparseTextEncoder, "encode_documents", counting)
    return calls


def test_sparse_shards_are_cached_checked_and_a_corrupt_one_rebuilt(encoder, tmp_path, monkeypatch, caplog):
    cache, dataset = SparseCache(tmp_path), TinyDataset()
    calls = count_encodes(encoder, monkeypatch)
    first = cache.corpus(dataset, encoder, shard_size=3)
    assert sum(calls) == 7 and len(first.shards) == 3
    again = cache.corpus(dataset, encoder, shard_size=3)
    assert sum(calls) == 7 and again.rebuilt == []
    values = sparse_shard_files(first.directory, 1)["values"]
    values.write_bytes(values.read_bytes()[:-4] + b"\x00\x00\x80\x7f")  # same size, other bytes
    with caplog.at_level(logging.WARNING):
        rebuilt = cache.corpus(dataset, encoder, shard_size=3)
    assert rebuilt.rebuilt == [1] and sum(calls) == 10
    assert "sha256 differs" in caplog.text and "encoded again" in caplog.text
    for (ids_a, a), (ids_b, b) in zip(first.shards, rebuilt.shards, strict=True):
        assert ids_a == ids_b and (a != b).nnz == 0


# ---- the retriever ------------------------------------------------------------------------------------


def test_the_retriever_ranks_exactly_and_reports_sparsity(encoder, tmp_path):
    dataset = TinyDataset()
    retriever = SparseRetriever(
        dataset, encoder, RetrievalSettings(top_k=3), SparseCache(tmp_path), shard_size=4
    )
    run, details = retriever.retrieve()
    documents = encoder.encode_documents(dataset.docs)
    want = brute_force(encoder.encode_queries(QUERIES), documents, [d.id for d in dataset.docs], 3)
    assert [list(run[f"q{i}"]) for i in range(len(QUERIES))] == [[d for d, _ in row] for row in want]
    assert details["sparse_index"] == {"index": "exact"}
    assert details["sparsity"]["corpus_active_dims"] == pytest.approx(documents.nnz / len(TEXTS))
    assert details["encoder_settings"]["doc_max_length"] == 32


def test_pyserini_impacts_rank_by_integer_impacts(splade_dirs, tmp_path):
    impacts = SparseTextEncoder.load(sparse_model(splade_dirs["splade"], params={"pyserini_impacts": True}))
    run, _ = SparseRetriever(
        TinyDataset(), impacts, RetrievalSettings(top_k=3), SparseCache(tmp_path)
    ).retrieve()
    scores = [score for hits in run.values() for score in hits.values()]
    assert scores and all(score == int(score) for score in scores)


def test_seismic_records_its_settings_and_recall_against_exact(tmp_path):
    pytest.importorskip("seismic")
    from harness.retrieval.sparse import build_seismic_index, seismic_search

    rng = np.random.default_rng(0)
    documents = scipy.sparse.random(2000, 300, density=0.05, random_state=1, format="csr", dtype=np.float32)
    queries = scipy.sparse.random(30, 300, density=0.03, random_state=2, format="csr", dtype=np.float32)
    documents.data, queries.data = (
        rng.random(documents.nnz, dtype=np.float32),
        rng.random(queries.nnz, dtype=np.float32),
    )
    doc_ids = [f"d{i}" for i in range(2000)]
    shards = [(doc_ids, documents)]
    exact = exact_sparse_search(queries, shards, 10).doc_ids
    generous = SeismicSpec(n_postings=2000, summary_energy=1.0, query_cut=300, heap_factor=1.0)
    found = seismic_search(
        build_seismic_index(shards, generous), queries, [f"q{i}" for i in range(30)], 10, generous
    )
    assert recall_against_exact([[d for d, _ in row] for row in found], exact, 10) == 1.0
    stingy = SeismicSpec(n_postings=20, query_cut=1, heap_factor=0.1)
    lossy = seismic_search(
        build_seismic_index(shards, stingy), queries, [f"q{i}" for i in range(30)], 10, stingy
    )
    assert recall_against_exact([[d for d, _ in row] for row in lossy], exact, 10) < 1.0


def test_the_retriever_with_seismic_reports_recall(encoder, tmp_path):
    pytest.importorskip("seismic")
    spec = SeismicSpec(recall_sample=2)
    run, details = SparseRetriever(
        TinyDataset(), encoder, RetrievalSettings(top_k=3), SparseCache(tmp_path), index=spec
    ).retrieve()
    index = details["sparse_index"]
    assert index["index"] == "seismic" and index["query_cut"] == 10 and index["recall_sample"] == 2
    assert 0.0 <= index["recall_vs_exact"]["recall@10"] <= 1.0 and set(run) == {f"q{i}" for i in range(4)}


def test_a_bad_param_in_a_user_record_names_its_file(tmp_path, monkeypatch):
    from harness.models.model_registry import model_registry

    folder = tmp_path / "config" / "models"
    folder.mkdir(parents=True)
    bad = folder / "my-splade.yaml"
    bad.write_text(
        "name: my-splade\nmodel_id: x/y\nkind: sparse\nparams: {max_active_dims: -3}\n", encoding="utf-8"
    )
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(tmp_path / "config"))
    record = model_registry()["my-splade"]
    with pytest.raises(HarnessError, match=rf"^{bad}: params: max_active_dims: .*greater than 0"):
        sparse_params(record)


def test_max_lengths_enter_the_cache_key(splade_dirs, encoder, tmp_path):
    short = SparseTextEncoder.load(sparse_model(splade_dirs["splade"], params={"doc_max_length": 8}))
    cache, dataset = SparseCache(tmp_path), TinyDataset()
    full_corpus, short_corpus = cache.corpus(dataset, encoder), cache.corpus(dataset, short)
    assert full_corpus.directory != short_corpus.directory
    longest = max(range(len(TEXTS)), key=lambda i: len(TEXTS[i][1]))
    assert (full_corpus.shards[0][1][longest] != short_corpus.shards[0][1][longest]).nnz > 0


def test_identical_ids_are_dropped_when_the_dataset_says_so(encoder, tmp_path):
    dataset = TinyDataset(queries={"d0": QUERIES[0]}, drop_identical_ids=True)
    run, _ = SparseRetriever(dataset, encoder, RetrievalSettings(top_k=3), SparseCache(tmp_path)).retrieve()
    assert "d0" not in run["d0"] and len(run["d0"]) == 3


def test_a_separate_query_encoder_encodes_the_queries(splade_dirs, encoder):
    params = {"query_encoder": str(splade_dirs["free"]), "inference_free_query": True}
    split = SparseTextEncoder.load(sparse_model(splade_dirs["splade"], params=params))
    want = split.query_model.encode_query(QUERIES, convert_to_sparse_tensor=False)
    np.testing.assert_allclose(dense(split.encode_queries(QUERIES)), want.numpy(), atol=1e-6, rtol=0)
    docs = TinyDataset().docs
    assert (split.encode_documents(docs) != encoder.encode_documents(docs)).nnz == 0
    assert split.settings()["query_encoder"] == str(splade_dirs["free"])
