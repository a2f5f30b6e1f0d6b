"""A benchmark's own average row: when a table's rows are exactly BRIGHT's domains its average row is
BRIGHT's (the plain mean of nDCG@10 over the 12 domains, as BRIGHT computes it); beside other datasets a
note gives each model's benchmark average."""

from __future__ import annotations

import random
from pathlib import Path

from report_fixtures import make_result

from harness.datasets.mteb_tasks import load_mteb_tasks
from harness.reports.formats import render_markdown
from harness.reports.tables import build_tables
from harness.results.collect import collect_results


def _write(results: Path, datasets: list[str], seed: int) -> dict[str, dict[str, float]]:
    """Two models on each dataset with random rankings; their nDCG@10 per dataset."""
    rng = random.Random(seed)
    scores: dict[str, dict[str, float]] = {"model-a": {}, "model-b": {}}
    for dataset in datasets:
        qrels = {f"q{i}": {f"d{i}": 1, f"d{i + 1}": 2} for i in range(6)}
        for model in scores:
            run = {q: {f"d{j}": rng.random() for j in range(12)} for q in qrels}
            folder = make_result(results, dataset, model, run, qrels, {"corpus.jsonl": dataset})
            scores[model][dataset] = collect_results(folder.parent.parent).results[0].metrics["ndcg@10"]
    return scores


def test_a_table_of_brights_domains_has_brights_average_row(tmp_path: Path) -> None:
    members = load_mteb_tasks().benchmarks["bright"].members
    _write(tmp_path / "results", members, seed=3)
    (table,) = build_tables(collect_results(tmp_path / "results"), ["ndcg@10"]).tables
    assert table.average_label == "BRIGHT average" and len(table.average_over) == 12
    for slug in table.columns:
        mean = sum(row.cells[slug].value for row in table.rows) / 12
        assert table.average[slug].value == mean
    text = render_markdown(build_tables(collect_results(tmp_path / "results"), ["ndcg@10"]))
    assert "*BRIGHT average (12)*" in text


def test_beside_other_datasets_a_note_gives_each_models_benchmark_average(tmp_path: Path) -> None:
    tasks = load_mteb_tasks()
    members = tasks.benchmarks["bright"].members
    _write(tmp_path / "results", [*members, "toyset"], seed=5)  # a dataset of no benchmark
    (table,) = build_tables(collect_results(tmp_path / "results"), ["ndcg@10"]).tables
    assert table.average_label == "average" and len(table.average_over) == 13
    note = next(note for note in table.notes if note.startswith("BRIGHT average over its 12 tasks"))
    for slug in table.columns:
        scores = {row.dataset: row.cells[slug].value for row in table.rows}
        assert f"{table.labels[slug]} {tasks.benchmark_average('bright', scores):.4f}" in note
