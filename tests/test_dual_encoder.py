"""Dual encoders (DPR): a record's ``query_model_id`` encodes the queries, its ``model_id`` the documents.

Two different tiny random BERTs are built at test time as sentence-transformers folders (CLS pooling,
no normalisation, as the DPR ports): the harness's query vectors equal the query model's own
``SentenceTransformer.encode`` and its document vectors the document model's, and both equal beir's
``SentenceBERT((query model, document model))``. Each side's cache key names its own model only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from tiny_bert import HIDDEN, _st_module_classes, build_tiny_bert_with_words

from harness.cli import main
from harness.core.errors import HarnessError
from harness.encoding.embedding_cache import EmbeddingCache, document_identity
from harness.encoding.runtime_choice import build_encoder
from harness.models.identity import folder_identity
from harness.models.model_registry import load_record
from harness.models.prompts import bind_prompts
from harness.models.resolve import resolve_model
from harness.results.result_store import load_result

QUERIES = ["what is the role of dna in cancer", "protein level increase", "gene", "immune cells virus"]
DOCS = [
    ("Cell study", "the effect of treatment on patients with disease"),
    ("", "gene dna rna"),
    ("Results", "high risk of tumor in human brain cells and blood levels of the immune protein"),
]
TOLERANCE = 1e-6
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class Doc:
    def __init__(self, title: str, text: str):
        self.title, self.text = title, text


def _cls_sentence_transformer(folder: Path, bert_folder: Path, dense_to: int | None = None) -> Path:
    """A DPR-like sentence-transformers folder: Transformer -> CLS Pooling (-> Dense), no Normalize."""
    import torch
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import Dense
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Dense
    transformer_cls, pooling_cls, _ = _st_module_classes()
    modules = [transformer_cls(str(bert_folder), max_seq_length=48), pooling_cls(HIDDEN, pooling_mode="cls")]
    if dense_to is not None:
        torch.manual_seed(3)
        modules.append(Dense(HIDDEN, dense_to))
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    return folder


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict[str, Path]:
    """Two different tiny BERTs (query, document), and a query model with 16-d vectors."""
    root = tmp_path_factory.mktemp("dual")
    query_bert = build_tiny_bert_with_words(root / "query-bert", seed=11)
    document_bert = build_tiny_bert_with_words(root / "document-bert", seed=12)
    return {
        "query": _cls_sentence_transformer(root / "query-st", query_bert),
        "document": _cls_sentence_transformer(root / "document-st", document_bert),
        "other_query": _cls_sentence_transformer(root / "other-query-st", document_bert),
        "narrow_query": _cls_sentence_transformer(root / "narrow-query-st", query_bert, dense_to=16),
    }


def _write_record(config: Path, name: str, document: str | Path, query: str | Path | None, **extra) -> Path:
    models = config / "models"
    models.mkdir(parents=True, exist_ok=True)
    lines = [
        f"name: {name}",
        f"model_id: {document}",
        *([f"query_model_id: {query}"] if query is not None else []),
        "kind: sentence-transformers",
        "pooling: cls",
        "normalize: false",
        "similarity: dot",
        "max_length: 48",
        *[f"{key}: {value}" for key, value in extra.items()],
    ]
    path = models / f"{name}.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture()
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary HARNESS_CONFIG_DIR, and no hub: models come from folders or a temporary hub cache."""
    import huggingface_hub.constants

    config = tmp_path / "config"
    config.mkdir()
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(config))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    return config


def _st(folder: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu")


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


# ---- the record ------------------------------------------------------------------------------------


def test_the_dpr_record_names_both_encoders() -> None:
    from harness.models.model_registry import find_record

    record = find_record("dpr")
    assert record is not None and find_record("dpr-multiset") == record
    assert record.model_id == "sentence-transformers/facebook-dpr-ctx_encoder-multiset-base"
    assert record.query_model_id == "sentence-transformers/facebook-dpr-question_encoder-multiset-base"
    assert (record.pooling, record.normalize, record.similarity) == ("cls", False, "dot")
    assert record.query_side().model_id == record.query_model_id
    assert record.query_side().pooling == "cls"


def test_query_revision_without_query_model_is_one_line(tmp_path: Path) -> None:
    path = _write_record(tmp_path, "half", "owner/doc", None, query_revision=COMMIT)
    with pytest.raises(HarnessError) as error:
        load_record(path)
    message = _one_line(error)
    assert "query_revision" in message and "query_model_id" in message and str(path) in message


def test_a_query_model_on_a_lexical_record_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lexical.yaml"
    path.write_text("name: lex\nkind: bm25\nquery_model_id: owner/query\n", encoding="utf-8")
    with pytest.raises(HarnessError) as error:
        load_record(path)
    assert "query_model_id is for dense kinds" in _one_line(error)


# ---- parity ------------------------------------------------------------------------------------------


def test_queries_and_documents_use_their_own_model(config_dir, model_dirs, tmp_path) -> None:
    _write_record(config_dir, "tiny-dpr", model_dirs["document"], model_dirs["query"])
    model = resolve_model("tiny-dpr")
    encoder = build_encoder(model, device="cpu", runtime="torch", cache_dir=tmp_path / "cache", batch_size=2)
    queries = encoder.encode_queries(QUERIES)
    documents = encoder.encode_documents([Doc(title, text) for title, text in DOCS])
    doc_texts = [f"{title} {text}".strip() for title, text in DOCS]

    query_model, document_model = _st(model_dirs["query"]), _st(model_dirs["document"])
    assert np.abs(queries - query_model.encode(QUERIES)).max() < TOLERANCE
    assert np.abs(documents - document_model.encode(doc_texts)).max() < TOLERANCE
    # The two models really differ: a one-model encoder would fail the lines above.
    assert np.abs(queries - document_model.encode(QUERIES)).max() > 1e-3

    # beir's two-model SentenceBERT (its tuple: query model, document model) gives the same vectors.
    from beir.retrieval.models import SentenceBERT

    beir_model = SentenceBERT((str(model_dirs["query"]), str(model_dirs["document"])), device="cpu")
    beir_queries = beir_model.encode_queries(QUERIES, batch_size=2, convert_to_tensor=False)
    corpus = [{"title": title, "text": text} for title, text in DOCS]
    beir_documents = beir_model.encode_corpus(corpus, batch_size=2, convert_to_tensor=False)
    assert np.abs(queries - np.asarray(beir_queries)).max() < TOLERANCE
    assert np.abs(documents - np.asarray(beir_documents)).max() < TOLERANCE

    # Both identities are the model's: the query model's inside its identity.
    assert (
        model.identity["query_model"]["weights_hash"] == folder_identity(model_dirs["query"])["weights_hash"]
    )
    assert model.identity["weights_hash"] == folder_identity(model_dirs["document"])["weights_hash"]
    assert encoder.describe()["query_encoder"]["runtime"] == "torch"


def test_prompt_binding_keeps_the_query_model(config_dir, model_dirs, tmp_path) -> None:
    _write_record(config_dir, "tiny-dpr", model_dirs["document"], model_dirs["query"])
    bound = bind_prompts(resolve_model("tiny-dpr"), "scifact")
    encoder = build_encoder(bound, device="cpu", runtime="torch", cache_dir=tmp_path / "cache")
    assert Path(encoder.query_side().model.source) == model_dirs["query"].resolve()
    assert (
        np.abs(encoder.encode_queries(QUERIES) - _st(model_dirs["query"]).encode(QUERIES)).max() < TOLERANCE
    )


def test_a_query_model_is_found_in_the_hub_cache_offline(config_dir, model_dirs, tmp_path) -> None:
    snapshot = tmp_path / "hf-cache" / "models--owner--tiny-question" / "snapshots" / COMMIT
    shutil.copytree(model_dirs["query"], snapshot)
    _write_record(config_dir, "tiny-dpr", model_dirs["document"], "owner/tiny-question")
    model = resolve_model("tiny-dpr")
    assert model.query_side().source == str(snapshot)
    assert model.identity["query_model"]["model_id"] == "owner/tiny-question"
    assert model.identity["query_model"]["revision"] == COMMIT


def test_a_missing_query_model_is_one_offline_line_naming_it(config_dir, model_dirs) -> None:
    _write_record(config_dir, "tiny-dpr", model_dirs["document"], "nobody/missing-question-encoder")
    with pytest.raises(HarnessError) as error:
        resolve_model("tiny-dpr")
    message = _one_line(error)
    assert "nobody/missing-question-encoder" in message and "HF_HUB_OFFLINE" in message
    assert "query model of record tiny-dpr" in message and "--weights" not in message


def test_query_and_document_models_of_different_sizes_are_one_line(config_dir, model_dirs) -> None:
    _write_record(config_dir, "tiny-dpr", model_dirs["document"], model_dirs["narrow_query"])
    with pytest.raises(HarnessError) as error:
        resolve_model("tiny-dpr")
    message = _one_line(error)
    assert "16-d" in message and f"{HIDDEN}-d" in message and "tiny-dpr" in message


# ---- cache keys ----------------------------------------------------------------------------------------


class _Dataset:
    """Just what the cache keys read of a dataset."""

    name, split, num_docs = "tinyset", "test", 3

    def fingerprint(self) -> dict[str, str]:
        return {"corpus.jsonl": "c0ffee", "queries.jsonl": "beef", "qrels/test.tsv": "f00d"}


def _keys(name: str, tmp_path: Path) -> tuple[str, str]:
    from harness.core.cache import digest_of

    cache = EmbeddingCache(tmp_path / "cache")
    encoder = build_encoder(resolve_model(name), device="cpu", runtime="torch", cache_dir=tmp_path / "cache")
    dataset = _Dataset()
    return cache.corpus_key(dataset, encoder, 100), digest_of(cache.queries_key_inputs(dataset, encoder))


def test_each_side_keys_its_own_model(config_dir, model_dirs, tmp_path) -> None:
    keys = {}
    for label, document, query in [
        ("one-model", "document", None),
        ("a", "document", "query"),
        ("b", "document", "other_query"),  # another query model
        ("c", "query", "query"),  # another document model
    ]:
        _write_record(config_dir, "tiny-dpr", model_dirs[document], query and model_dirs[query])
        keys[label] = _keys("tiny-dpr", tmp_path)
    (one_corpus, one_queries), (a_corpus, a_queries) = keys["one-model"], keys["a"]
    (b_corpus, b_queries), (c_corpus, c_queries) = keys["b"], keys["c"]
    # Another query model (or none): the same corpus entry, other query vectors.
    assert a_corpus == b_corpus == one_corpus and len({a_queries, b_queries, one_queries}) == 3
    # Another document model: the same query entry, another corpus.
    assert a_queries == c_queries and a_corpus != c_corpus


def test_a_one_model_record_builds_one_encoder(config_dir, model_dirs, tmp_path) -> None:
    _write_record(config_dir, "one-model", model_dirs["document"], None)
    model = resolve_model("one-model")
    encoder = build_encoder(model, device="cpu", runtime="torch", cache_dir=tmp_path / "cache")
    assert encoder.query_encoder is None and encoder.query_side() is encoder
    assert model.query is None and model.query_side() is model and "query_model" not in model.identity
    assert document_identity(model.identity) == model.identity
    assert "query_encoder" not in encoder.describe()


# ---- end to end ----------------------------------------------------------------------------------------


def _tiny_beir(root: Path) -> Path:
    folder = root / "tinyset"
    (folder / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": title, "text": text} for i, (title, text) in enumerate(DOCS)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    queries = [{"_id": f"q{i}", "text": text} for i, text in enumerate(QUERIES)]
    (folder / "queries.jsonl").write_text("".join(json.dumps(query) + "\n" for query in queries))
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq0\td1\t1\nq1\td2\t1\nq2\td1\t1\n"
    )
    return folder


@pytest.mark.slow
def test_eval_with_a_dual_encoder_record(config_dir, model_dirs, tmp_path, capsys) -> None:
    _write_record(config_dir, "tiny-dpr", model_dirs["document"], model_dirs["query"])
    results = tmp_path / "results"
    args = ["eval", "--dataset", str(_tiny_beir(tmp_path)), "--model", "tiny-dpr", "--no-progress"]
    args += ["--results-dir", str(results), "--cache-dir", str(tmp_path / "cache"), "--runtime", "torch"]
    assert main(args) == 0, capsys.readouterr().err
    (dataset_dir,) = results.iterdir()
    (folder,) = [path for path in dataset_dir.iterdir() if path.is_dir()]
    identity = load_result(folder).provenance["model"]["identity"]
    assert identity["weights_hash"] == folder_identity(model_dirs["document"])["weights_hash"]
    assert identity["query_model"]["weights_hash"] == folder_identity(model_dirs["query"])["weights_hash"]

    # The run's scores are the query model's query vectors dotted with the document model's documents.
    queries = _st(model_dirs["query"]).encode(QUERIES)
    documents = _st(model_dirs["document"]).encode([f"{title} {text}".strip() for title, text in DOCS])
    for line in (folder / "run.trec").read_text().splitlines():
        if line.startswith("#"):
            continue
        qid, _, docid, _, score, _ = line.split()
        expected = float(queries[int(qid[1:])] @ documents[int(docid[1:])])
        assert float(score) == pytest.approx(expected, abs=1e-4)
