"""Parity on models built at test time: the harness's query and document vectors (its real encoder path,
``build_encoder``) equal sentence-transformers' ``encode_query``/``encode_document`` and mteb's own
wrapper, with prompts kept out of pooling (``include_prompt=False``), last-token pooling with left
padding, and Matryoshka ``truncate_dim``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tiny_bert import (
    build_tiny_bert_with_words,
    build_tiny_decoder,
    build_tiny_decoder_sentence_transformer,
    build_tiny_prompted_sentence_transformer,
)

from harness.core.errors import HarnessError
from harness.encoding.embedding_cache import truncate_vectors
from harness.encoding.runtime_choice import build_encoder
from harness.models.model_registry import ModelRecord
from harness.models.prompts import bind_prompts
from harness.models.resolve import resolve_model, resolve_record

PROMPTS = {"query": "query: ", "document": "passage: "}
QUERIES = [
    "what is the role of dna in cancer",
    "protein level increase",
    "how do immune cells study the virus in mouse model data analysis",
    "gene",
    "a high risk of disease in human patients with low blood levels",
]
DOCS = [
    ("Cell study", "the effect of treatment on patients with disease"),
    ("", "gene dna rna"),
    ("Results", "high risk of tumor in human brain cells and blood levels of the immune protein"),
    ("Virus", "bacteria"),
]
TOLERANCE = 1e-6


class Doc:
    def __init__(self, title: str, text: str):
        self.title, self.text = title, text


def _doc_texts() -> list[str]:
    return [f"{title} {text}".strip() for title, text in DOCS]


@pytest.fixture(scope="module")
def worded_bert_dir(tmp_path_factory) -> Path:
    """The tiny BERT with a tokenizer that knows its words (prompts must be told apart)."""
    return build_tiny_bert_with_words(tmp_path_factory.mktemp("models") / "worded-bert")


@pytest.fixture(scope="module")
def prompted_st_dir(tmp_path_factory, worded_bert_dir: Path) -> Path:
    folder = tmp_path_factory.mktemp("models") / "prompted-st"
    return build_tiny_prompted_sentence_transformer(
        folder, worded_bert_dir, prompts=PROMPTS, include_prompt=False
    )


@pytest.fixture(scope="module")
def decoder_dirs(tmp_path_factory, worded_bert_dir: Path) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("models")
    decoder = build_tiny_decoder(root / "decoder", worded_bert_dir)
    return decoder, build_tiny_decoder_sentence_transformer(root / "decoder-st", decoder)


def _st(folder: Path, **kwargs):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu", **kwargs)


@pytest.mark.parametrize("runtime", ["torch", pytest.param("onnx", marks=pytest.mark.slow)])
def test_include_prompt_false_equals_sentence_transformers(prompted_st_dir, runtime, tmp_path):
    model = bind_prompts(resolve_model(str(prompted_st_dir)), "scifact")
    encoder = build_encoder(model, device="cpu", runtime=runtime, batch_size=2, cache_dir=tmp_path)
    queries, docs = encoder.encode_queries(QUERIES), encoder.encode_documents([Doc(*d) for d in DOCS])

    st = _st(prompted_st_dir)
    np.testing.assert_allclose(queries, st.encode_query(QUERIES), atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(docs, st.encode_document(_doc_texts()), atol=TOLERANCE, rtol=0)
    # The prompt's tokens really are left out: pooling them in gives other vectors.
    st.set_pooling_include_prompt(True)
    assert np.abs(queries - st.encode_query(QUERIES)).max() > 1e-3


def test_truncate_dim_equals_sentence_transformers(prompted_st_dir, tmp_path):
    """The harness cuts full-size vectors (encoded once) as sentence-transformers' truncate_dim does."""
    model = bind_prompts(resolve_model(str(prompted_st_dir)), "scifact")
    encoder = build_encoder(model, device="cpu", runtime="torch", batch_size=2, cache_dir=tmp_path)
    full = encoder.encode_queries(QUERIES)
    st = _st(prompted_st_dir)
    for dim in (8, 16):
        for normalize in (False, True):
            theirs = st.encode_query(QUERIES, truncate_dim=dim, normalize_embeddings=normalize)
            np.testing.assert_allclose(truncate_vectors(full, dim, normalize), theirs, atol=TOLERANCE, rtol=0)


def _decoder_record(folder: Path, kind: str) -> ModelRecord:
    return ModelRecord(
        name=f"tiny-decoder-{kind}",
        model_id=str(folder),
        kind=kind,
        pooling="last",
        padding_side="left",
        normalize=True,
        similarity="cosine",
        max_length=48,
        prompts={"query": "query: "},
    )


@pytest.mark.parametrize(
    ("kind", "runtime"),
    [
        ("sentence-transformers", "torch"),
        ("transformers", "torch"),
        pytest.param("sentence-transformers", "onnx", marks=pytest.mark.slow),
    ],
)
def test_last_token_pooling_with_left_padding_equals_sentence_transformers(
    decoder_dirs, kind, runtime, tmp_path
):
    decoder, decoder_st = decoder_dirs
    record = _decoder_record(decoder_st if kind == "sentence-transformers" else decoder, kind)
    model = bind_prompts(resolve_record(record), "scifact")
    encoder = build_encoder(model, device="cpu", runtime=runtime, batch_size=2, cache_dir=tmp_path)
    assert encoder.load().tokenizer.padding_side == "left"
    queries, docs = encoder.encode_queries(QUERIES), encoder.encode_documents([Doc(*d) for d in DOCS])

    st = _st(decoder_st, prompts={"query": "query: "})
    st.tokenizer.padding_side = "left"
    np.testing.assert_allclose(queries, st.encode_query(QUERIES, batch_size=3), atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(docs, st.encode_document(_doc_texts(), batch_size=3), atol=TOLERANCE, rtol=0)


def test_a_decoder_without_a_pad_token_is_one_line(worded_bert_dir, tmp_path):
    decoder = build_tiny_decoder(tmp_path / "no-pad", worded_bert_dir, pad_token=False)
    model = resolve_record(_decoder_record(decoder, "transformers"))
    encoder = build_encoder(model, device="cpu", runtime="torch")
    with pytest.raises(HarnessError) as caught:
        encoder.encode_queries(["gene"])
    message = str(caught.value)
    assert "tokenizer has no pad token" in message and "tiny-decoder-transformers" in message
    assert "\n" not in message


# ---- mteb's own wrapper ------------------------------------------------------------------------------


def _mteb_vectors(st, texts: list[str], prompt_type, model_prompts: dict[str, str]) -> np.ndarray:
    mteb = pytest.importorskip("mteb", reason="mteb is not installed (pip install 'beir-harness[mteb]')")
    from mteb.models.sentence_transformer_wrapper import SentenceTransformerEncoderWrapper
    from torch.utils.data import DataLoader

    wrapper = SentenceTransformerEncoderWrapper(st, model_prompts=model_prompts)
    from datasets import Dataset  # mteb's own dependency

    loader = DataLoader(Dataset.from_dict({"text": texts}), batch_size=4)
    metadata = mteb.get_task("SciFact").metadata
    vectors = wrapper.encode(
        loader, task_metadata=metadata, hf_split="test", hf_subset="default", prompt_type=prompt_type
    )
    return np.asarray(vectors, dtype=np.float32)


def test_equal_to_mtebs_wrapper_with_a_task_specific_prompt(prompted_st_dir, beir_mirror, tmp_path):
    """mteb resolves ``SciFact-query`` before ``query``; the harness's record resolves it the same way."""
    pytest.importorskip("mteb", reason="mteb is not installed (pip install 'beir-harness[mteb]')")
    from mteb.types import PromptType

    from harness.datasets.beir import load_dataset

    scifact = load_dataset(beir_mirror / "scifact", "test")
    queries = [scifact.queries[qid] for qid in list(scifact.queries)[:24]]
    documents = [doc for _, doc in zip(range(24), scifact.iter_documents(), strict=False)]
    prompts = {"SciFact-query": "claim: ", **PROMPTS}
    record = ModelRecord(
        name="tiny-prompted",
        model_id=str(prompted_st_dir),
        pooling="mean",
        normalize=False,
        similarity="cosine",
        max_length=48,
        prompts=prompts,
        include_prompt=False,
    )
    model = bind_prompts(resolve_record(record), "scifact")
    assert model.record.vector_settings()["prompt_keys"] == {"query": "SciFact-query", "document": "document"}
    encoder = build_encoder(model, device="cpu", runtime="torch", batch_size=8, cache_dir=tmp_path)
    st = _st(prompted_st_dir)
    theirs_queries = _mteb_vectors(st, queries, PromptType.query, prompts)
    document_texts = [f"{doc.title} {doc.text}".strip() for doc in documents]
    theirs_docs = _mteb_vectors(st, document_texts, PromptType.document, prompts)
    np.testing.assert_allclose(encoder.encode_queries(queries), theirs_queries, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(encoder.encode_documents(documents), theirs_docs, atol=TOLERANCE, rtol=0)
    # and the task prompt is really used: the plain query prompt gives other vectors
    plain = _mteb_vectors(st, queries, PromptType.query, PROMPTS)
    assert np.abs(plain - theirs_queries).max() > 1e-3
