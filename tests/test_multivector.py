"""Late interaction (issue 28, multivector half): token vectors, exact MaxSim, re-ranking, PLAID settings.

Parity is against sentence-transformers' ``MultiVectorEncoder`` (which loads PyLate checkpoints; PyLate
itself pins sentence-transformers 5.3 and cannot be installed here) on a tiny random ColBERT built at
test time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from harness.core.errors import HarnessError, InputError
from harness.core.ranking import sorted_ranking
from harness.encoding.multivector import (
    TokenMatrices,
    TokenVectorCache,
    TokenVectorEncoder,
    multivector_params,
    read_token_shard,
)
from harness.models.model_registry import ModelRecord, find_record
from harness.models.resolve import resolve_record
from harness.retrieval import multivector as mv

QUERY_LENGTH = 12
DOCUMENT_LENGTH = 24
PARAMS = {
    "query_prefix": "[Q] ",
    "document_prefix": "[D] ",
    "query_length": QUERY_LENGTH,
    "document_length": DOCUMENT_LENGTH,
    "embedding_size": 8,
}
TEXTS = [
    ("d1", "cell biology", "the cell is a protein with dna and rna"),
    ("d2", "", "cancer tumor immune blood"),
    ("d3", "brain", "brain study of mouse model data"),
    ("d4", "", "virus bacteria in human patients"),
    ("d5", "risk", "high risk of disease increase in patients with treatment"),
    ("d6", "", "gene genes expression level levels"),
    ("d7", "method", "analysis method methods results effect"),
    ("d8", "cell biology", "the cell is a protein with dna and rna"),  # same as d1: tied scores
]
QUERIES = {"q1": "what is the role of the cell protein", "q2": "cancer risk in patients", "q3": "brain model"}


@dataclass
class Doc:
    id: str
    title: str
    text: str


@dataclass
class TinyDataset:
    name: str = "tiny-colbert-set"
    split: str = "test"
    queries: dict[str, str] = field(default_factory=lambda: dict(QUERIES))
    qrels: dict = field(default_factory=dict)
    excluded_ids: dict = field(default_factory=dict)
    drop_identical_ids: bool = False

    @property
    def num_docs(self) -> int:
        return len(TEXTS)

    def fingerprint(self) -> dict[str, str]:
        return {"corpus.jsonl": "c0ffee", "queries.jsonl": "beef"}

    def iter_documents(self, start=None):
        return iter(Doc(*row) for row in TEXTS)

    def shard_starts(self, shard_size):
        return None


@pytest.fixture(scope="module")
def colbert_dir(tmp_path_factory) -> Path:
    from tiny_bert import build_tiny_bert_with_words, build_tiny_multivector_encoder

    root = tmp_path_factory.mktemp("colbert")
    bert = build_tiny_bert_with_words(root / "bert")
    return build_tiny_multivector_encoder(
        root / "colbert", bert, query_length=QUERY_LENGTH, document_length=DOCUMENT_LENGTH
    )


def colbert_record(folder: Path, **params) -> ModelRecord:
    return ModelRecord(
        name="tiny-colbert", model_id=str(folder), kind="multivector", params={**PARAMS, **params}
    )


@pytest.fixture(scope="module")
def encoder(colbert_dir) -> TokenVectorEncoder:
    return TokenVectorEncoder(resolve_record(colbert_record(colbert_dir)), source="tiny.yaml")


@pytest.fixture(scope="module")
def library(colbert_dir):
    from sentence_transformers import MultiVectorEncoder

    return MultiVectorEncoder(str(colbert_dir), device="cpu", local_files_only=True)


def texts() -> list[str]:
    return [f"{title} {text}".strip() for _, title, text in TEXTS]


def test_token_vectors_equal_the_library_encode(encoder, library):
    ours_q = encoder.encode_queries(list(QUERIES.values()))
    ours_d = encoder.encode_documents([Doc(*row) for row in TEXTS])
    theirs_q = library.encode_query(list(QUERIES.values()), convert_to_numpy=True)
    theirs_d = library.encode_document(texts(), convert_to_numpy=True)
    for mine, reference in zip([*ours_q, *ours_d], [*theirs_q, *theirs_d], strict=True):
        assert mine.shape == reference.shape
        np.testing.assert_allclose(mine, reference, atol=1e-6, rtol=0)
    # Mask-token expansion pads every query to query_length; documents stop at document_length.
    assert {matrix.shape[0] for matrix in ours_q} == {QUERY_LENGTH}
    assert max(matrix.shape[0] for matrix in ours_d) <= DOCUMENT_LENGTH
    assert ours_q[0].shape[1] == 8


def test_query_expansion_can_be_switched_off(colbert_dir, encoder):
    plain = TokenVectorEncoder(
        resolve_record(colbert_record(colbert_dir, do_query_expansion=False)), source="x"
    )
    short = plain.encode_queries(["brain model"])[0]
    assert short.shape[0] < QUERY_LENGTH
    assert encoder.encode_queries(["brain model"])[0].shape[0] == QUERY_LENGTH
    assert plain.settings()["params"]["do_query_expansion"] is False  # in the cache key and provenance


def test_maxsim_equals_the_library_similarity(encoder, library):
    queries = TokenMatrices.from_list(encoder.encode_queries(list(QUERIES.values())), 8)
    documents = TokenMatrices.from_list(encoder.encode_documents([Doc(*row) for row in TEXTS]), 8)
    ours = mv.maxsim_scores(queries, documents)
    theirs = library.similarity(
        library.encode_query(list(QUERIES.values())), library.encode_document(texts())
    ).numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)
    # Hand-checked definition for one pair: sum over query tokens of the max dot product.
    q, d = queries.matrix(1), documents.matrix(4)
    assert ours[1, 4] == pytest.approx(float((q @ d.T).max(axis=1).sum()), abs=1e-5)


def brute_force_run(encoder, k: int) -> dict[str, dict[str, float]]:
    queries = TokenMatrices.from_list(encoder.encode_queries(list(QUERIES.values())), 8)
    documents = TokenMatrices.from_list(encoder.encode_documents([Doc(*row) for row in TEXTS]), 8)
    scores = mv.maxsim_scores(queries, documents)
    run = {}
    for row, qid in enumerate(QUERIES):
        everything = {doc_id: float(scores[row, i]) for i, (doc_id, _, _) in enumerate(TEXTS)}
        run[qid] = dict(sorted_ranking(everything)[:k])
    return run


@pytest.mark.parametrize("chunk_elements", [1, 40, 10_000_000])
def test_exact_search_over_shards_equals_brute_force(tmp_path, encoder, chunk_elements):
    dataset = TinyDataset()
    cache = TokenVectorCache(tmp_path)
    corpus = cache.corpus(dataset, encoder, shard_size=3)
    assert corpus.num_shards == 3
    query_ids, queries = cache.queries(dataset, encoder)
    for k in (1, 4, 8, 50):
        scores, names = mv.exact_search(queries, corpus, k, chunk_elements=chunk_elements)
        run = mv.to_run(query_ids, scores, names, k, drop_identical_ids=False)
        expected = brute_force_run(encoder, k)
        for qid in QUERIES:
            assert list(run[qid]) == list(expected[qid])
            np.testing.assert_allclose(list(run[qid].values()), list(expected[qid].values()), atol=1e-5)
    # d1 and d8 hold the same text, so they tie: trec_eval puts the larger id (d8) first.
    full = mv.to_run(
        query_ids,
        *mv.exact_search(queries, corpus, 8, chunk_elements=chunk_elements),
        8,
        drop_identical_ids=False,
    )
    order = list(full["q1"])
    assert full["q1"]["d1"] == full["q1"]["d8"]
    assert order.index("d8") == order.index("d1") - 1


def test_ties_break_by_document_id_descending():
    best = mv.RunningTopK(1, 3)
    ranks = mv.id_ranks(["a", "c", "b", "d"])
    best.add(np.array([0]), np.array([[1.0, 1.0]], np.float32), np.array([0, 1]), ranks[[0, 1]])
    best.add(np.array([0]), np.array([[1.0, 2.0]], np.float32), np.array([2, 3]), ranks[[2, 3]])
    assert best.positions.tolist() == [[3, 1, 2]]  # d (2.0), then c, b (1.0, larger id first); a cut


def test_corrupt_shard_is_rebuilt_with_a_warning_and_never_scored(tmp_path, encoder, caplog):
    dataset = TinyDataset()
    cache = TokenVectorCache(tmp_path)
    corpus = cache.corpus(dataset, encoder, shard_size=3)
    _, good = read_token_shard(corpus.directory, 1, fix="x", mmap=False)
    vectors_path = corpus.directory / "shard-00001.npy"
    data = bytearray(vectors_path.read_bytes())
    data[-4:] = b"\x00\x00\x80\x7f"  # the last value becomes +inf: a changed shard
    vectors_path.write_bytes(bytes(data))
    with pytest.raises(HarnessError, match="sha256 differs"):
        list(corpus.shards())  # a search never reads it
    with caplog.at_level(logging.WARNING):
        rebuilt = cache.corpus(dataset, encoder, shard_size=3)
    assert "shard-00001.npy" in caplog.text and "encoded again" in caplog.text
    _, again = read_token_shard(rebuilt.directory, 1, fix="x")
    np.testing.assert_array_equal(np.asarray(again.vectors), np.asarray(good.vectors))


def test_maxsim_rerank_of_a_first_stage_run(tmp_path, colbert_dir):
    dataset = TinyDataset()
    model = resolve_record(colbert_record(colbert_dir))
    retriever = mv.MultivectorRetriever(
        dataset, model, mv.MultivectorSettings(cache_dir=tmp_path, shard_size=4)
    )
    first_stage = {"q2": {"d1": 9.0, "d2": 8.0, "d5": 7.0, "d6": 6.0, "d7": 5.0}, "q3": {"d3": 1.0}}
    reranked, details = retriever.rerank(first_stage, depth=3)
    brute = brute_force_run(retriever.encoder, 8)
    for doc_id in ("d1", "d2", "d5"):
        assert reranked["q2"][doc_id] == pytest.approx(brute["q2"][doc_id], abs=1e-5)
    order = [doc_id for doc_id, _ in sorted_ranking(reranked["q2"])]
    head = sorted(["d1", "d2", "d5"], key=lambda d: (brute["q2"][d], d), reverse=True)
    assert order == [*head, "d6", "d7"]  # below the depth: first-stage order, under the head
    assert details["depth"] == 3


def test_retriever_runs_exact_and_records_settings(tmp_path, colbert_dir, encoder):
    model = resolve_record(colbert_record(colbert_dir))
    settings = mv.MultivectorSettings(cache_dir=tmp_path, top_k=5, shard_size=5, chunk_elements=64)
    run, details = mv.MultivectorRetriever(TinyDataset(), model, settings).retrieve()
    expected = brute_force_run(encoder, 5)
    assert {qid: list(docs) for qid, docs in run.items()} == {qid: list(d) for qid, d in expected.items()}
    assert details["index"] == {"kind": "exact"}
    assert details["encoder_settings"]["params"]["query_length"] == QUERY_LENGTH


# ---- bad input: one line each ----------------------------------------------------------------------


def test_a_multivector_record_without_markers_is_one_line():
    record = ModelRecord(name="nomark", model_id="x", kind="multivector", params={"query_length": 32})
    with pytest.raises(InputError) as error:
        multivector_params(record, "models/nomark.yaml")
    message = str(error.value)
    assert "\n" not in message and "models/nomark.yaml" in message and "params.query_prefix" in message


def test_bad_params_name_the_key():
    record = ModelRecord(name="bad", model_id="x", kind="multivector", params={**PARAMS, "query_lenght": 3})
    with pytest.raises(InputError, match=r"bad.yaml: params: unknown key 'query_lenght'"):
        multivector_params(record, "bad.yaml")
    record = ModelRecord(name="bad", model_id="x", kind="multivector", params={**PARAMS, "library": "pylate"})
    with pytest.raises(InputError, match="use library: sentence-transformers"):
        multivector_params(record, "bad.yaml")


def test_a_token_budget_the_model_cannot_take_is_one_line(colbert_dir):
    too_long = TokenVectorEncoder(
        resolve_record(colbert_record(colbert_dir, document_length=100)), source="m.yaml"
    )
    with pytest.raises(InputError) as error:
        too_long.encode_documents([Doc("d", "", "cell")])
    assert str(error.value) == (
        "m.yaml: params.document_length 100 is more tokens than model tiny-colbert can take (64 positions) "
        "(set document_length to at most 64)"
    )


def test_a_wrong_embedding_size_is_one_line(colbert_dir):
    wrong = TokenVectorEncoder(
        resolve_record(colbert_record(colbert_dir, embedding_size=128)), source="m.yaml"
    )
    with pytest.raises(InputError, match="embedding_size 128 but model tiny-colbert outputs 8-dim"):
        _ = wrong.dim


# ---- PLAID settings and what an index loses -----------------------------------------------------------


def test_index_specs():
    assert mv.parse_multivector_index("Flat").exact
    spec = mv.parse_multivector_index("plaid,nbits=2,n_ivf_probe=16,recall_sample=50")
    assert (spec.kind, spec.nbits, spec.n_ivf_probe, spec.recall_sample) == ("plaid", 2, 16, 50)
    assert spec.describe()["library"] == "fast-plaid"
    with pytest.raises(HarnessError, match="not an index for a multivector model"):
        mv.parse_multivector_index("HNSW32")
    with pytest.raises(HarnessError, match="unknown parameter 'nprobe=3'"):
        mv.parse_multivector_index("plaid,nprobe=3")
    with pytest.raises(HarnessError, match="nbits must be from 1 to 8, got 9"):
        mv.parse_multivector_index("plaid,nbits=9")


def test_fast_plaid_build_must_match_torch(monkeypatch):
    assert mv.fast_plaid_torch_version("1.7.0.2110") == "2.11.0"
    assert mv.fast_plaid_torch_version("1.4.6.271") == "2.7.1"
    assert mv.fast_plaid_torch_version("1.2.0") is None
    import torch

    monkeypatch.setattr(mv.importlib.metadata, "version", lambda name: "1.7.0.270")
    if torch.__version__.startswith("2.7.0"):
        pytest.skip("this torch is the build's")
    with pytest.raises(HarnessError, match=r"fast-plaid 1.7.0.270 is built for torch 2.7.0") as error:
        mv.check_fast_plaid()
    assert "\n" not in str(error.value)


def test_plaid_is_checked_before_any_encoding(tmp_path, colbert_dir, monkeypatch):
    def refuse():
        raise HarnessError("no fast-plaid here")

    monkeypatch.setattr(mv, "check_fast_plaid", refuse)
    model = resolve_record(colbert_record(colbert_dir))
    settings = mv.MultivectorSettings(cache_dir=tmp_path, index="plaid,nbits=2")
    with pytest.raises(HarnessError, match="no fast-plaid here"):
        mv.MultivectorRetriever(TinyDataset(), model, settings)
    assert not any(tmp_path.iterdir())  # nothing encoded


def test_recall_against_exact_by_hand():
    exact = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"x": 1.0, "y": 0.5}}
    approximate = {"q1": {"a": 3.0, "c": 1.0, "z": 0.1}, "q2": {"y": 0.5}}
    assert mv.recall_against_exact(exact, approximate, 2) == pytest.approx((1 / 2 + 1 / 2) / 2)
    assert mv.recall_against_exact(exact, approximate, 3) == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert mv.recall_against_exact(exact, exact, 3) == 1.0
    assert mv.query_sample(["a", "b", "c"], 5) == [0, 1, 2]
    sample = mv.query_sample([str(i) for i in range(100)], 10)
    assert len(sample) == 10 and sample == sorted(sample) == mv.query_sample([str(i) for i in range(100)], 10)


# ---- the shipped records -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model_id", "query_length", "document_length", "size"),
    [
        ("colbertv2.0", "colbert-ir/colbertv2.0", 32, 180, 128),
        ("gte-moderncolbert-v1", "lightonai/GTE-ModernColBERT-v1", 32, 300, 128),
        ("answerai-colbert-small-v1", "answerdotai/answerai-colbert-small-v1", 32, 300, 96),
    ],
)
def test_shipped_colbert_records(name, model_id, query_length, document_length, size):
    record = find_record(name)
    assert record is not None and record.is_multivector and record.model_id == model_id and record.sources
    params = multivector_params(record)
    assert params.query_prefix.strip() and params.document_prefix.strip()
    assert (params.query_length, params.document_length, params.embedding_size) == (
        query_length,
        document_length,
        size,
    )
