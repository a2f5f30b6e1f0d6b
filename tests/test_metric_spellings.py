"""Metric names in ir_measures', trec_eval's, pytrec_eval's and mteb's spellings: same metric, canonical name."""

from __future__ import annotations

import json
from pathlib import Path

import ir_measures
import pytest

from harness.cli import main
from harness.core.errors import HarnessError
from harness.evaluation.metrics import canonical_metric_name, evaluate, parse_metrics, split_metric_names
from harness.evaluation.trec import write_run

SPELLINGS = {
    # ir_measures
    "R@100": "recall@100",
    "RR@10": "mrr@10",
    "RR": "mrr",
    "AP": "map",
    "AP@10": "map@10",
    "nDCG@10": "ndcg@10",
    "P@10": "p@10",
    "Rprec": "rprec",
    "Bpref": "bpref",
    "Success@10": "success@10",
    # trec_eval
    "ndcg_cut.10": "ndcg@10",
    "recall.100": "recall@100",
    "P.10": "p@10",
    "recip_rank": "mrr",
    "map": "map",
    "map_cut.10": "map@10",
    "gm_map": "gmap",
    "success.5": "success@5",
    # pytrec_eval
    "ndcg_cut_10": "ndcg@10",
    "recall_100": "recall@100",
    "P_10": "p@10",
    "map_cut_10": "map@10",
    # mteb
    "ndcg_at_10": "ndcg@10",
    "recall_at_100": "recall@100",
}


@pytest.mark.parametrize(("spelled", "canonical"), SPELLINGS.items())
def test_every_spelling_maps_to_the_canonical_name(spelled: str, canonical: str) -> None:
    assert canonical_metric_name(spelled) == canonical
    assert parse_metrics([spelled]) == [canonical]


def test_commas_spaces_and_trec_eval_cutoff_lists() -> None:
    assert split_metric_names(["ndcg@10,recall@100", "map"]) == ["ndcg@10", "recall@100", "map"]
    assert split_metric_names("ndcg@10 recall@100") == ["ndcg@10", "recall@100"]
    # trec_eval's -m ndcg_cut.10,100: a bare number is another cut-off of the name before it.
    assert parse_metrics(["ndcg_cut.10,100", "P_5,10"]) == ["ndcg@10", "ndcg@100", "p@5", "p@10"]
    # trec_eval's cut-off families bare mean "at the cut-offs", never the whole ranking.
    assert parse_metrics(["ndcg_cut", "AP", "ndcg"], ks=[5]) == ["ndcg@5", "map@5"]
    with pytest.raises(HarnessError, match="'map_cut' needs a cutoff"):
        parse_metrics(["map_cut"])


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("ndgc@10", "unknown metric 'ndgc@10'; valid metrics: .*; nearest: ndcg@10$"),
        ("recal_100", "nearest: recall@100, r_cap@100$"),
        ("hits@10", r"unknown metric 'hits@10'; valid metrics: .*each k$"),
        ("nDCG(dcg='exp-log2')@10", "measure parameters are not read"),
        ("Judged@10", "Judged@k is not a ranking metric here"),
    ],
)
def test_unknown_names_are_one_line_with_the_nearest(name: str, message: str) -> None:
    with pytest.raises(HarnessError, match=message) as raised:
        parse_metrics([name])
    assert "\n" not in str(raised.value)


# Scores without ties, so every tool ranks the same way and the values must agree exactly.
QRELS = {
    "q1": {"d1": 1, "d2": 0, "d3": 2, "d7": 1},
    "q2": {"d9": 1, "d4": 1},
    "q3": {"d5": 2},
}
RUN = {
    "q1": {f"d{i}": 1.0 - i / 20 for i in range(1, 15)},
    "q2": {f"d{i}": 0.5 + i / 40 for i in range(1, 15)},
    "q3": {f"d{i}": 2.0 - i / 10 for i in range(6, 19)},
}


@pytest.mark.parametrize("measure", ["R@10", "RR@3", "RR", "AP", "AP@5", "nDCG@10", "P@5", "Rprec", "Bpref"])
def test_ir_measures_spelling_means_what_ir_measures_computes(measure: str) -> None:
    expected = ir_measures.calc_aggregate([ir_measures.parse_measure(measure)], QRELS, RUN)
    value = next(iter(expected.values()))
    evaluation = evaluate(QRELS, RUN, [measure], diagnose=False)
    assert evaluation.aggregate == {canonical_metric_name(measure): pytest.approx(value, abs=1e-12)}


def _files(tmp_path: Path) -> tuple[Path, Path]:
    qrels, run = tmp_path / "qrels.tsv", tmp_path / "run.trec"
    qrels.write_text("".join(f"{q} 0 {d} {g}\n" for q, docs in QRELS.items() for d, g in docs.items()))
    write_run(run, RUN, "hand")
    return qrels, run


@pytest.mark.parametrize(
    "metrics",
    [["ndcg_cut.10,R@10"], ["nDCG@10", "recall_10"], ["ndcg@10 recall.10"]],
    ids=["comma", "space", "quoted"],
)
def test_evaluate_command_reads_every_spelling_and_writes_canonical_names(tmp_path: Path, metrics) -> None:
    qrels, run = _files(tmp_path)
    output = tmp_path / "out.json"
    assert main(["evaluate", str(qrels), str(run), "--metrics", *metrics, "-o", str(output)]) == 0
    payload = json.loads(output.read_text())
    assert list(payload["metrics"]) == ["ndcg@10", "recall@10"]
    direct = evaluate(QRELS, RUN, ["ndcg@10", "recall@10"], diagnose=False).aggregate
    assert payload["metrics"] == pytest.approx(direct)


def test_table_help_lists_the_other_spellings(capsys) -> None:
    assert main(["table", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for spelled in (
        "R@100",
        "RR@10",
        "ndcg_cut.10",
        "recall.100",
        "P.10",
        "recip_rank",
        "ndcg_cut_10",
        "P_10",
    ):
        assert spelled in text
    assert "commas or spaces between names" in text
