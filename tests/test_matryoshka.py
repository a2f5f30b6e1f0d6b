"""Matryoshka from one encode: every dimension searched over the full-size vectors cut to it, the model
called once, each dimension's metrics equal to encoding with sentence-transformers' truncate_dim."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest
from tiny_bert import WORDS, build_tiny_bert_with_words, build_tiny_sentence_transformer

from harness.core.errors import HarnessError
from harness.datasets.beir import load_dataset
from harness.encoding.embedding_cache import EmbeddingCache
from harness.encoding.runtime_choice import build_encoder
from harness.evaluation.metrics import evaluate
from harness.models.resolve import resolve_model
from harness.retrieval.dense import parse_index_spec
from harness.retrieval.matryoshka import dimension_models, dimension_runs

DIMS = (32, 16, 8)  # 32: the tiny model's full size
METRICS = ["ndcg@10", "recall@10", "map@10"]
TOP_K = 10


@pytest.fixture(scope="module")
def st_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("models")
    bert = build_tiny_bert_with_words(root / "bert")
    return build_tiny_sentence_transformer(root / "st", bert)  # mean pooling + Normalize


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory) -> Path:
    """60 documents and 12 queries of the tiny vocabulary, each query judged against 3 documents."""
    rng = random.Random(7)
    folder = tmp_path_factory.mktemp("data") / "matryoshka"
    (folder / "qrels").mkdir(parents=True)
    docs = [(f"d{i}", " ".join(rng.choices(WORDS[:60], k=rng.randint(4, 20)))) for i in range(60)]
    queries = [(f"q{i}", " ".join(rng.choices(WORDS[:60], k=rng.randint(2, 6)))) for i in range(12)]
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n" for i, t in docs)
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries)
    )
    lines = ["query-id\tcorpus-id\tscore"]
    for qid, _ in queries:
        lines += [f"{qid}\t{doc_id}\t{rng.randint(1, 2)}" for doc_id, _ in rng.sample(docs, 3)]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return folder


def _count_forward_texts(encoder) -> list[int]:
    """Texts through the model's transformer, one entry per forward pass."""
    passes: list[int] = []
    encoder.load()[0].register_forward_hook(
        lambda module, args, output: passes.append(len(args[0]["input_ids"]))
    )
    return passes


def _sentence_transformers_run(st_dir: Path, dataset, dim: int) -> dict[str, dict[str, float]]:
    """The reference: sentence-transformers encodes at ``truncate_dim``, exact cosine search."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(st_dir), device="cpu")
    doc_ids, texts = zip(*[(doc.id, doc.text) for doc in dataset.iter_documents()], strict=True)
    query_ids = list(dataset.queries)
    docs = st.encode_document(list(texts), truncate_dim=dim, normalize_embeddings=True)
    queries = st.encode_query(
        [dataset.queries[q] for q in query_ids], truncate_dim=dim, normalize_embeddings=True
    )
    scores = queries @ docs.T
    run = {}
    for row, qid in enumerate(query_ids):
        best = np.argsort(-scores[row], kind="stable")[:TOP_K]
        run[qid] = {doc_ids[i]: float(scores[row, i]) for i in best}
    return run


def test_every_dimension_from_one_encode_equals_sentence_transformers_truncate_dim(
    st_dir, dataset_dir, tmp_path
):
    dataset = load_dataset(dataset_dir, "test")
    encoder = build_encoder(resolve_model(str(st_dir)), device="cpu", runtime="torch", batch_size=8)
    passes = _count_forward_texts(encoder)
    cache = EmbeddingCache(tmp_path / "cache")
    result = dimension_runs(
        dataset, encoder, cache, DIMS, top_k=TOP_K, spec=parse_index_spec("Flat"), drop_identical_ids=False
    )
    # The model saw every document and every query once, whatever the number of dimensions.
    assert sum(passes) == dataset.num_docs + len(dataset.queries)
    assert sorted(result.runs) == sorted(DIMS) and result.full_dim == 32

    metrics = {}
    for dim in DIMS:
        ours = evaluate(dataset.qrels, result.runs[dim], METRICS).aggregate
        theirs = evaluate(dataset.qrels, _sentence_transformers_run(st_dir, dataset, dim), METRICS).aggregate
        for name in METRICS:
            assert ours[name] == pytest.approx(theirs[name], abs=1e-12), (dim, name)
        metrics[dim] = ours
    # The dimensions are different results: cutting the vectors moves the numbers.
    assert len({round(values["ndcg@10"], 9) for values in metrics.values()}) > 1


def test_one_model_per_dimension_shares_one_cached_encode(st_dir, dataset_dir, tmp_path):
    """What the pipeline runs for --truncate-dim 32 16 8: a model (and result identity) per dimension, the
    corpus and queries encoded by the first and found in the cache by the others."""
    dataset = load_dataset(dataset_dir, "test")
    cache = EmbeddingCache(tmp_path / "cache")
    models = dimension_models(resolve_model(str(st_dir)), (8, 32, 16))
    assert [model.record.truncate_dim for model in models] == [32, 16, 8]
    assert len({json.dumps(model.record.vector_settings(), sort_keys=True) for model in models}) == 3
    total = 0
    keys = set()
    for model in models:
        encoder = build_encoder(model, device="cpu", runtime="torch", batch_size=8)
        corpus = cache.corpus(dataset, encoder, progress=False)
        _, queries = cache.queries(dataset, encoder)
        if encoder.loaded.weights.st_model is not None:
            total += dataset.num_docs + len(dataset.queries)
        assert corpus.dim == queries.shape[1] == model.record.truncate_dim
        assert np.allclose(
            np.linalg.norm(queries, axis=1), 1.0, atol=1e-6
        )  # re-normalised: the model normalises
        keys.add(corpus.key)
    assert len(keys) == 1  # one cache entry: the full-size vectors
    assert total == dataset.num_docs + len(dataset.queries)  # only the first model was ever loaded


def test_a_record_list_gives_one_model_per_dimension(st_dir):
    model = resolve_model(str(st_dir))
    listed = dataclasses.replace(model, record=model.record.model_copy(update={"truncate_dim": (16, 8)}))
    assert [m.record.truncate_dim for m in dimension_models(listed)] == [16, 8]
    assert dimension_models(model) == [model]
    with pytest.raises(HarnessError, match="distinct positive"):
        dimension_models(model, (16, 16))


def test_a_dimension_larger_than_the_model_is_one_line_before_encoding(st_dir, dataset_dir, tmp_path):
    dataset = load_dataset(dataset_dir, "test")
    (model,) = dimension_models(resolve_model(str(st_dir)), (64,))
    encoder = build_encoder(model, device="cpu", runtime="torch", batch_size=8)
    passes = _count_forward_texts(encoder)
    with pytest.raises(HarnessError) as caught:
        EmbeddingCache(tmp_path / "cache").corpus(dataset, encoder, progress=False)
    message = str(caught.value)
    assert "truncate_dim 64 is larger than model" in message and "dimension 32" in message
    assert "\n" not in message and passes == []
