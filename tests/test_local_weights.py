"""Local weights keep their record: ``--model NAME --weights DIR`` and hub-cache snapshots found offline."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from tiny_bert import build_tiny_bert

from harness.cli import main
from harness.core.errors import HarnessError
from harness.models.identity import folder_identity
from harness.models.resolve import resolve_model
from harness.results.result_store import load_result
from harness.retrieval.systems import find_system

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No hub: a registry model found here came from the weights given or the (temporary) hub cache."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_a_shipped_record_runs_with_the_given_weights(tiny_bert_dir: Path) -> None:
    model = resolve_model("contriever", weights=tiny_bert_dir)
    record = model.record
    # contriever's record: mean pooling, dot product, no normalisation; its name and slug.
    assert (record.name, record.pooling, record.similarity, record.normalize) == (
        "facebook/contriever",
        "mean",
        "dot",
        False,
    )
    assert model.slug == "facebook__contriever" and model.assumed == []
    assert Path(model.source) == tiny_bert_dir.resolve()
    assert model.identity["weights_hash"] == folder_identity(tiny_bert_dir)["weights_hash"]
    assert model.identity["model_id"] == "facebook/contriever"


def test_weights_need_a_record_with_weights(tmp_path: Path, tiny_bert_dir: Path) -> None:
    with pytest.raises(HarnessError) as error:
        resolve_model(str(tiny_bert_dir), weights=tiny_bert_dir)
    assert "--weights needs a registry model" in _one_line(error)
    with pytest.raises(HarnessError) as error:
        resolve_model("bm25", weights=tiny_bert_dir)
    assert "lexical" in _one_line(error) and "--weights" in _one_line(error)
    with pytest.raises(HarnessError) as error:
        resolve_model("contriever", weights=tmp_path / "missing")
    assert "no such folder" in _one_line(error)


def test_a_hub_cache_snapshot_is_found_offline_with_its_record(_offline: Path, tiny_bert_dir: Path) -> None:
    """A snapshot copied into the hub cache layout (no refs) runs as the record, at that commit."""
    snapshot = _offline / "models--facebook--contriever" / "snapshots" / COMMIT
    shutil.copytree(tiny_bert_dir, snapshot)
    model = resolve_model("contriever")
    assert Path(model.source) == snapshot
    assert model.identity["revision"] == COMMIT
    assert (model.slug, model.record.similarity, model.record.pooling) == (
        "facebook__contriever",
        "dot",
        "mean",
    )


def test_a_pinned_record_takes_only_its_own_commit_from_the_hub_cache(
    _offline: Path, tiny_bert_dir: Path
) -> None:
    pinned = "abe8c1493371369031bcb1e02acb754cf4e162fa"  # contriever-msmarco's record revision
    shutil.copytree(tiny_bert_dir, _offline / "models--facebook--contriever-msmarco" / "snapshots" / COMMIT)
    with pytest.raises(HarnessError) as error:
        resolve_model("contriever-msmarco")
    message = _one_line(error)
    assert f"hf download facebook/contriever-msmarco --revision {pinned} --local-dir DIR" in message
    assert message.endswith("--model facebook/contriever-msmarco --weights DIR")
    shutil.copytree(tiny_bert_dir, _offline / "models--facebook--contriever-msmarco" / "snapshots" / pinned)
    model = resolve_model("contriever-msmarco")
    assert model.identity["revision"] == pinned and Path(model.source).name == pinned


# ------------------------------------------------------------------------------------- end to end


def _tiny_beir(root: Path) -> Path:
    folder = root / "tinyset"
    (folder / "qrels").mkdir(parents=True)
    texts = ["immune cells attack the virus", "gene expression in tumor cells", "blood pressure study"]
    docs = [{"_id": f"d{i}", "title": "", "text": text} for i, text in enumerate(texts)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    queries = [{"_id": "q1", "text": "immune cells"}, {"_id": "q2", "text": "tumor gene"}]
    (folder / "queries.jsonl").write_text("".join(json.dumps(query) + "\n" for query in queries))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\nq2\td1\t1\n")
    return folder


def _record(models: Path, name: str, weights: Path) -> None:
    """cls pooling and dot product: unlike what a folder without a record is run with (mean, cosine)."""
    (models / f"{name}.yaml").write_text(
        f"name: {name}\nmodel_id: {weights}\nkind: transformers\npooling: cls\nnormalize: false\n"
        "similarity: dot\nmax_length: 16\n"
    )


def _scores(folder: Path) -> dict[tuple[str, str], float]:
    scores = {}
    for line in (folder / "run.trec").read_text().splitlines():
        if line.startswith("#"):
            continue
        qid, _, docid, _, score, _ = line.split()
        scores[(qid, docid)] = float(score)
    return scores


def test_eval_with_weights_keeps_the_record_and_a_folder_per_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, caplog: pytest.LogCaptureFixture
) -> None:
    own = build_tiny_bert(tmp_path / "own")
    tuned = build_tiny_bert(tmp_path / "ckpt" / "checkpoint-500", seed=1)
    other = build_tiny_bert(tmp_path / "ckpt" / "checkpoint-900", seed=2)
    models = tmp_path / "config" / "models"
    models.mkdir(parents=True)
    _record(models, "tinyrec", own)
    _record(models, "tinyrec-tuned", tuned)  # the same settings, its model_id the tuned folder
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(tmp_path / "config"))
    results = tmp_path / "results"
    base = ["eval", "--dataset", str(_tiny_beir(tmp_path)), "--no-progress", "--runtime", "torch"]
    base += ["--results-dir", str(results), "--cache-dir", str(tmp_path / "cache")]

    assert main([*base, "--model", "tinyrec", "--weights", str(tuned)]) == 0
    (dataset_dir,) = results.iterdir()
    weights_hash = folder_identity(tuned)["weights_hash"]
    folder = dataset_dir / f"tinyrec@runtime=torch+weights={weights_hash[:8]}"
    stored = load_result(folder)
    assert (stored.model, stored.label) == ("tinyrec", "tinyrec (runtime=torch, weights=checkpoint-500)")
    model_block = stored.provenance["model"]
    assert model_block["record"] == "tinyrec" and model_block["settings"]["pooling"] == "cls"
    assert model_block["identity"]["weights_hash"] == weights_hash and model_block["source"] == str(tuned)

    # The record's settings were used: equal to a record naming those weights itself, unlike the folder
    # run without a record (mean pooling, cosine).
    assert main([*base, "--model", "tinyrec-tuned"]) == 0
    with caplog.at_level(logging.WARNING, logger="harness.models.resolve"):
        assert main([*base, "--model", str(tuned)]) == 0
        assert main(["table", str(results), "--metrics", "ndcg@10", "--models", str(tuned)]) == 0
    # Resolved for the checks, the run and the table: the no-record warning once per process.
    assert sum(f"no registry record for {tuned}" in record.getMessage() for record in caplog.records) == 1
    recorded = _scores(dataset_dir / "tinyrec-tuned@runtime=torch")
    assert _scores(folder) == pytest.approx(recorded, rel=1e-6)
    unrecorded = _scores(next(dataset_dir.glob("local__checkpoint-500-*")))
    assert max(abs(score) for score in unrecorded.values()) <= 1.0 + 1e-6  # cosine
    assert max(abs(score) for score in recorded.values()) > 1.0  # dot product of unnormalised vectors

    capsys.readouterr()
    assert main([*base, "--model", "tinyrec", "--weights", str(tuned)]) == 0  # the same weights
    assert "(reused)" in capsys.readouterr().out
    assert main([*base, "--model", "tinyrec", "--weights", str(other)]) == 0  # other weights
    assert len(list(dataset_dir.glob("tinyrec@*weights=*"))) == 2

    # Checkpoints in a table, chosen by their folders: each labelled by its folder name, not its path.
    assert main(["table", str(results), "--metrics", "ndcg@10", "--models", str(tuned), str(other)]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| dataset"))
    assert sorted(cell.strip() for cell in header.strip("|").split("|")[1:]) == [
        "checkpoint-500 (runtime=torch)",  # the folder run without a record
        "tinyrec (runtime=torch, weights=checkpoint-500)",
        "tinyrec (runtime=torch, weights=checkpoint-900)",
        "tinyrec-tuned (runtime=torch)",  # its record names that folder
    ]


def test_weights_are_refused_for_systems_and_lexical_models_in_one_line(
    tmp_path: Path, tiny_bert_dir: Path, capsys
) -> None:
    base = ["eval", "--dataset", "scifact", "--no-progress", "--weights", str(tiny_bert_dir)]
    base += ["--results-dir", str(tmp_path / "results"), "--data-dir", str(tmp_path / "data")]
    assert main([*base, "--model", "bm25"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "lexical" in err and "Traceback" not in err
    system = find_system("bm25+minilm-rrf")
    if system is not None:
        assert main([*base, "--model", system.name]) == 2
        err = capsys.readouterr().err
        assert err.count("error:") == 1 and "system" in err
    assert not (tmp_path / "results").exists()
