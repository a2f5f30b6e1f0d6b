"""Model records say how a model is prompted: mteb's resolution order, instruction templates, the model
folder's own config when the record is silent, and the resolved texts in the settings and cache key."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tiny_bert import build_tiny_prompted_sentence_transformer, tiny_record

from harness.core.errors import HarnessError, InputError
from harness.datasets.mteb_tasks import load_mteb_tasks
from harness.encoding.embedding_cache import EmbeddingCache
from harness.encoding.runtime_choice import build_encoder
from harness.models import prompts as prompts_module
from harness.models.model_registry import ModelRecord, load_record
from harness.models.prompts import FolderPrompts, bind_prompts, bind_record, folder_prompts, resolve_prompts
from harness.models.resolve import resolve_model, resolve_record

ALL_NAMES = {
    "SciFact-query": "scifact query: ",
    "SciFact": "scifact: ",
    "Retrieval-query": "retrieval query: ",
    "Retrieval": "retrieval: ",
    "query": "query: ",
    "document": "passage: ",
}


def _record(**fields) -> ModelRecord:
    return ModelRecord(name="prompted", model_id="x", **fields)


def _resolved(record: ModelRecord, dataset: str | None, folder: FolderPrompts | None = None) -> dict:
    return resolve_prompts(record, dataset, folder or FolderPrompts())["prompts"]


def test_query_prompt_is_resolved_in_mteb_order_and_the_matched_name_recorded():
    prompts = dict(ALL_NAMES)
    expected_order = ["SciFact-query", "SciFact", "Retrieval-query", "Retrieval", "query"]
    for name in expected_order:
        resolved = _resolved(_record(prompts=prompts), "scifact")
        assert resolved["query"] == {"text": ALL_NAMES[name], "key": name}
        del prompts[name]
    assert _resolved(_record(prompts=prompts), "scifact")["query"] == {"text": "", "key": None}


def test_document_prompt_skips_query_names_and_other_tasks():
    prompts = {"SciFact-query": "claim: ", "NFCorpus-document": "nf: ", "Retrieval-document": "doc: "}
    resolved = _resolved(_record(prompts=prompts), "scifact")
    assert resolved["document"] == {"text": "doc: ", "key": "Retrieval-document"}
    assert _resolved(_record(prompts=prompts), "nfcorpus")["document"]["key"] == "NFCorpus-document"
    # A dataset with no MTEB task has only the plain role names to go by.
    assert _resolved(_record(prompts=prompts), "no-such-dataset")["document"] == {"text": "", "key": None}


def test_prefixes_are_shorthands_for_the_role_prompts():
    record = _record(query_prefix="query: ", doc_prefix="passage: ")
    resolved = _resolved(record, "scifact")
    assert resolved == {
        "query": {"text": "query: ", "key": "query"},
        "document": {"text": "passage: ", "key": "document"},
    }
    with pytest.raises(ValueError, match="query_prefix 'q: ' and prompts.query 'query: ' disagree"):
        _record(query_prefix="q: ", prompts={"query": "query: "})


def test_instruction_template_is_filled_with_the_datasets_instruction_on_queries_only():
    template = "Instruct: {instruction}\nQuery:"
    record = _record(instruction_template=template, prompts={"document": ""})
    resolved = _resolved(record, "scifact")
    instruction = load_mteb_tasks().datasets["scifact"].instruction
    assert instruction == "Given a scientific claim, retrieve documents that support or refute the claim"
    assert resolved["query"] == {"text": f"Instruct: {instruction}\nQuery:", "key": "instruction_template"}
    assert resolved["document"] == {"text": "", "key": "document"}
    nfcorpus = _resolved(record, "nfcorpus")["query"]["text"]
    assert nfcorpus == template.format(instruction=load_mteb_tasks().datasets["nfcorpus"].instruction)


def test_bound_settings_carry_the_exact_prompt_text_and_change_the_cache_key(tiny_bert_dir, tmp_path):
    from harness.datasets.beir import load_dataset

    folder = tmp_path / "set"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "dna"}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "gene"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    dataset = load_dataset(folder, "test")

    def bound(**fields):
        model = resolve_record(tiny_record(tiny_bert_dir, **fields))
        return bind_prompts(model, "scifact")

    claim = bound(prompts={"SciFact-query": "claim: ", "query": "query: "})
    plain = bound(prompts={"query": "query: "})
    settings = claim.record.vector_settings()
    assert settings["query_prefix"] == "claim: "
    assert settings["prompt_keys"] == {"query": "SciFact-query"}
    assert plain.record.vector_settings()["query_prefix"] == "query: "
    assert "prompt_keys" not in plain.record.vector_settings()  # plain role names: older keys unchanged

    cache = EmbeddingCache(tmp_path / "cache")
    keys = {
        name: cache.queries_key_inputs(dataset, build_encoder(model, device="cpu", runtime="torch"))
        for name, model in (("claim", claim), ("plain", plain))
    }
    assert keys["claim"]["settings"]["query_prefix"] == "claim: "
    assert keys["claim"] != keys["plain"]
    # The Matryoshka dimension is a view of the cached vectors: not part of the key.
    cut = bound(prompts={"query": "query: "}, truncate_dim=16)
    assert cut.record.vector_settings()["truncate_dim"] == 16
    encoder = build_encoder(cut, device="cpu", runtime="torch")
    assert cache.queries_key_inputs(dataset, encoder) == keys["plain"]


def test_include_prompt_and_padding_are_settings_when_not_the_default():
    record = _record(include_prompt=False, padding_side="left", pooling="last", truncate_dim=[256, 64])
    settings = record.vector_settings()
    assert settings["include_prompt"] is False
    assert settings["padding_side"] == "left"
    assert settings["truncate_dim"] == [256, 64]
    assert "include_prompt" not in _record().vector_settings()


def test_record_silent_takes_the_model_folders_prompts_and_pooling(tiny_bert_dir, tmp_path):
    folder = build_tiny_prompted_sentence_transformer(
        tmp_path / "st", tiny_bert_dir, prompts={"query": "query: ", "passage": "passage: "}
    )
    record = ModelRecord(name="silent", model_id=str(folder), max_length=48)
    bound = bind_record(record, "scifact", folder)
    resolved = bound.resolved_prompts
    assert resolved["source"] == "config_sentence_transformers.json"
    assert resolved["include_prompt"] is False  # the folder's Pooling config
    assert resolved["prompts"]["query"] == {"text": "query: ", "key": "query"}
    # sentence-transformers saves an empty "document" prompt beside ours, and encode_document tries
    # document, passage, corpus in that order: so does the harness.
    assert resolved["prompts"]["document"] == {"text": "", "key": "document"}
    assert FolderPrompts({"query": "q: ", "passage": "p: "}).role_prompt("document") == ("p: ", "passage")
    assert FolderPrompts({"corpus": "c: "}, "corpus").role_prompt("query") == ("c: ", "corpus")


def test_a_record_contradicting_the_model_config_warns_once_naming_both(tiny_bert_dir, tmp_path, caplog):
    folder = build_tiny_prompted_sentence_transformer(
        tmp_path / "st", tiny_bert_dir, prompts={"query": "query: ", "document": "passage: "}
    )
    prompts_module.warn_once.cache_clear()
    record = ModelRecord(
        name="contradicts", model_id=str(folder), query_prefix="search_query: ", include_prompt=True
    )
    with caplog.at_level(logging.WARNING, logger="harness.models.prompts"):
        for _ in range(3):
            bound = bind_record(record, "scifact", folder)
    assert bound.resolved_prompts["prompts"]["query"]["text"] == "search_query: "  # the record wins
    assert bound.resolved_prompts["include_prompt"] is True
    messages = [r.getMessage() for r in caplog.records]
    query_warnings = [m for m in messages if "query prompt" in m]
    assert len(query_warnings) == 1
    assert "'search_query: '" in query_warnings[0] and "'query: '" in query_warnings[0]
    assert "contradicts" in query_warnings[0] and "config_sentence_transformers.json" in query_warnings[0]
    assert len([m for m in messages if "include_prompt" in m]) == 1


def test_unrecorded_folder_runs_with_its_own_prompts(tiny_bert_dir, tmp_path):
    folder = build_tiny_prompted_sentence_transformer(
        tmp_path / "st", tiny_bert_dir, prompts={"query": "query: ", "document": "passage: "}
    )
    model = bind_prompts(resolve_model(str(folder)), "scifact")
    encoder = build_encoder(model, device="cpu", runtime="torch")
    assert encoder.query_text("gene") == "query: gene"
    assert encoder.settings()["include_prompt"] is False


# ---- bad input: one line each -------------------------------------------------------------------


def _write_record(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(
        "name: m\nmodel_id: x\npooling: mean\nnormalize: true\nsimilarity: cosine\nmax_length: 64\n" + extra
    )
    return path


@pytest.mark.parametrize(
    ("extra", "wanted"),
    [
        ("prompts:\n  qurey: 'query: '\n", "unknown prompt name 'qurey'"),
        ("prompts:\n  SciFac: 'x'\n", "unknown prompt name 'SciFac'"),
        ("instruction_template: 'Instruct: x'\n", "lacks the {instruction} placeholder"),
        ("truncate_dim: [64, 64]\n", "repeats a dimension"),
        ("truncate_dim: 0\n", "truncate_dim"),
        ("padding_side: middle\n", "padding_side 'middle'"),
        ("resolved_prompts: {}\n", "resolved_prompts is set by the harness"),
    ],
)
def test_bad_prompt_settings_are_one_line_naming_the_file(tmp_path, extra, wanted):
    path = _write_record(tmp_path, extra)
    with pytest.raises(InputError) as caught:
        load_record(path)
    message = str(caught.value)
    assert wanted in message and str(path) in message
    assert "\n" not in message


def test_good_prompt_settings_load(tmp_path):
    path = _write_record(
        tmp_path,
        "prompts:\n  query: 'q: '\n  SciFact-query: 'claim: '\n  Retrieval: 'r: '\n"
        'instruction_template: "Instruct: {instruction}\\nQuery:"\ninclude_prompt: false\n'
        "padding_side: left\ntruncate_dim: [256, 128]\nsources: [https://example.org/card]\n",
    )
    record = load_record(path)
    assert record.truncate_dims == (256, 128)
    assert record.instruction_template == "Instruct: {instruction}\nQuery:"
    assert record.sources == ("https://example.org/card",)


def test_default_prompt_name_naming_no_prompt_is_one_line(tiny_bert_dir, tmp_path):
    folder = build_tiny_prompted_sentence_transformer(
        tmp_path / "st", tiny_bert_dir, prompts={"query": "query: "}, default_prompt_name="retrieval"
    )
    with pytest.raises(HarnessError) as caught:
        folder_prompts(folder)
    message = str(caught.value)
    assert "default_prompt_name 'retrieval' names no prompt (prompts: document, query)" in message
    assert "config_sentence_transformers.json" in message and "\n" not in message


def test_diff_names_a_prompt_difference_between_two_results():
    """``harness diff`` reads the model settings of each result's config: the resolved prompt texts."""
    from harness.results.result_store import StoredResult
    from harness.results.settings_diff import protocol_diff, result_protocol

    def stored(record: ModelRecord) -> StoredResult:
        config = {"model": {"settings": bind_record(record, "scifact", None).vector_settings()}}
        return StoredResult(Path("r"), "scifact", "test", record.name, "m", {}, {}, 0, {}, {"config": config})

    claim = stored(_record(prompts={"SciFact-query": "claim: ", "query": "query: "}))
    plain = stored(_record(prompts={"query": "query: "}))
    differences = {
        d.setting: (d.a, d.b)
        for d in protocol_diff(result_protocol(claim), result_protocol(plain)).differences
    }
    assert differences["query prefix"] == ("claim: ", "query: ")


def test_diff_names_prompt_pooling_and_matryoshka_differences():
    """Every prompt setting that reaches the vectors is a setting ``harness diff`` names."""
    from harness.results.result_store import StoredResult
    from harness.results.settings_diff import protocol_diff, result_protocol

    def stored(record: ModelRecord) -> StoredResult:
        config = {"model": {"settings": bind_record(record, "scifact", None).vector_settings()}}
        return StoredResult(Path("r"), "scifact", "test", record.name, "m", {}, {}, 0, {}, {"config": config})

    task = stored(_record(prompts={"SciFact-query": "claim: "}, include_prompt=False, truncate_dim=64))
    plain = stored(_record(prompts={"query": "claim: "}))
    differences = {
        d.setting: (d.a, d.b)
        for d in protocol_diff(result_protocol(task), result_protocol(plain)).differences
    }
    assert "query prefix" not in differences  # the same text, matched under another name
    assert differences["prompt tokens in pooling"][0] is False
    assert differences["Matryoshka dimension"][0] == 64
    assert "prompt names (as mteb resolves them)" in differences
