"""``harness check-model``: the record against the model folder's own files (and mteb), and ``--probe``."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.api.check_model_commands import check_model
from harness.models.preflight import preflight, read_folder_config
from harness.models.resolve import resolve_model


def _write_record(config_dir: Path, name: str, folder: Path, **settings: object) -> None:
    values = {
        "name": name,
        "model_id": str(folder),
        "kind": "sentence-transformers",
        "pooling": "mean",
        "normalize": True,
        "similarity": "cosine",
        "max_length": 48,
        **settings,
    }
    lines = [
        f"{key}: {value!r}" if isinstance(value, str) else f"{key}: {value}" for key, value in values.items()
    ]
    models = config_dir / "models"
    models.mkdir(parents=True, exist_ok=True)
    (models / f"{name}.yaml").write_text(
        "\n".join(line.replace("True", "true").replace("False", "false") for line in lines) + "\n",
        encoding="utf-8",
    )


@pytest.fixture()
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, beir_mirror: Path) -> Path:
    folder = tmp_path / "config"
    folder.mkdir()
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(folder))
    monkeypatch.setenv("HARNESS_BEIR_MIRROR", str(beir_mirror))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return folder


def test_folder_config_reads_what_sentence_transformers_saved(tiny_st_dir: Path) -> None:
    config = read_folder_config(tiny_st_dir)
    assert (config.pooling, config.normalize, config.max_length) == ("mean", True, 48)
    assert config.prompt("query") == "" and config.include_prompt is True


def test_every_disagreement_is_listed_with_both_sides(config_dir: Path, tiny_st_dir: Path) -> None:
    _write_record(config_dir, "tiny-wrong", tiny_st_dir, query_prefix="query: ", pooling="cls", max_length=32)
    found = preflight(resolve_model("tiny-wrong"), "scifact")
    disagreeing = {check.setting: check for check in found.disagreements}
    assert set(disagreeing) == {"query prompt", "pooling", "max length"}
    assert disagreeing["query prompt"].record == "query: " and disagreeing["query prompt"].alternative == ""
    assert disagreeing["pooling"].changes == {"pooling": "mean"}
    assert disagreeing["max length"].changes == {"max_length": 48}
    agreeing = {check.setting for check in found.checks if check.agrees}
    assert {"document prompt", "normalize", "drop identical ids"} <= agreeing
    assert any("no ModelMeta" in note or "not installed" in note for note in found.notes)


def test_command_names_the_disagreement_and_exits_1(config_dir: Path, tiny_st_dir: Path) -> None:
    _write_record(config_dir, "tiny-wrong", tiny_st_dir, query_prefix="query: ")
    result = check_model(model="tiny-wrong", dataset="scifact")
    assert result.exit_code == 1
    text = result.render()
    assert "query prompt" in text and "DISAGREE" in text and "'query: '" in text
    assert result.messages == [
        "warning: query prompt: the record says 'query: ', model config_sentence_transformers.json says ''"
    ]
    assert result.payload()["disagreements"] == ["query prompt"]


def test_a_record_that_follows_its_folder_passes(config_dir: Path, tiny_st_dir: Path) -> None:
    _write_record(config_dir, "tiny-right", tiny_st_dir)
    result = check_model(model="tiny-right", dataset="scifact", probe=3)
    assert result.exit_code == 0 and not result.probes  # nothing to measure
    assert "no disagreement" in result.render()


def test_probe_measures_each_alternative_as_its_own_record_would_score(
    config_dir: Path, tiny_st_dir: Path, tmp_path: Path
) -> None:
    """The probe's score for "follow the folder's prompt" is exactly the score of a record that does."""
    _write_record(config_dir, "tiny-prompted", tiny_st_dir, query_prefix="query: ", max_length=8)
    _write_record(config_dir, "tiny-unprompted", tiny_st_dir, max_length=8)
    folders = {"data_dir": tmp_path / "data", "cache_dir": tmp_path / "cache", "runtime": "torch"}
    prompted = check_model(model="tiny-prompted", dataset="scifact", probe=4, **folders)
    unprompted = check_model(model="tiny-unprompted", dataset="scifact", probe=4, **folders)
    by_setting = {outcome.check.setting: outcome for outcome in prompted.probes}
    assert set(by_setting) == {"query prompt", "max length"}
    prompt = by_setting["query prompt"]
    assert prompted.probed_queries == 4
    (unprompted_length,) = unprompted.probes
    assert prompt.alternative_score == pytest.approx(unprompted_length.record_score, abs=1e-12)
    # ... and following the folder's max length too is the score of the record that follows it in both.
    assert by_setting["max length"].change == {"max_length": 48}
    assert prompt.difference == pytest.approx(prompt.alternative_score - prompt.record_score)
    assert all(0 <= outcome.alternative_score <= 1 for outcome in prompted.probes)
    assert "probe on 4 queries" in prompted.render()


@pytest.mark.slow
def test_minilm_with_a_wrong_prefix_shows_the_disagreement_and_its_effect(
    config_dir: Path, tmp_path: Path
) -> None:
    """The offline MiniLM, recorded with a "query: " prefix its own config and mteb do not use."""
    shipped = Path(__file__).resolve().parents[1] / "harness" / "records" / "models" / "all-MiniLM-L6-v2.yaml"
    text = shipped.read_text(encoding="utf-8").replace('query_prefix: ""', 'query_prefix: "query: "')
    (config_dir / "models").mkdir()
    (config_dir / "models" / "all-MiniLM-L6-v2.yaml").write_text(text, encoding="utf-8")
    result = check_model(
        model="minilm",
        dataset="scifact",
        probe=5,
        data_dir=tmp_path / "data",
        cache_dir=tmp_path / "cache",
        runtime="torch",
        no_progress=True,
    )
    assert [check.setting for check in result.preflight.disagreements] == ["query prompt"]
    (outcome,) = result.probes
    assert outcome.record_score is not None and outcome.alternative_score is not None
    rendered = result.render()
    assert "query prompt" in rendered and f"{outcome.difference:+.5f}" in rendered


def test_a_record_its_folder_refuses_is_reported_not_measured(
    config_dir: Path, tiny_st_dir: Path, tmp_path: Path
) -> None:
    """A sentence-transformers folder pools as its modules say: a record saying otherwise cannot run, so
    the probe reports why instead of a number."""
    _write_record(config_dir, "tiny-cls", tiny_st_dir, pooling="cls")
    result = check_model(
        model="tiny-cls", dataset="scifact", probe=2, data_dir=tmp_path / "data", cache_dir=tmp_path / "cache"
    )
    (outcome,) = result.probes
    assert outcome.check.setting == "pooling" and outcome.difference is None
    assert "pooling" in outcome.skipped and outcome.skipped in result.render()


def test_mteb_view_gives_the_exact_prompt_text_mteb_uses() -> None:
    """Qwen3-Embedding: the template (fixed inside mteb's loader) on queries only, filled with the task's
    instruction; bge: the query prompt by mteb's name order; no weights are needed to read them."""
    pytest.importorskip("mteb", reason="mteb is not installed")
    from harness.models.preflight import FolderConfig, mteb_view

    qwen = mteb_view("Qwen/Qwen3-Embedding-0.6B", "SciFact", FolderConfig())
    instruction = "Given a scientific claim, retrieve documents that support or refute the claim"
    assert qwen.prompts == {"query": f"Instruct: {instruction}\nQuery:", "document": ""}
    bge = mteb_view("BAAI/bge-small-en-v1.5", "SciFact", FolderConfig())
    assert bge.prompts == {
        "query": "Represent this sentence for searching relevant passages: ",
        "document": "",
    }
    assert (bge.similarity, bge.max_tokens) == ("cosine", 512)
    assert mteb_view("nobody/no-such-model", "SciFact", FolderConfig()) is None
