"""trec_eval's own test fixtures, worked examples and the issue's reproducers, to the printed digit.

tests/data/trec_eval/ holds trec_eval's inputs and expected outputs (SOURCE.md names repository,
path and commit of each). Every measure the harness exposes is compared with trec_eval's printed
value (``%.4f``), per query and over all queries, in both score precisions.
"""

from __future__ import annotations

import json
import math
from functools import partial
from pathlib import Path

import pytest

from harness.cli import main
from harness.datasets.qrels import read_qrels
from harness.evaluation.metrics import evaluate
from harness.evaluation.trec import read_run_columns, write_run

DATA = Path(__file__).parent / "data" / "trec_eval"
QRELS = DATA / "qrels.test.with-comments"
RESULTS = DATA / "results.comment.test"
TRUNC = DATA / "results.trunc"


def harness_name(trec_name: str) -> str | None:
    """The harness metric for a trec_eval measure name, or None if the harness does not expose it."""
    whole = {
        "map": "map",
        "gm_map": "gmap",
        "Rprec": "rprec",
        "bpref": "bpref",
        "recip_rank": "mrr",
        "ndcg": "ndcg",
    }
    if trec_name in whole:
        return whole[trec_name]
    family, _, k = trec_name.rpartition("_")
    cut = {"P": "p", "recall": "recall", "ndcg_cut": "ndcg", "map_cut": "map", "success": "success"}
    return f"{cut[family]}@{k}" if family in cut and k.isdigit() else None


def expected_values(path: Path) -> dict[str, dict[str, str]]:
    """qid ('all' for the average) -> harness metric -> printed value, from a trec_eval output file."""
    table: dict[str, dict[str, str]] = {}
    for line in path.read_text().splitlines():
        measure, qid, value = line.split("\t")
        name = "num_q" if measure.strip() == "num_q" else harness_name(measure.strip())
        if name is not None:
            table.setdefault(qid, {})[name] = value
    return table


def check_against(path: Path, run: Path, *, complete: bool = False, precision: str = "float64") -> int:
    expected = expected_values(path)
    names = sorted({name for values in expected.values() for name in values} - {"num_q"})
    result = evaluate(QRELS, run, names, complete=complete, score_precision=precision)
    checked = 0
    for qid, values in expected.items():
        ours = result.aggregate if qid == "all" else result.per_query[qid]
        for name, printed in values.items():
            if name == "num_q":
                assert str(result.n_queries) == printed
            else:
                assert f"{ours[name]:.4f}" == printed, (path.name, qid, name, ours[name], printed)
            checked += 1
    return checked


def top_ranked(path: Path, depth: int, folder: Path) -> Path:
    """The run cut to each query's top ``depth`` documents (trec_eval -M depth)."""
    cut = folder / f"{path.name}.top{depth}"
    write_run(cut, read_run_columns(path).to_run(), tag="STANDARD", top_k=depth)
    return cut


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("expected", ["out.test", "out.test.a", "out.test.aq", "out.test.meas_params"])
def test_qrels_test_and_results_test_reproduce_to_the_printed_digit(expected: str, precision: str) -> None:
    assert check_against(DATA / expected, RESULTS, precision=precision) >= 11


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_results_trunc_with_complete_reproduces_out_test_aqc(precision: str) -> None:
    assert check_against(DATA / "out.test.aqc", TRUNC, complete=True, precision=precision) == 134


def test_results_trunc_cut_at_100_reproduces_out_test_aqcm(tmp_path: Path) -> None:
    # out.test.aqcM is `trec_eval -a -q -c -M100`: only each query's top 100 documents count.
    assert check_against(DATA / "out.test.aqcM", top_ranked(TRUNC, 100, tmp_path), complete=True) == 134


def test_files_are_read_as_they_are() -> None:
    qrels = read_qrels(QRELS).qrels
    assert sorted(qrels) == ["301", "302", "303"]  # no query named '#'
    assert qrels["301"]["CR#93E-1860"] == 0  # a '#' inside a docno is no comment
    assert sum(rel >= 1 for judged in qrels.values() for rel in judged.values()) == 561  # num_rel in out.test
    run = read_run_columns(RESULTS)
    assert run.qids == ["301", "302", "303"] and int(run.offsets[-1]) == 1500  # num_ret in out.test
    trunc = read_run_columns(TRUNC)
    assert trunc.extra_column_lines == 84 and int(trunc.offsets[-1]) == 584


def test_dropping_comment_lines_derives_qrels_test_and_results_test(tmp_path: Path) -> None:
    # qrels.test / results.test are the commented files without their '#' lines: same numbers.
    for name in (QRELS.name, RESULTS.name):
        lines = (DATA / name).read_text().splitlines(keepends=True)
        kept = [line for line in lines if not line.startswith("#")]
        assert len(lines) - len(kept) == 3
        (tmp_path / name).write_text("".join(kept))
    ours = evaluate(tmp_path / QRELS.name, tmp_path / RESULTS.name, ["map", "bpref", "ndcg", "p@10"])
    commented = evaluate(QRELS, RESULTS, ["map", "bpref", "ndcg", "p@10"])
    assert ours.per_query == commented.per_query
    assert f"{ours.aggregate['map']:.4f}" == "0.1785"


def test_cli_reads_results_trunc_and_reports_the_extra_columns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "trunc.json"
    with caplog.at_level("WARNING"):
        code = main(
            ["evaluate", str(QRELS), str(TRUNC), "--metrics", "map", "bpref", "--complete", "-o", str(out)]
        )
    assert code == 0
    notes = [
        record.getMessage() for record in caplog.records if "columns after the run tag" in record.getMessage()
    ]
    assert len(notes) == 1 and "84 lines" in notes[0]
    payload = json.loads(out.read_text())
    assert f"{payload['metrics']['map']:.4f}" == "0.1016" and f"{payload['metrics']['bpref']:.4f}" == "0.1510"
    assert payload["settings"]["score_precision"] == "float64"
    assert payload["settings"]["run_lines_with_extra_columns_ignored"] == 84


# --- the reproducers ------------------------------------------------------------------------

REPRO_QRELS = "q1 0 a 1\nq1 0 b 0\n"
REPRO_RUN = "q1 Q0 a 1 0.30000000000000004 t\nq1 Q0 b 2 0.3 t\n"
EVERY_METRIC = ["p@1", "map", "mrr", "mrr@1", "ndcg", "ndcg@1", "dcg@1", "recall@1", "map@1", "success@1",
                "r_cap@1", "rprec", "bpref", "gmap"]  # fmt: skip


@pytest.fixture
def repro(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "qrels").write_text(REPRO_QRELS)
    (tmp_path / "run").write_text(REPRO_RUN)
    return tmp_path / "qrels", tmp_path / "run"


def test_scores_beyond_float32_precision_rank_as_trec_eval_10(repro: tuple[Path, Path]) -> None:
    qrels, run = repro
    ours = evaluate(qrels, run, ["map", "mrr", "p@1"]).aggregate
    assert ours == {"map": 1.0, "mrr": 1.0, "p@1": 1.0}
    nine = evaluate(qrels, run, ["map", "mrr", "p@1"], score_precision="float32").aggregate
    assert nine == {"map": 0.5, "mrr": 0.5, "p@1": 0.0}  # trec_eval 9 / pytrec_eval


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_every_metric_has_one_value_alone_and_together(repro: tuple[Path, Path], precision: str) -> None:
    qrels, run = repro
    together = evaluate(qrels, run, EVERY_METRIC, score_precision=precision).aggregate
    for name in EVERY_METRIC:
        assert evaluate(qrels, run, [name], score_precision=precision).aggregate[name] == together[name], name
    assert together["p@1"] == together["mrr@1"] == (1.0 if precision == "float64" else 0.0)


def test_overflowing_scores_do_not_tie_with_infinity(tmp_path: Path) -> None:
    (tmp_path / "qrels").write_text("q 0 b 1\n")
    (tmp_path / "run").write_text("q Q0 a 1 inf t\nq Q0 b 2 1e308 t\nq Q0 c 3 1.7e308 t\n")
    # float64: a (inf) > c (1.7e308) > b; float32: all three are inf, so docid descending: c, b, a.
    assert evaluate(tmp_path / "qrels", tmp_path / "run", ["mrr"]).aggregate["mrr"] == 1 / 3
    float32 = evaluate(tmp_path / "qrels", tmp_path / "run", ["mrr"], score_precision="float32")
    assert float32.aggregate["mrr"] == 1 / 2


def test_hex_float_scores_and_fractional_relevance_read_as_c_does(tmp_path: Path) -> None:
    (tmp_path / "qrels").write_text("q 0 a 1.5\nq 0 b 0.9\nq 0 c 2e1\n")
    (tmp_path / "run").write_text("q Q0 a 1 0x1p-1 t\nq Q0 b 2 0x1.8p0 t\nq Q0 c 3 -0X1P+0 t\n")
    assert read_qrels(tmp_path / "qrels").qrels == {"q": {"a": 1, "b": 0, "c": 2}}  # atol
    assert read_run_columns(tmp_path / "run").to_run() == {"q": {"a": 0.5, "b": 1.5, "c": -1.0}}
    # Ranking b (0), a (1), c (2): first relevant at rank 2.
    assert evaluate(tmp_path / "qrels", tmp_path / "run", ["mrr"]).aggregate["mrr"] == 0.5


# --- relevance levels 0 and -1 ------------------------------------------------------------------------
# Qrels: a 0, b 1, c -1 (judged negative: "in pool, unjudged" for trec_eval). Run ranks x (not in the
# qrels), a, c, b. trec_eval's level of each ranked doc: x -1, a 0, c -2, b 1. R counts grades >= 0
# at or above the level. Hand-computed from trec_eval's definitions (m_map.c, m_P.c, m_recall.c, ...):
#   -l 1: relevant b@4; R=1: map 1/4, P@2 0, recall@4 1, Rprec 0 (top 1), bpref 1-min(1,1)/min(1,1)=0
#   -l 0: relevant a@2, b@4; R=2: map (1/2+2/4)/2=0.5, P@2 .5, recall@4 1, Rprec 1/2, bpref (1+1)/2=1
#   -l -1: relevant x@1, a@2, b@4; R=2: map (1+1+3/4)/2=1.375, P@2 1, recall@4 3/2, Rprec 2/2, bpref 1
LEVEL_QRELS = "q 0 a 0\nq 0 b 1\nq 0 c -1\n"
LEVEL_RUN = "q Q0 x 1 3 t\nq Q0 a 2 2 t\nq Q0 c 3 1.5 t\nq Q0 b 4 1 t\n"
LEVEL_EXPECTED = {
    1: {"map": 0.25, "p@2": 0.0, "recall@4": 1.0, "rprec": 0.0, "bpref": 0.0, "mrr": 0.25},
    0: {"map": 0.5, "p@2": 0.5, "recall@4": 1.0, "rprec": 0.5, "bpref": 1.0, "mrr": 0.5},
    -1: {"map": 1.375, "p@2": 1.0, "recall@4": 1.5, "rprec": 1.0, "bpref": 1.0, "mrr": 1.0},
}


@pytest.mark.parametrize("level", sorted(LEVEL_EXPECTED))
def test_relevance_levels_zero_and_negative_mean_what_they_mean_in_trec_eval(
    tmp_path: Path, level: int
) -> None:
    (tmp_path / "qrels").write_text(LEVEL_QRELS)
    (tmp_path / "run").write_text(LEVEL_RUN)
    expected = LEVEL_EXPECTED[level]
    ours = evaluate(tmp_path / "qrels", tmp_path / "run", [*expected, "ndcg"], relevance_level=level)
    assert {name: ours.aggregate[name] for name in expected} == expected
    assert ours.aggregate["ndcg"] == pytest.approx(1 / math.log2(5))  # nDCG uses grades, not the level


@pytest.mark.parametrize("level", ["0", "-1", "-5"])
def test_cli_low_relevance_levels_print_values_not_tracebacks(
    tmp_path: Path, capsys: pytest.CaptureFixture, level: str
) -> None:
    (tmp_path / "qrels").write_text(LEVEL_QRELS)
    (tmp_path / "run").write_text(LEVEL_RUN)
    code = main(["evaluate", str(tmp_path / "qrels"), str(tmp_path / "run"), "--metrics", "map",
                 f"--relevance-level={level}"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0 and "Traceback" not in captured.err
    assert captured.out.startswith("map")


# --- DCG ----------------------------------------------------------------------------------------------


def test_dcg_and_ndcg_on_the_worked_example(tmp_path: Path) -> None:
    # Grades [3, 2, 3, 0, 1] in rank order: DCG@5 = 6.1487, ideal [3, 3, 2, 1, 0]: IDCG@5 = 6.3235.
    (tmp_path / "qrels").write_text("q 0 d1 3\nq 0 d2 2\nq 0 d3 3\nq 0 d4 0\nq 0 d5 1\n")
    (tmp_path / "run").write_text("".join(f"q Q0 d{i} {i} {10 - i} t\n" for i in range(1, 6)))
    ours = evaluate(tmp_path / "qrels", tmp_path / "run", ["dcg@5", "ndcg@5"]).aggregate
    assert f"{ours['dcg@5']:.4f}" == "6.1487"
    assert f"{ours['ndcg@5']:.4f}" == "0.9724"
    assert f"{ours['dcg@5'] / ours['ndcg@5']:.4f}" == "6.3235"


# --- the setting is wired through both commands ---------------------------------------------------------


def test_score_precision_reaches_eval_options_and_the_recorded_settings() -> None:
    from harness.cli import build_parser
    from harness.core.options import record_from_namespace
    from harness.pipeline import EvalOptions

    options_from_args = partial(record_from_namespace, EvalOptions)
    parser = build_parser()
    args = parser.parse_args(
        ["eval", "--dataset", "scifact", "--model", "minilm", "--score-precision", "float32"]
    )
    settings = options_from_args(args).evaluation_settings()
    assert settings.score_precision == "float32"
    assert settings.describe()["score_precision"] == "float32"  # part of the result-reuse config
    default = options_from_args(parser.parse_args(["eval", "--dataset", "scifact", "--model", "minilm"]))
    assert default.evaluation_settings().describe()["score_precision"] == "float64"
    qrels = {"q1": {"a": 1, "b": 0}}
    run = {"q1": {"a": 0.30000000000000004, "b": 0.3}}
    result = settings.evaluate(qrels, run)
    assert result.aggregate["map"] == 0.5 and result.to_json()["settings"]["score_precision"] == "float32"
