"""`harness compare`, `harness table --baseline` and `harness report` agree: one pairing, one test.

Three stored results on the real scifact qrels; one system lacks three judged queries. Whichever command
compares them, the queries are paired the same way (the missing ones score 0, so all 300 are paired),
and the means, differences, p-values and adjusted p-values are the same numbers.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from report_fixtures import every_other, make_result, real_fingerprint, real_qrels, synthetic_run

from harness.cli import main
from harness.evaluation.comparison import PAIRING_RULE

KEYS = ("n_queries", "mean_baseline", "mean_system", "difference", "ci_low", "ci_high", "p_value")
SETTINGS = ["--n-resamples", "2000", "--seed", "7", "--correction", "holm"]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory, beir_mirror: Path) -> dict:
    root = tmp_path_factory.mktemp("consistency")
    qrels = real_qrels(beir_mirror, "scifact")
    fingerprint = real_fingerprint(beir_mirror, "scifact")
    even, odd = sorted(every_other(qrels, 0)), sorted(every_other(qrels, 1))
    runs = {
        "base": synthetic_run(qrels, set(even), 10),
        "sysb": synthetic_run(qrels, set(even[20:]), 10),  # fixes 20 of base's misses ...
        "sysc": synthetic_run(qrels, set(even) | set(odd[:5]), 10),  # misses 5 more
    }
    missing = odd[5:8]  # ... and sysb never answers three judged queries base gets right
    for qid in missing:
        del runs["sysb"][qid]
    runs_dir = root / "runs"
    runs_dir.mkdir()
    for model, run in runs.items():
        folder = make_result(root / "results", "scifact", model, run, qrels, fingerprint)
        (runs_dir / f"{model}.trec").write_bytes((folder / "run.trec").read_bytes())
    return {
        "results": root / "results",
        "runs": runs_dir,
        "qrels": beir_mirror / "scifact" / "qrels" / "test.tsv",
        "n_judged": len(qrels),
        "missing": missing,
    }


def _compare_rows(stored: dict, tmp_path: Path, capsys) -> tuple[dict, str]:
    output = tmp_path / "compare.json"
    runs = [str(stored["runs"] / f"{name}.trec") for name in ("base", "sysb", "sysc")]
    argv = ["compare", str(stored["qrels"]), *runs, "--metrics", "ndcg@10", *SETTINGS, "-o", str(output)]
    assert main(argv) == 0
    document = json.loads(output.read_text())
    assert document["pairing_rule"] == PAIRING_RULE
    return {row["system"]: row for row in document["comparisons"]}, capsys.readouterr().out


def _table_rows(stored: dict, capsys) -> tuple[dict, dict]:
    argv = ["table", str(stored["results"]), "--metrics", "ndcg@10", "--baseline", "base", "--format", "json"]
    assert main([*argv, *SETTINGS]) == 0
    document = json.loads(capsys.readouterr().out)
    (table,) = document["tables"]
    (row,) = table["rows"]
    cells = {model: cell["comparison"] for model, cell in row["cells"].items() if cell["comparison"]}
    return cells, document


def _report_rows(stored: dict, tmp_path: Path, capsys) -> tuple[dict, str]:
    page = tmp_path / "report.html"
    argv = ["report", str(stored["results"]), "--metrics", "ndcg@10", "--baseline", "base"]
    assert main([*argv, *SETTINGS, "--output", str(page)]) == 0
    capsys.readouterr()
    text = page.read_text(encoding="utf-8")
    found = [json.loads(html.unescape(raw)) for raw in re.findall(r'data-comparison="([^"]*)"', text)]
    return {row["system"]: row for row in found}, text


def test_compare_table_and_report_pair_and_test_alike(stored, tmp_path, capsys):
    compared, out = _compare_rows(stored, tmp_path, capsys)
    tabled, document = _table_rows(stored, capsys)
    reported, page = _report_rows(stored, tmp_path, capsys)
    assert set(compared) == set(tabled) == set(reported) == {"sysb", "sysc"}
    for system in ("sysb", "sysc"):
        for key in (*KEYS, "p_value_adjusted", "significant"):
            assert compared[system][key] == tabled[system][key] == reported[system][key], (system, key)
    # The pairing: every judged query, sysb's three unanswered ones scored 0 (not dropped).
    assert compared["sysb"]["n_queries"] == stored["n_judged"] == 300
    assert compared["sysb"]["difference"] == pytest.approx((20 - 3) / 300)
    assert compared["sysc"]["difference"] == pytest.approx(-5 / 300)
    # Holm over the two comparisons, in every command.
    assert compared["sysb"]["p_value_adjusted"] > compared["sysb"]["p_value"]
    # Each output states the pairing rule.
    assert f"pairing: {PAIRING_RULE}" in out
    assert document["pairing_rule"] == PAIRING_RULE
    assert any(PAIRING_RULE in line for line in document["tables"][0]["legend"])
    assert html.escape(PAIRING_RULE) in page
    assert "sysb: 3 paired queries without results, counted as 0: " + ", ".join(stored["missing"]) in out


def test_markdown_table_footnote_states_the_pairing_rule(stored, capsys):
    argv = ["table", str(stored["results"]), "--metrics", "ndcg@10", "--baseline", "base", *SETTINGS]
    assert main(argv) == 0
    assert f"Pairing: {PAIRING_RULE}." in capsys.readouterr().out
