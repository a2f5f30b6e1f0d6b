"""``harness table --ci``: a bootstrap interval on every cell and, per row, the systems tied with the best."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from report_fixtures import every_other, make_result, real_fingerprint, real_qrels, synthetic_run

from harness.cli import main
from harness.evaluation.significance import bootstrap_interval
from harness.results.result_store import load_result


def test_bootstrap_interval_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    true_mean = 2 / 7  # Beta(2, 5), a skewed per-query score distribution
    covered = 0
    replications = 200
    for seed in range(replications):
        low, high = bootstrap_interval(rng.beta(2, 5, size=80), n_resamples=1000, seed=seed)
        covered += low <= true_mean <= high
    assert 0.88 <= covered / replications <= 0.99


def test_bootstrap_interval_is_seeded_and_shrinks_as_queries_grow():
    rng = np.random.default_rng(1)
    values = rng.beta(2, 5, size=400)
    assert bootstrap_interval(values, seed=3) == bootstrap_interval(values, seed=3)
    assert bootstrap_interval(values, seed=3) != bootstrap_interval(values, seed=4)
    widths = [np.subtract(*bootstrap_interval(values[:n], seed=3)[::-1]) for n in (25, 100, 400)]
    # The width goes as 1 / sqrt(n): each 4x more queries roughly halves it.
    assert widths[0] > widths[1] > widths[2] > 0
    assert widths[1] < 0.7 * widths[0] and widths[2] < 0.7 * widths[1]


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory: pytest.TempPathFactory, beir_mirror: Path) -> Path:
    """A row with a known answer: ideal is best, one-off is ideal but for one query (not separable from it),
    half-buried loses half the queries (clearly worse). nfcorpus has only ideal and half-buried."""
    root = tmp_path_factory.mktemp("results")
    qrels = real_qrels(beir_mirror, "scifact")
    fingerprint = real_fingerprint(beir_mirror, "scifact")
    one = {sorted(qrels)[0]}
    make_result(root, "scifact", "ideal", synthetic_run(qrels), qrels, fingerprint)
    make_result(root, "scifact", "one-off", synthetic_run(qrels, one, 10), qrels, fingerprint)
    make_result(
        root, "scifact", "half-buried", synthetic_run(qrels, every_other(qrels, 0), 10), qrels, fingerprint
    )
    nf_qrels = real_qrels(beir_mirror, "nfcorpus")
    nf_fingerprint = real_fingerprint(beir_mirror, "nfcorpus", files=("qrels/test.tsv",))
    make_result(root, "nfcorpus", "ideal", synthetic_run(nf_qrels), nf_qrels, nf_fingerprint)
    buried = every_other(nf_qrels, 0)
    make_result(
        root, "nfcorpus", "half-buried", synthetic_run(nf_qrels, buried, 10), nf_qrels, nf_fingerprint
    )
    return root


def _json_table(capsys, results_dir: Path, *extra: str) -> dict:
    code = main(["table", str(results_dir), "--ci", "--format", "json", "--metrics", "ndcg@10", *extra])
    assert code == 0
    return json.loads(capsys.readouterr().out)["tables"][0]


def test_tied_with_best_marks_the_known_answer_and_states_the_correction(results_dir, capsys):
    code = main(
        [
            "table",
            str(results_dir),
            "--ci",
            "--metrics",
            "ndcg@10",
            "--models",
            "ideal",
            "one-off",
            "half-buried",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("| scifact |"))
    ideal, one_off, half = (cell.strip() for cell in row.strip("|").split("|")[1:])
    assert ideal.startswith("**1.0000** [1.0000, 1.0000]")
    assert one_off.startswith("0.9967 ≈ [")  # 299 of 300 queries ideal: not separable from the best
    assert half.startswith("0.5000 [") and "≈" not in half  # clearly worse
    assert "≈: statistically tied with the best of the row" in out
    assert (
        "holm correction; each system tested against its row's best, corrected over that row's comparisons"
        in out
    )
    assert "(10,000 resamples, seed 42)" in out

    table = _json_table(capsys, results_dir)
    cells = (
        table["rows"][1]["cells"] if table["rows"][1]["dataset"] == "scifact" else table["rows"][0]["cells"]
    )
    assert cells["ideal"]["tied_with_best"] and cells["one-off"]["tied_with_best"]
    assert not cells["half-buried"]["tied_with_best"]
    assert (
        cells["one-off"]["vs_best"]["p_value_adjusted"]
        >= 0.05
        > cells["half-buried"]["vs_best"]["p_value_adjusted"]
    )
    assert cells["half-buried"]["vs_best"]["baseline"] == "ideal"  # tested against the row's best


def test_every_cell_interval_is_the_one_bootstrap_with_the_recorded_seed(results_dir, capsys):
    table = _json_table(capsys, results_dir, "--seed", "7", "--n-resamples", "2000")
    for row in table["rows"]:
        for model, cell in row["cells"].items():
            if cell["value"] is None:
                assert cell["interval"] is None
                continue
            result = load_result(results_dir / row["dataset"] / model)
            expected = bootstrap_interval(
                list(result.per_query_values("ndcg@10").values()), n_resamples=2000, seed=7
            )
            assert cell["interval"] == list(expected)
            assert cell["interval"][0] <= cell["value"] <= cell["interval"][1]
    again = _json_table(capsys, results_dir, "--seed", "7", "--n-resamples", "2000")
    other = _json_table(capsys, results_dir, "--seed", "8", "--n-resamples", "2000")
    assert _half_buried(again) == _half_buried(table) != _half_buried(other)


def _half_buried(table: dict) -> list[float]:
    return next(row for row in table["rows"] if row["dataset"] == "scifact")["cells"]["half-buried"][
        "interval"
    ]


def test_averages_keep_refusing_datasets_a_system_lacks(results_dir, capsys):
    table = _json_table(capsys, results_dir)
    assert table["average"]["over"] == ["scifact"]  # one-off has no nfcorpus result
    # The data formats keep the average over one dataset; the notes say the paper formats print none.
    assert any("No average row: nfcorpus lack(s)" in line for line in table["legend"])
    average = table["average"]["cells"]["half-buried"]
    assert average["value"] == pytest.approx(0.5) and average["interval"][0] < 0.5 < average["interval"][1]
