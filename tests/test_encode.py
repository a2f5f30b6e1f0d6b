"""Encoders against hand computations on a tiny random BERT, plus one real-model check."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from tiny_bert import tiny_record

from harness.core.errors import HarnessError
from harness.datasets.beir import Document
from harness.encoding.encoder import pick_device
from harness.encoding.runtime_choice import build_encoder
from harness.models.model_registry import ModelRecord, find_record
from harness.models.resolve import resolve_model, resolve_record

TEXTS = [
    "what is the role of the immune cells in cancer ?",
    "dna",
    "a study of protein levels in human blood and the effect of treatment on patients with high risk "
    "of disease , with results for mouse models and human data analysis methods",
    "gene",
    "virus and bacteria",
]


def _hand_vectors(
    folder: Path, texts: list[str], pooling: str, max_length: int, normalize: bool
) -> np.ndarray:
    """Pool the raw transformers output by hand: the reference every encoder must equal."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state.numpy()
    mask = batch["attention_mask"].numpy()
    rows = []
    for tokens, keep in zip(hidden, mask, strict=True):
        real = tokens[keep == 1]
        if pooling == "mean":
            rows.append(real.mean(axis=0))
        elif pooling == "cls":
            rows.append(tokens[0])
        else:  # last real token (right padding)
            rows.append(real[-1])
    vectors = np.stack(rows).astype(np.float32)
    if normalize:
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


@pytest.mark.parametrize("pooling", ["mean", "cls", "last"])
@pytest.mark.parametrize("normalize", [False, True])
def test_transformers_backend_pooling_matches_hand_computation(
    tiny_bert_dir: Path, pooling: str, normalize: bool
):
    record = tiny_record(tiny_bert_dir, pooling=pooling, normalize=normalize, query_prefix="query: ")
    encoder = build_encoder(resolve_record(record), device="cpu", batch_size=2)
    got = encoder.encode_queries(TEXTS)
    want = _hand_vectors(tiny_bert_dir, [f"query: {t}" for t in TEXTS], pooling, 16, normalize)
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), 32)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    norms = np.linalg.norm(got, axis=1)
    if normalize:
        np.testing.assert_allclose(norms, 1.0, atol=1e-6)
    else:
        assert not np.allclose(norms, 1.0, atol=1e-3)
    # Different modes really differ (the long text is truncated and padded differently per mode).
    if pooling != "mean":
        mean = _hand_vectors(tiny_bert_dir, [f"query: {t}" for t in TEXTS], "mean", 16, normalize)
        assert not np.allclose(got, mean, atol=1e-3)


def test_document_text_joins_title_like_beir_and_adds_prefix(tiny_bert_dir: Path):
    record = tiny_record(tiny_bert_dir, doc_prefix="passage: ", max_length=32)
    encoder = build_encoder(resolve_record(record), device="cpu", batch_size=4)
    docs = [
        Document("d1", "Immune cells", "  They fight cancer. "),
        Document("d2", "", "dna and rna"),
        Document("d3", "Virus", ""),
    ]
    texts = [encoder.document_text(doc) for doc in docs]
    # beir: (title + " " + text).strip() -- outer whitespace goes, inner whitespace stays.
    assert texts == ["passage: Immune cells   They fight cancer.", "passage: dna and rna", "passage: Virus"]
    np.testing.assert_allclose(
        encoder.encode_documents(docs), _hand_vectors(tiny_bert_dir, texts, "mean", 32, False), atol=1e-5
    )


def test_contriever_record_gives_unnormalised_mean_pooled_dot_scores(tiny_bert_dir: Path):
    contriever = find_record("contriever")
    record = contriever.model_copy(update={"model_id": str(tiny_bert_dir), "max_length": 24})
    encoder = build_encoder(resolve_record(record), device="cpu", batch_size=3)
    queries = ["immune cells in cancer", "virus"]
    docs = [Document(f"d{i}", f"title {i}", text) for i, text in enumerate(TEXTS)]
    scores = encoder.encode_queries(queries) @ encoder.encode_documents(docs).T

    q = _hand_vectors(tiny_bert_dir, queries, "mean", 24, normalize=False)
    d = _hand_vectors(
        tiny_bert_dir, [f"title {i} {t}".strip() for i, t in enumerate(TEXTS)], "mean", 24, False
    )
    np.testing.assert_allclose(scores, q @ d.T, rtol=1e-5, atol=1e-5)
    cosine = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (d / np.linalg.norm(d, axis=1, keepdims=True)).T
    assert not np.allclose(scores, cosine, atol=1e-3)  # dot of raw vectors, not cosine
    assert encoder.settings()["precision"] == "float32"  # half precision is for GPUs only


def test_sentence_transformers_backend_matches_sentence_transformers(tiny_st_dir: Path, tiny_bert_dir: Path):
    from sentence_transformers import SentenceTransformer

    encoder = build_encoder(resolve_model(str(tiny_st_dir)), device="cpu", batch_size=2)
    got = encoder.encode_queries(TEXTS)
    reference = SentenceTransformer(str(tiny_st_dir), device="cpu").encode(TEXTS, batch_size=2)
    np.testing.assert_allclose(got, reference, atol=1e-6)
    np.testing.assert_allclose(
        got, _hand_vectors(tiny_bert_dir, TEXTS, "mean", 48, normalize=True), atol=1e-5
    )
    assert encoder.dim == 32


def test_record_max_length_overrides_the_folder(tiny_st_dir: Path, tiny_bert_dir: Path):
    model = resolve_model(str(tiny_st_dir))
    short = dataclasses.replace(model, record=model.record.model_copy(update={"max_length": 8}))
    got = build_encoder(short, device="cpu").encode_queries(TEXTS)
    np.testing.assert_allclose(got, _hand_vectors(tiny_bert_dir, TEXTS, "mean", 8, normalize=True), atol=1e-5)
    assert build_encoder(short, device="cpu").settings() != build_encoder(model, device="cpu").settings()


def test_record_that_contradicts_the_model_folder_is_refused(tiny_st_dir: Path):
    wrong = tiny_record(tiny_st_dir, kind="sentence-transformers", pooling="cls", normalize=True)
    encoder = build_encoder(resolve_record(wrong), device="cpu")
    with pytest.raises(HarnessError) as error:
        encoder.encode_queries(["dna"])
    assert "pooling=cls" in str(error.value) and "\n" not in str(error.value)


def test_chunked_encoding_keeps_input_order_and_reports_progress(tiny_bert_dir: Path):
    class Counter:
        total = 0

        def update(self, n: int) -> None:
            self.total += n

    rng = np.random.default_rng(0)
    words = ["cell", "protein", "gene", "virus", "cancer", "blood", "brain", "study", "effect", "risk"]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 12)))) for _ in range(70)]
    encoder = build_encoder(resolve_record(tiny_record(tiny_bert_dir)), device="cpu", batch_size=2)
    counter = Counter()
    together = encoder.encode_texts(texts, progress=counter)  # 70 texts = 3 chunks of up to 32
    one_by_one = np.concatenate([encoder.encode_texts([text]) for text in texts])
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)
    assert counter.total == len(texts)
    assert encoder.encode_texts([]).shape == (0, 32)


def test_model_loads_lazily_and_bad_folder_fails_in_one_line(tmp_path: Path, tiny_bert_dir: Path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert"}', encoding="utf-8")
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    encoder = build_encoder(resolve_record(tiny_record(folder)), device="cpu")
    assert encoder.settings()["max_length"] == 16  # settings need no model
    with pytest.raises(HarnessError) as error:
        encoder.encode_queries(["dna"])
    assert str(error.value).startswith("could not load model tiny") and "\n" not in str(error.value)


def test_pick_device(monkeypatch: pytest.MonkeyPatch):
    import torch

    assert pick_device("cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device(None) in ("cpu", "mps")
    with pytest.raises(HarnessError, match="no CUDA GPU"):
        pick_device("cuda")
    with pytest.raises(HarnessError, match="unknown device 'tpu'"):
        pick_device("tpu")


def test_encoder_refuses_bad_arguments(tiny_bert_dir: Path):
    with pytest.raises(HarnessError, match="batch size"):
        build_encoder(resolve_record(tiny_record(tiny_bert_dir)), batch_size=0)
    bm25 = ModelRecord(name="bm25", kind="bm25")
    with pytest.raises(HarnessError, match="no dense encoder"):
        build_encoder(resolve_record(bm25))


@pytest.mark.slow
def test_real_minilm_matches_sentence_transformers():
    from sentence_transformers import SentenceTransformer

    model = resolve_model("sentence-transformers/all-MiniLM-L6-v2")
    encoder = build_encoder(model, device="cpu", batch_size=8)
    sentences = [
        "Vitamin D deficiency is associated with increased risk of tuberculosis.",
        "What causes the immune system to attack healthy cells?",
        "0-dimensional biomaterials show inductive properties.",
        "A short one.",
    ]
    docs = [Document("a", "Tuberculosis", sentences[0]), Document("b", "", sentences[1])]
    reference = SentenceTransformer(model.source, device="cpu")
    np.testing.assert_allclose(encoder.encode_queries(sentences), reference.encode(sentences), atol=1e-6)
    np.testing.assert_allclose(
        encoder.encode_documents(docs),
        reference.encode([f"Tuberculosis {sentences[0]}", sentences[1]]),
        atol=1e-6,
    )
    assert encoder.dim == 384 and reference.max_seq_length == 256
