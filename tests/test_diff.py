"""``harness diff A B``: each differing setting is named, identical results have none, and the per-query picture."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from report_fixtures import every_other, make_result, real_fingerprint, real_qrels, synthetic_run

from harness.cli import main
from harness.results.settings_diff import RESULT_SETTINGS


@pytest.fixture(scope="module")
def bm25_result(tmp_path_factory: pytest.TempPathFactory, beir_mirror: Path) -> Path:
    """A real result folder, written by the real pipeline (BM25 on scifact is quick)."""
    root = tmp_path_factory.mktemp("diff")
    args = ["eval", "--results-dir", str(root / "results"), "--cache-dir", str(root / "cache")]
    args += ["--data-dir", str(root / "data"), "--no-progress", "--mirror", str(beir_mirror)]
    assert main([*args, "--dataset", "scifact", "--model", "bm25"]) == 0
    return root / "results" / "scifact" / "bm25"


def _edit(path: Path, change: Callable[[dict], None]) -> None:
    payload = json.loads(path.read_text())
    change(payload)
    path.write_text(json.dumps(payload))


def _config(*keys: str, value: object) -> Callable[[dict], None]:
    def change(provenance: dict) -> None:
        target = provenance["config"]
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return change


def _fingerprint(provenance: dict) -> None:
    provenance["dataset"]["fingerprint"]["corpus.jsonl"] = "0" * 64


def _runtime(provenance: dict) -> None:
    provenance["retrieval"]["label"] = "onnx int8"


def _torch(provenance: dict) -> None:
    provenance["environment"]["versions"]["torch"] = "0.0.1"


def _split(metrics: dict) -> None:
    metrics["split"] = "dev"


def _complete(metrics: dict) -> None:
    metrics["settings"]["complete"] = True


def _relevance(metrics: dict) -> None:
    metrics["settings"]["relevance_level"] = 2


# setting name as printed -> (file to edit, the one change a run with that other setting would record)
ONE_CHANGE = {
    "dataset checksum": ("provenance.json", _fingerprint),
    "split": ("metrics.json", _split),
    "identical-id rule (drop hits whose id is the query's)": (
        "provenance.json",
        _config("retrieval", "drop_identical_ids", value=True),
    ),
    "query prefix": ("provenance.json", _config("model", "settings", "query_prefix", value="query: ")),
    "document prefix": ("provenance.json", _config("model", "settings", "doc_prefix", value="passage: ")),
    "pooling": ("provenance.json", _config("model", "settings", "pooling", value="cls")),
    "normalisation": ("provenance.json", _config("model", "settings", "normalize", value=True)),
    "max length": ("provenance.json", _config("model", "settings", "max_length", value=256)),
    "title joining": ("provenance.json", _config("model", "settings", "title_join", value=" ")),
    "top-k": ("provenance.json", _config("retrieval", "top_k", value=100)),
    "averaging (-c: judged queries without results count as 0)": ("metrics.json", _complete),
    "relevance level": ("metrics.json", _relevance),
    "runtime and score precision": ("provenance.json", _runtime),
    "library versions that change scores": ("provenance.json", _torch),
}


def diff(capsys, a: Path, b: str | Path, *extra: str) -> str:
    code = main(["diff", str(a), str(b), *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def test_identical_results_have_no_protocol_difference(bm25_result, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(bm25_result, copy)
    out = diff(capsys, bm25_result, copy)
    assert "no protocol difference" in out
    assert "B wins 0, ties 300, loses 0" in out and "no query moved" in out


@pytest.mark.parametrize("setting", list(ONE_CHANGE))
def test_each_changed_setting_is_named_alone(bm25_result, tmp_path, capsys, setting):
    assert setting in {name for name, _ in RESULT_SETTINGS}
    changed = tmp_path / "changed"
    shutil.copytree(bm25_result, changed)
    filename, change = ONE_CHANGE[setting]
    _edit(changed / filename, change)
    out = diff(capsys, bm25_result, changed)
    lines = out.splitlines()
    assert "1 recorded setting(s) differ and can move a number:" in lines
    named = [line for line in lines if line.startswith("  ") and ": A " in line]
    assert len(named) == 1 and named[0].startswith(f"  {setting}"), named


def test_a_published_cell_names_the_conditions_its_source_states(bm25_result, capsys):
    # Pyserini's 2CR scores with trec_eval -c and drops identical ids; this run does neither.
    out = diff(capsys, bm25_result, "ref:pyserini-2cr:bm25-flat")
    assert "  identical-id rule (drop hits whose id is the query's): A false | B true" in out
    assert "  averaging (-c: judged queries without results count as 0): A false | B true" in out
    assert "nDCG@10" in out and "0.6789" in out and "no per-query picture" in out


def test_a_published_bm25_cell_names_every_setting_it_records(bm25_result, tmp_path, capsys):
    # MTEB's bm25s (this run's settings) against pyserini's Lucene BM25 flat: k1, b, stemmer, tokenizer and
    # title joining differ; what 2CR leaves unsaid is named as such, never counted as equal.
    out = diff(capsys, bm25_result, "ref:pyserini-2cr:bm25-flat", "-o", str(tmp_path / "diff.json"))
    lines = out.splitlines()
    assert "7 recorded setting(s) differ and can move a number:" in lines
    for line in (
        "  model parameters [k1]: A 1.5 | B 0.9",
        "  model parameters [b]: A 0.75 | B 0.4",
        '  model parameters [stemmer]: A "english" | B "porter"',
        '  title joining: A "\\n" | B " "',
        '  model parameters [stopwords]: "en"',
        '  model parameters [method]: "lucene"',
        '  model kind: "bm25"',
    ):
        assert line in lines, line
    assert any(line.startswith('  model parameters [token_pattern]: A "words" | B "Lucene') for line in lines)
    recorded_by_b_only = next(line for line in lines if "recorded by the reference, not by A:" in line)
    assert "model parameters [possessive]" in recorded_by_b_only and "[document_length]" in recorded_by_b_only
    unrecorded = next(line for line in lines if line.startswith("the reference does not record: "))
    assert "dataset checksum" in unrecorded and "library versions that change scores" in unrecorded
    assert "model parameters [" not in unrecorded  # every key of A's parameters that 2CR states is compared
    assert "note: B's model settings as pyserini-2cr states them: beir.yaml's bm25-flat command" in out
    payload = json.loads((tmp_path / "diff.json").read_text())
    assert payload["equal_settings"]["model parameters [lower]"] is True
    assert "dataset checksum" in payload["not_recorded_by_b"]


def test_mteb_bm25s_cell_records_the_harness_bm25_settings_exactly(bm25_result, capsys):
    out = diff(capsys, bm25_result, "ref:mteb-results")
    lines = out.splitlines()
    # The only difference is MTEB's identical-id wording, which depends on the task: no model setting.
    assert "1 recorded setting(s) differ and can move a number:" in lines
    for key, value in (("k1", "1.5"), ("b", "0.75"), ("stemmer", '"english"'), ("token_pattern", '"words"')):
        assert f"  model parameters [{key}]: {value}" in lines, key
    assert '  title joining: "\\n"' in lines
    assert "nDCG@10      0.6874   0.6874" in out  # the harness's bm25 is MTEB's baseline, to 4 decimals


def test_a_reference_without_model_settings_says_so(bm25_result, capsys):
    out = diff(capsys, bm25_result, "ref:pyserini-2cr:facebook/contriever")
    assert "pyserini-2cr states no model settings for facebook/contriever" in out
    unrecorded = next(line for line in out.splitlines() if line.startswith("the reference does not record: "))
    assert "model parameters" in unrecorded and "title joining" in unrecorded


def test_unknown_reference_is_one_error_line(bm25_result, capsys):
    assert main(["diff", str(bm25_result), "ref:no-such-source"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: no published reference from source 'no-such-source'") and err.count("\n") == 1
    )


def test_per_query_picture_shows_wins_and_moved_queries_with_documents_and_judgments(
    beir_mirror, tmp_path, capsys
):
    qrels = real_qrels(beir_mirror, "scifact")
    fingerprint = real_fingerprint(beir_mirror, "scifact")
    buried = every_other(qrels, 0)
    data = beir_mirror / "scifact"
    base = make_result(
        tmp_path, "scifact", "base", synthetic_run(qrels, buried, 10), qrels, fingerprint, root=data
    )
    tuned = make_result(tmp_path, "scifact", "tuned", synthetic_run(qrels), qrels, fingerprint, root=data)
    out = diff(
        capsys, base, tuned, "--top-queries", "3", "--top-docs", "2", "-o", str(tmp_path / "diff.json")
    )
    assert f"B wins {len(buried)}, ties {len(qrels) - len(buried)}, loses 0" in out
    first = sorted(buried)[0]  # moves of equal size are listed by query id
    assert f"  query {first}: A 0.0000  B 1.0000  (+1.0000)" in out
    judged_doc = sorted(qrels[first])[0]
    assert f"{judged_doc} ({qrels[first][judged_doc]})" in out  # the query's judgments
    assert (
        "    A top 2: 1. filler-0 [-]  2. filler-1 [-]" in out
    )  # the base buried it under unjudged documents
    payload = json.loads((tmp_path / "diff.json").read_text())
    assert payload["per_query"]["wins"] == len(buried) and len(payload["per_query"]["moved_most"]) == 3
    assert payload["protocol_differences"][0]["setting"] == "model"
