"""Embedding metrics on the offline all-MiniLM-L6-v2, checked against sentence-transformers directly;
the judged metrics that also read embeddings, against a scripted local judge."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from test_qa_cli import run_cli, write_jsonl
from test_rag_judge import serving

from harness.core.cache import cache_entries
from harness.models.model_registry import DEFAULT_MODEL
from harness.models.resolve import resolve_model
from harness.qa.answers.profiles import get_profile
from harness.qa.rag.embedding_metrics import TextEmbedder
from harness.qa.rag.judge_client import JudgeClient, JudgeSettings
from harness.qa.rag.rag_evaluator import RAGEvaluator
from harness.qa.rag.rows import read_rag_file

ROWS = [
    {
        "id": "moon",
        "question": "When did the last crewed Moon landing take place?",
        "answer": "Apollo 17 landed in December 1972.",
        "contexts": ["Apollo 17 landed on the Moon on 11 December 1972."],
        "ground_truth": ["December 1972", "14 December 1972 UTC"],
    },
    {
        "id": "water",
        "question": "What is the boiling point of water?",
        "answer": "I am not sure.",
        "contexts": ["Water boils at 100 degrees Celsius at sea level."],
        "ground_truth": "100 degrees Celsius at sea level",
    },
]


@pytest.fixture(scope="module")
def st_model():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(resolve_model(DEFAULT_MODEL).source, device="cpu")


def direct_cosine(st_model, left: str, right: str) -> float:
    vectors = st_model.encode([left, right], normalize_embeddings=True, convert_to_numpy=True)
    return float(np.dot(vectors[0], vectors[1]))


def test_embedding_metrics_equal_sentence_transformers(tmp_path: Path, st_model, capsys) -> None:
    data = write_jsonl(tmp_path / "rag.jsonl", ROWS)
    out, cache = tmp_path / "report.json", tmp_path / "cache"
    argv = ["rag-eval", str(data), "--metrics", "embedding", "--cache-dir", str(cache), "--per-question"]
    code, _, err = run_cli([*argv, "--output", str(out)], capsys)
    assert code == 0, err
    report = json.loads(out.read_text())
    for row, scores in zip(ROWS, report["per_question"], strict=True):
        golds = row["ground_truth"] if isinstance(row["ground_truth"], list) else [row["ground_truth"]]
        similarity = max(direct_cosine(st_model, row["answer"], gold) for gold in golds)
        assert scores["semantic_similarity"] == pytest.approx(similarity, abs=1e-5)
        relevance = direct_cosine(st_model, row["question"], row["answer"])
        assert scores["answer_relevance_embed"] == pytest.approx(relevance, abs=1e-5)
        correctness = 0.75 * get_profile("squad").f1(row["answer"], golds) + 0.25 * similarity
        assert scores["answer_correctness_embed"] == pytest.approx(correctness, abs=1e-5)
    model = report["settings"]["embedding_model"]
    assert model["model"] == DEFAULT_MODEL and model["identity"]["weights_sha256"]

    # The vectors are one cache entry of the embeddings layout; a new embedder encodes nothing.
    entries = cache_entries(cache, "embeddings")
    assert [(e.dataset, e.details["part"], e.complete) for e in entries] == [("rag", "texts", True)]
    embedder = TextEmbedder.from_spec(DEFAULT_MODEL, cache)
    rows = read_rag_file(data).rows
    embedder.prepare([text for row in rows for text in (row.question, row.answer, *row.ground_truths)])
    assert embedder.encoded == 0
    assert embedder.cosine(ROWS[1]["question"], ROWS[1]["answer"]) == pytest.approx(
        report["per_question"][1]["answer_relevance_embed"], abs=1e-7
    )


class ScriptedRagas:
    """Generated questions (one noncommittal answer), statements, TP/FP/FN classes, attributions."""

    requests = 0

    def reply(self, body: dict) -> tuple[str, float]:
        task = re.search(r"task (\w+), v\d+", body["messages"][0]["content"]).group(1)
        user = body["messages"][1]["content"]
        sample = body["seed"] % 1000
        if task == "question":
            if "not sure" in user:
                return json.dumps({"question": "What is the boiling point?", "noncommittal": 1}), 0.0
            generated = [
                "When was the last Moon landing?",
                "When did Apollo 17 land?",
                "What happened in 1972?",
            ]
            return json.dumps({"question": generated[sample], "noncommittal": 0}), 0.0
        if task == "statements":
            return json.dumps({"statements": ["s1", "s2"]}), 0.0
        if task == "correctness":
            return json.dumps({"TP": ["s1"], "FP": ["s2"], "FN": []}), 0.0
        if task == "attribution":
            flags = [1, 0, 0, 1]
            return json.dumps({"classifications": [{"statement": "s", "attributed": f} for f in flags]}), 0.0
        raise AssertionError(task)


def test_judged_metrics_with_embeddings(tmp_path: Path, st_model) -> None:
    rows = read_rag_file(write_jsonl(tmp_path / "rag.jsonl", ROWS)).rows
    metrics = ["answer_relevance", "answer_correctness", "context_recall_judge"]
    with serving(ScriptedRagas()) as base_url:
        judge = JudgeClient(JudgeSettings(base_url=base_url, model="scripted", timeout=5), tmp_path / "cache")
        embedder = TextEmbedder.from_spec(DEFAULT_MODEL, tmp_path / "cache")
        result = RAGEvaluator(metrics, embedder=embedder, judge=judge).evaluate(rows)
    moon, water = result.per_question["moon"], result.per_question["water"]
    generated = ["When was the last Moon landing?", "When did Apollo 17 land?", "What happened in 1972?"]
    expected = np.mean([direct_cosine(st_model, ROWS[0]["question"], question) for question in generated])
    assert moon["answer_relevance"] == pytest.approx(expected, abs=1e-5)
    assert water["answer_relevance"] == 0.0  # the judge called the answer noncommittal
    similarity = max(direct_cosine(st_model, ROWS[0]["answer"], gold) for gold in ROWS[0]["ground_truth"])
    assert moon["answer_correctness"] == pytest.approx(0.75 * (1 / 1.5) + 0.25 * similarity, abs=1e-5)
    assert moon["context_recall_judge"] == pytest.approx(0.5)
    assert judge.stats()["malformed_replies"] == 0
