"""UltraRAG parameter files give UltraRAG's own TREC numbers.

UltraRAG's evaluation server (servers/evaluation/src/evaluation.py in OpenBMB/UltraRAG) reads qrels and
runs with plain Python and hands them to pytrec_eval, which ranks scores as C floats. UltraRAG itself is
not installable here (the PyPI name belongs to another project), so its two readers are restated below
(:func:`ultrarag_qrels`, :func:`ultrarag_run`), each rule checked against hand-worked values, and its
evaluation is pytrec_eval itself. The harness must give the same per-query values and means, through
``harness run`` on a parameter file and through ``evaluate --input-rules ultrarag --score-precision
float32``; the ``harness`` profile and ``score_precision: float64`` still give trec_eval 10's numbers.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import pytrec_eval
import yaml

from harness.api.run_file_commands import evaluate as evaluate_command
from harness.cli import main
from harness.core.errors import HarnessError
from harness.experiments import ultrarag

KS = [1, 3, 5, 10]
NAMES = ["map", "mrr", *(f"{family}@{k}" for family in ("ndcg", "p", "recall") for k in KS)]
TREC_KEYS = {"map": "map", "mrr": "recip_rank"} | {
    f"{family}@{k}": f"{trec}_{k}"
    for family, trec in (("ndcg", "ndcg_cut"), ("p", "P"), ("recall", "recall"))
    for k in KS
}
N_CASES = 150


# ------------------------------------------------------------------------------ UltraRAG's readers


def _lines(path: Path) -> list[str]:
    """The file as UltraRAG iterates it: UTF-8 text (a BOM kept), universal newlines."""
    with open(path, encoding="utf-8") as handle:
        return list(handle)


def ultrarag_qrels(path: Path) -> dict[str, dict[str, int]]:
    """UltraRAG's _load_qrels: whitespace-split lines of 4+ fields; int() of the grade, else 1 ('0' -> 0)."""
    qrels: dict[str, dict[str, int]] = {}
    for line in _lines(path):
        fields = line.strip().split()
        if len(fields) >= 4:
            try:
                grade = int(fields[3])
            except ValueError:
                grade = 0 if fields[3] == "0" else 1
            qrels.setdefault(fields[0], {})[fields[2]] = grade
    return qrels


def ultrarag_run(path: Path) -> dict[str, dict[str, float]]:
    """UltraRAG's _load_run: lines of 6+ fields; float() of the score, else 0.0; the last line of a pair wins."""
    run: dict[str, dict[str, float]] = {}
    for line in _lines(path):
        fields = line.strip().split()
        if len(fields) >= 6:
            try:
                score = float(fields[4])
            except ValueError:
                score = 0.0
            run.setdefault(fields[0], {})[fields[2]] = score
    return run


def ultrarag_evaluate(
    qrels_path: Path, run_path: Path
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """UltraRAG's eval_with_pytrec + evaluate_trec: (means as it writes them, per-query values)."""
    measures = {"recip_rank", "map", *(f"{m}.{k}" for m in ("ndcg_cut", "P", "recall") for k in KS)}
    per_query = pytrec_eval.RelevanceEvaluator(ultrarag_qrels(qrels_path), measures).evaluate(
        ultrarag_run(run_path)
    )
    ours = {qid: {name: values[TREC_KEYS[name]] for name in NAMES} for qid, values in per_query.items()}
    means = {name: sum(values[name] for values in ours.values()) / len(ours) for name in NAMES}
    return means, ours


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def test_ultrarags_readers_as_restated_here_on_hand_worked_lines(tmp_path: Path) -> None:
    qrels = _write(
        tmp_path / "qrels",
        "\ufeffq1 0 a 1\n"  # the BOM stays in the first query id
        "q2 0 a 2.0\nq2 0 b 0.0\nq2 0 c 0.5\nq2 0 d 0\nq2 0 e -1\nq2 0 f +2\nq2 0 g 1_0\nq2 0 h abc\n"
        "q2 0 i 3 extra\nq2 0 j\nq2\xa00\xa0k\xa02\r"  # a no-break space splits; a lone CR ends a line
        "q2 0 l 1\r\nq2 0 a 3\n",  # CRLF; a repeated pair keeps its last line
    )
    assert ultrarag_qrels(qrels) == {
        "\ufeffq1": {"a": 1},
        "q2": {"a": 3, "b": 1, "c": 1, "d": 0, "e": -1, "f": 2, "g": 10, "h": 1, "i": 3, "k": 2, "l": 1},
    }
    run = _write(
        tmp_path / "run",
        "q Q0 a 1 0x1p-1 t\nq Q0 b 2 1_5 t\nq Q0 c 3 inf t\nq Q0 d 4 abc t\nq Q0 e 5 -1e400 t\n"
        "q Q0 f 6 0.25\nq Q0 g 7 0.5 t junk\rq Q0 h 8 0.75 t\nq Q0 h 9 0.125 t\n",
    )
    assert ultrarag_run(run) == {
        "q": {"a": 0.0, "b": 15.0, "c": float("inf"), "d": 0.0, "e": float("-inf"), "g": 0.5, "h": 0.125}
    }


# ------------------------------------------------------------------------------- parameter files


def parameter_file(folder: Path, qrels: Path, run: Path, **harness_keys: str) -> Path:
    section = {
        "ir_metrics": ["mrr", "map", "recall", "ndcg", "precision"],
        "ks": KS,
        "qrels_path": str(qrels),
        "run_path": str(run),
        "save_path": str(folder / "out" / "res.json"),
        **harness_keys,
    }
    path = folder / "eval_trec_parameter.yaml"
    path.write_text(yaml.safe_dump({"evaluation": section}), encoding="utf-8")
    return path


def run_parameter_file(folder: Path, *overrides: str) -> dict[str, float]:
    parameters = folder / "eval_trec_parameter.yaml"
    assert main(["run", str(parameters), "--set", f"output={folder / 'exp'}", *overrides]) == 0
    return json.loads((folder / "out" / "res.json").read_text(encoding="utf-8"))


def test_the_issue_reproducer_gives_ultrarags_numbers_and_the_harness_profile_trec_eval_10s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    qrels = _write(tmp_path / "qrels", "q1 0 a 1\nq1 0 b 0\n")
    run = _write(tmp_path / "run", "q1 Q0 a 1 0.30000000000000004 t\nq1 Q0 b 2 0.3 t\n")
    parameter_file(tmp_path, qrels, run)
    saved = run_parameter_file(tmp_path)
    # float32 ties a and b; pytrec_eval then ranks b (the larger docid) first.
    assert (saved["map"], saved["mrr"], saved["ndcg@1"]) == (0.5, 0.5, 0.0)
    assert (
        "profile ultrarag: read with --input-rules ultrarag, scores ranked in float32"
        in capsys.readouterr().out
    )
    settings = json.loads((tmp_path / "out" / "res.harness.json").read_text())["settings"]
    assert (settings["input_rules"], settings["score_precision"]) == ("ultrarag", "float32")
    means, _ = ultrarag_evaluate(qrels, run)
    assert (means["map"], means["mrr"], means["ndcg@1"]) == (0.5, 0.5, 0.0)
    for override in ("evaluation.profile=harness", "evaluation.score_precision=float64"):
        saved = run_parameter_file(tmp_path, "--set", override)
        assert (saved["map"], saved["mrr"], saved["ndcg@1"]) == (1.0, 1.0, 1.0), override


def test_an_unknown_profile_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qrels = _write(tmp_path / "qrels", "q1 0 a 1\n")
    run = _write(tmp_path / "run", "q1 Q0 a 1 1 t\n")
    parameter_file(tmp_path, qrels, run, profile="trec_eval")
    assert main(["run", str(tmp_path / "eval_trec_parameter.yaml")]) == 2
    assert "unknown profile 'trec_eval'; choose one of ultrarag, harness" in capsys.readouterr().err


def test_ultrarags_grade_rules_reach_the_numbers(tmp_path: Path) -> None:
    # 2.0 is 1 (relevant at level 1 but gain 1, not 2), 0.0 and 0.5 are relevant, a short line is skipped.
    qrels = _write(tmp_path / "qrels", "q 0 a 2.0\nq 0 b 0.0\nq 0 c 0.5\nq 0 d 2\nq 0 e\n")
    run = _write(tmp_path / "run", "q Q0 e 1 0.9 t\nq Q0 b 2 0.8 t\nq Q0 a 3 0x1p-1 t\nq Q0 d 4 0.1 t\n")
    result = evaluate_command(
        qrels=qrels,
        run=run,
        metrics=["p@2", "recall@4", "mrr"],
        input_rules="ultrarag",
        score_precision="float32",
    )
    # Ranking e (unjudged), b (1), d (2, 0.1 > 0x1p-1 read as 0), a (1): P@2 1/2, recall@4 3/4, MRR 1/2.
    assert result.evaluation.aggregate == {"p@2": 0.5, "recall@4": 0.75, "mrr": 0.5}
    assert any("grades that are not whole numbers read as 1" in message for message in result.messages)
    assert any("1 scores that float() cannot read taken as 0" in message for message in result.messages)
    with pytest.raises(HarnessError, match=r"qrels:5: found 3 columns"):
        evaluate_command(qrels=qrels, run=run, metrics=["mrr"])  # the strict default refuses the short line
    # trec_eval's atol reads 2.0 as 2 and 0.0, 0.5 as 0; 0x1p-1 is 0.5: e, b (0), a (2), d (2).
    _write(qrels, "q 0 a 2.0\nq 0 b 0.0\nq 0 c 0.5\nq 0 d 2\n")
    strict = evaluate_command(qrels=qrels, run=run, metrics=["p@2", "recall@4", "mrr"]).evaluation
    assert strict.aggregate == {"p@2": 0.0, "recall@4": 1.0, "mrr": 1 / 3}


def test_a_nan_score_under_ultrarags_rules_is_one_error_line(tmp_path: Path, capsys) -> None:
    qrels = _write(tmp_path / "qrels", "q 0 a 1\n")
    run = _write(tmp_path / "run", "q Q0 a 1 0.5 t\nq Q0 b 2 nan t\n")
    assert main(["evaluate", str(qrels), str(run), "--input-rules", "ultrarag"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"error: {run}:2: score 'nan' is NaN: UltraRAG hands it to pytrec_eval"
    )


# --------------------------------------------------------------------------------- random cases

DOCIDS = ["d1", "d2", "d10", "D1", "1", "01", "9", "z", "é", "文", "a-b", "CR#9"]
GRADES = ["0", "1", "2", "1", "2.0", "0.0", "0.5", "-1", "+1", "3", "1_0", "abc", "\u0661", "-0"]
TIED = [0.5, 0.25, 1.0, 0.0, 3.0]
NEAR = [0.3, 0.30000000000000004, 1.0, 1.0 + 2**-40, 0.1, 0.1 + 2**-30]  # equal pairs in float32


def _score_text(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.08:
        return rng.choice(["0x1p-1", "abc", "1_5", "inf", "-inf", "1e400", "Infinity", "+.5"])
    value = rng.choice(rng.choice([TIED, NEAR])) if roll < 0.85 else rng.uniform(-2, 2)
    return repr(value)


def _join(rng: random.Random, fields: list[str]) -> str:
    return "".join(field + rng.choice([" ", " ", "\t", "  ", "\xa0", "\x1c"]) for field in fields).rstrip(
        " \t\xa0\x1c"
    ) + rng.choice(["\n", "\n", "\n", "\r\n", "\r"])


def random_case(seed: int) -> tuple[str, str]:
    """Qrels and run text with UltraRAG's odd corners: graded and unreadable grades, float32 ties, odd
    separators and line ends, short lines, comment lines that are data, repeated pairs, a BOM."""
    rng = random.Random(seed)
    qrels, run = [], []
    for qid in rng.sample(["q1", "q2", "10", "é", "#", "q#3"], rng.randint(1, 4)):
        pool = rng.sample(DOCIDS, rng.randint(2, len(DOCIDS)))
        judged = rng.sample(pool, rng.randint(1, len(pool)))
        qrels.append(_join(rng, [qid, "0", judged[0], rng.choice(["1", "2", "2.0"])]))
        for docid in judged[1:] + rng.sample(judged, min(len(judged), rng.randint(0, 2))):  # some twice
            qrels.append(_join(rng, [qid, rng.choice(["0", "Q0"]), docid, rng.choice(GRADES)]))
        for docid in rng.sample(pool, rng.randint(1, len(pool))) + rng.sample(pool, rng.randint(0, 1)):
            extra = ["junk"] if rng.random() < 0.1 else []
            run.append(
                _join(rng, [qid, "Q0", docid, str(rng.randint(1, 99)), _score_text(rng), "tag", *extra])
            )
    for lines in (qrels, run):
        rng.shuffle(lines)
        for _ in range(rng.randint(0, 2)):
            odd = rng.choice(
                ["\n", "# a comment line\n", "q1 0 d1\n", "short line\n", "# four fields here\n"]
            )
            lines.insert(rng.randint(0, len(lines)), odd)
    bom = "\ufeff" if rng.random() < 0.1 else ""
    return bom + "".join(qrels), "".join(run)


def _differences(ours: dict[str, dict[str, float]], theirs: dict[str, dict[str, float]]) -> int:
    if set(ours) != set(theirs):
        return sum(len(values) for values in theirs.values())
    return sum(ours[qid][name] != value for qid, values in theirs.items() for name, value in values.items())


def test_ultrarag_rules_give_ultrarags_numbers_on_random_cases(tmp_path: Path) -> None:
    compared = graded = tied = 0
    for seed in range(N_CASES):
        folder = tmp_path / str(seed)
        folder.mkdir()
        qrels_text, run_text = random_case(seed)
        qrels, run = _write(folder / "qrels", qrels_text), _write(folder / "run", run_text)
        means, per_query = ultrarag_evaluate(qrels, run)
        if not per_query:
            continue
        result = evaluate_command(
            qrels=qrels, run=run, metrics=NAMES, input_rules="ultrarag", score_precision="float32"
        ).evaluation
        assert _differences(result.per_query, per_query) == 0, (seed, qrels_text, run_text)
        for name in NAMES:
            assert result.aggregate[name] == pytest.approx(means[name], rel=1e-12, abs=1e-15), (seed, name)
        compared += sum(len(values) for values in per_query.values())
        graded += any(
            grade > 1 or grade < 0 for row in ultrarag_qrels(qrels).values() for grade in row.values()
        )
        scores = [score for row in ultrarag_run(run).values() for score in row.values()]
        tied += len({float(f"{score:.7g}") for score in scores}) < len(set(scores))
    assert compared > 20 * N_CASES and graded > N_CASES / 2 and tied > N_CASES / 4


def test_parameter_files_give_ultrarags_means_on_random_cases(tmp_path: Path) -> None:
    for seed in range(0, N_CASES, 15):  # through `harness run`, the path a user takes
        folder = tmp_path / str(seed)
        folder.mkdir()
        qrels_text, run_text = random_case(seed)
        qrels, run = _write(folder / "qrels", qrels_text), _write(folder / "run", run_text)
        means, per_query = ultrarag_evaluate(qrels, run)
        if not per_query:
            continue
        parameter_file(folder, qrels, run)
        saved = run_parameter_file(folder)
        for name in NAMES:
            assert saved[ultrarag.ultrarag_metric_name(name)] == pytest.approx(
                means[name], rel=1e-12, abs=1e-15
            )


def test_the_pvalue_tool_reads_as_ultrarag_too(tmp_path: Path) -> None:
    qrels = _write(tmp_path / "qrels", "q1 0 a 2.0\nq1 0 b 0.5\nq2 0 c 1\nq2 0 d 0.0\n")
    new = _write(tmp_path / "new", "q1 Q0 b 1 0.9 t\nq1 Q0 a 2 0.3 t\nq2 Q0 d 1 0x1p1 t\nq2 Q0 c 2 0.5 t\n")
    old = _write(
        tmp_path / "old",
        "q1 Q0 a 1 0.9 t\nq1 Q0 b 2 0.3 t\nq2 Q0 c 1 0.30000000000000004 t\nq2 Q0 d 2 0.3 t\n",
    )
    section = {
        "ir_metrics": ["mrr", "map"],
        "n_resamples": 1000,
        "qrels_path": str(qrels),
        "run_new_path": str(new),
        "run_old_path": str(old),
        "save_path": str(tmp_path / "out" / "p.json"),
    }
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"evaluation": section}), encoding="utf-8")
    assert main(["run", str(tmp_path / "p.yaml"), "--set", f"output={tmp_path / 'exp'}"]) == 0
    saved = json.loads((tmp_path / "out" / "p.json").read_text())
    measures = {"recip_rank", "map"}
    judged = ultrarag_qrels(qrels)
    for key, path, trec in (("A_mean", new, "mrr"), ("B_mean", old, "mrr"), ("A_mean", new, "map")):
        per_query = pytrec_eval.RelevanceEvaluator(judged, measures).evaluate(ultrarag_run(path))
        values = [row[TREC_KEYS[trec]] for row in per_query.values()]
        assert saved[trec][key] == pytest.approx(sum(values) / len(values), abs=1e-12), (key, trec)
