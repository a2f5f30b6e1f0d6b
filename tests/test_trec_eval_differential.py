"""Randomised differential test: the harness against a trec_eval written from its definitions.

Each case is a deliberately nasty qrels/run pair written as files: heavy score ties, scores that
differ only beyond float32 precision or overflow a C float, -0.0, hex floats, grades -2..3 written
as ``1.5`` or ``+1``, unicode, numeric-looking and ``#``-holding ids, comment lines, blank lines,
extra columns, wrong rank columns, judged queries missing from the run and run queries without
judgments; relevance levels -2..2, both score precisions, with and without ``--complete``, and
metrics asked for alone and together. The reference (tests/trec_eval_reference.py) reads the text
itself, so the harness's readers are checked too.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

import pytest
import trec_eval_reference as reference

from harness.datasets.qrels import read_qrels
from harness.evaluation.metrics import evaluate
from harness.evaluation.trec import read_run_columns

N_CASES = 240
FAMILIES_WITH_K = ("ndcg", "dcg", "p", "recall", "map", "mrr", "success", "r_cap")
WHOLE_RANKING = ("ndcg", "dcg", "map", "mrr", "rprec", "bpref", "gmap")
IDS = [
    "d1", "d2", "d10", "D1", "1", "01", "1.0", "10", "9", "0x10", "NaN", "null", "é", "e\u0301", "文档",
    "d\u00a0x", "CR#93", "a-b", "z", "Z", "~", "d" * 30,
]  # fmt: skip
TIED = [0.5, 0.25, 1.0, 0.0, -0.0, -1.5, 3.0]
NEAR = [0.3, 0.30000000000000004, 1.0 + 2**-40, 1.0, 1e-46, 1e-45, 1e308, 1.7e308, math.inf, -math.inf]


def _score_text(rng: random.Random, value: float) -> str:
    if math.isinf(value):
        return (
            rng.choice(["inf", "INF", "Infinity", "1e400"]) if value > 0 else rng.choice(["-inf", "-1e999"])
        )
    choice = rng.random()
    if choice < 0.2:
        return value.hex()  # C hex float, e.g. 0x1.0000000000000p-1
    if choice < 0.3 and value == int(value) and abs(value) < 1e6:
        return f"{int(value)}"
    return repr(value)


def _grade_text(rng: random.Random, grade: int) -> str:
    forms = [
        str(grade),
        f"{grade}.0",
        f"{grade}.5" if grade >= 0 else f"{grade}.5",
        f"+{grade}" if grade >= 0 else str(grade),
    ]
    if grade >= 0:
        forms.append(f"{grade}e1")  # atol reads the digits before 'e'
    return rng.choice(forms)


def generate_case(seed: int) -> dict:
    rng = random.Random(seed)
    qids = rng.sample(["q1", "2", "10", "01", "é", "#no", "q#3", "0.5"], rng.randint(2, 5))
    qids = [qid for qid in qids if not qid.startswith("#")] or ["q1"]
    qrels_lines, run_lines = [], []
    shared = rng.choice(qids)
    for qid in qids:
        pool = rng.sample(IDS, rng.randint(3, len(IDS)))
        if qid == shared or rng.random() < 0.8:  # judged
            judged = rng.sample(pool, rng.randint(1, len(pool) - 1))
            for docid in judged:
                grade = rng.choice([-2, -1, 0, 0, 1, 1, 2, 3])
                qrels_lines.append(f"{qid} {rng.choice(['0', 'Q0', '7'])} {docid} {_grade_text(rng, grade)}")
        if qid == shared or rng.random() < 0.8:  # retrieved
            retrieved = rng.sample(pool, rng.randint(1, len(pool)))
            palette = rng.choice([TIED, NEAR, TIED + NEAR])
            for docid in retrieved:
                value = rng.choice(palette) if rng.random() < 0.8 else rng.uniform(-2, 2)
                extra = " more junk" if rng.random() < 0.1 else ""
                rank = rng.randint(-3, 1000)  # rank columns are ignored, even wrong ones
                sep = rng.choice([" ", "\t", "  "])
                run_lines.append(
                    sep.join([qid, "Q0", docid, str(rank), _score_text(rng, value), "tag"]) + extra
                )
    for lines in (qrels_lines, run_lines):
        rng.shuffle(lines)
        for _ in range(rng.randint(0, 2)):
            lines.insert(
                rng.randint(0, len(lines)), rng.choice(["# a comment", "   # indented comment 1 2 3 4 5", ""])
            )
    names = [f"{family}@{rng.choice([1, 2, 3, 5, 10, 30])}" for family in rng.sample(FAMILIES_WITH_K, 4)]
    names += rng.sample(WHOLE_RANKING, rng.randint(0, 3))
    return {
        "qrels": "\n".join(qrels_lines) + "\n",
        "run": "\n".join(run_lines) + "\n",
        "names": list(dict.fromkeys(names)),
        "level": rng.choice([-2, -1, 0, 1, 1, 2]),
        "complete": rng.random() < 0.3,
        "float32": rng.random() < 0.3,
    }


def _close(ours: float, theirs: float) -> bool:
    if math.isinf(theirs) or math.isnan(theirs):
        return ours == theirs or (math.isnan(ours) and math.isnan(theirs))
    return math.isclose(ours, theirs, rel_tol=1e-12, abs_tol=1e-12)


def _check_case(case: dict, folder: Path) -> int:
    (folder / "qrels").write_text(case["qrels"], encoding="utf-8")
    (folder / "run").write_text(case["run"], encoding="utf-8")
    expected_qrels = reference.read_qrels_text(case["qrels"])
    expected_run = reference.read_run_text(case["run"])
    aggregate, per_query = reference.evaluate(
        expected_qrels,
        expected_run,
        case["names"],
        level=case["level"],
        complete=case["complete"],
        float32=case["float32"],
    )
    qrels = read_qrels(folder / "qrels").qrels
    qrels = {qid: judged for qid, judged in qrels.items() if judged}
    assert qrels == expected_qrels
    columns = read_run_columns(folder / "run")
    assert columns.to_run() == expected_run
    precision = "float32" if case["float32"] else "float64"
    ours = evaluate(
        qrels,
        columns,
        case["names"],
        relevance_level=case["level"],
        complete=case["complete"],
        score_precision=precision,
    )
    assert set(ours.per_query) == set(per_query)
    compared = 0
    for qid, values in per_query.items():
        for name, value in values.items():
            assert _close(ours.per_query[qid][name], value), (qid, name, ours.per_query[qid][name], value)
            compared += 1
    for name, value in aggregate.items():
        assert _close(ours.aggregate[name], value), (name, ours.aggregate[name], value)
    # One value per metric whatever else is asked: each metric alone gives the same numbers.
    for name in case["names"]:
        alone = evaluate(
            qrels,
            columns,
            [name],
            relevance_level=case["level"],
            complete=case["complete"],
            score_precision=precision,
        )
        assert _close(alone.aggregate[name], ours.aggregate[name]), name
    return compared


def test_random_nasty_cases_match_the_reference(tmp_path: Path) -> None:
    started = time.perf_counter()
    compared = 0
    for seed in range(N_CASES):
        case = generate_case(seed)
        folder = tmp_path / str(seed)
        folder.mkdir()
        try:
            compared += _check_case(case, folder)
        except AssertionError as error:
            raise AssertionError(f"case {seed}: {case}") from error
    seconds = time.perf_counter() - started
    assert compared > 5 * N_CASES
    assert seconds < 60, f"{N_CASES} cases took {seconds:.1f} s"


@pytest.mark.parametrize("seed", range(3))
def test_generated_cases_are_nasty(seed: int) -> None:
    # The generator must keep producing what the differential test is for.
    texts = [generate_case(seed * 100 + offset) for offset in range(100)]
    runs = "".join(case["run"] for case in texts)
    qrels = "".join(case["qrels"] for case in texts)
    assert "0x1" in runs and "#" in runs and "more junk" in runs and "\t" in runs
    assert ".5" in qrels and "-2" in qrels and "#" in qrels
    assert {case["level"] for case in texts} >= {-2, -1, 0, 1, 2}
    assert any(case["float32"] for case in texts) and any(case["complete"] for case in texts)
