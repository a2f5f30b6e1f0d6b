"""``--input-rules``: strict by default, trec_eval 10's reading exactly on request, and grades that fit.

The reference for ``trec_eval`` is trec_eval 10's own reading (get_qrels.c, get_trec_results.c,
form_res_rels.c) restated over the file's bytes below, calling the C library itself for what trec_eval
calls: ``atol`` for grades, ``strtod`` (``atof``) for scores and ``qsort`` for the ranking, so a NaN score
lands where glibc's sort puts it. Its rankings are scored by tests/trec_eval_reference.py. Random files
full of legacy corners (``2abc``, ``0x1``, ``0.5abc``, ``nan``, a lone CR, comment lines, blank lines)
must give the same per-query values, or the same refusal, as that reading.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
import trec_eval_reference as reference

from harness.api.run_file_commands import evaluate as evaluate_command
from harness.api.run_file_commands import fuse
from harness.cli import main
from harness.core.errors import HarnessError, InputError
from harness.datasets.qrels import atol_digits, read_qrels, strtod_prefix
from harness.evaluation.metrics import evaluate
from harness.evaluation.trec import read_run, read_run_columns

C_SPACE = b" \t\n\v\f\r"
NAMES = ["ndcg@5", "p@3", "recall@10", "map", "mrr", "success@1", "bpref"]
N_CASES = 200

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.atol.restype, libc.atol.argtypes = ctypes.c_long, [ctypes.c_char_p]
libc.strtod.restype, libc.strtod.argtypes = ctypes.c_double, [ctypes.c_char_p, ctypes.c_void_p]
COMPARE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))
libc.qsort.restype, libc.qsort.argtypes = None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, COMPARE]


def c_qsort(count: int, compare) -> list[int]:
    """The indices 0..count-1 as the C library's qsort orders them under ``compare(i, j)``."""
    items = (ctypes.c_int * count)(*range(count))
    libc.qsort(items, count, ctypes.sizeof(ctypes.c_int), COMPARE(lambda a, b: compare(a[0], b[0])))
    return list(items)


# ------------------------------------------------------------------ trec_eval 10's reading, restated


class Malformed(Exception):
    """Where trec_eval 10 stops reading (or reads past the end of its buffer)."""


def _skip_space(data: bytes, at: int) -> int:
    while data[at] != 10 and data[at] in C_SPACE:
        at += 1
    return at


def _field_end(data: bytes, at: int) -> int:
    while data[at] not in C_SPACE:
        at += 1
    return at


def trec_eval_qrels(data: bytes) -> dict[bytes, dict[bytes, int]]:
    """get_qrels.c: a line whose first byte is '#' is skipped (and the next line parsed, whatever it is);
    every other line is exactly four fields; rel = atol(field)."""
    data = (data if data.endswith(b"\n") else data + b"\n") + b"\0"
    qrels: dict[bytes, dict[bytes, int]] = {}
    at = 0
    while data[at]:
        if data[at] == ord("#"):
            at = data.index(b"\n", at) + 1
            if not data[at]:
                raise Malformed("reads past the end after a final comment")
        fields = []
        for _ in range(3):  # qid, iter, docno: each must be followed by more than the line's end
            at = _skip_space(data, at)
            end = _field_end(data, at)
            if data[end] == 10:
                raise Malformed("short line")
            fields.append(data[at:end])
            at = end + 1
        at = _skip_space(data, at)
        if data[at] == 10:
            raise Malformed("no relevance")
        end = _field_end(data, at)
        relevance = data[at:end]
        at = _skip_space(data, end)
        if data[at] != 10:
            raise Malformed("a fifth field")
        at += 1
        qrels.setdefault(fields[0], {})[fields[2]] = libc.atol(relevance)
    return qrels


def trec_eval_rankings(data: bytes) -> dict[bytes, list[bytes]]:
    """get_trec_results.c and form_res_rels.c: blank and '#' lines skipped, six fields or more, sim =
    atof(field); each query's lines sorted by docno, then qsort by sim descending, docno descending."""
    data = (data if data.endswith(b"\n") else data + b"\n") + b"\0"
    lines: dict[bytes, dict[bytes, float]] = {}
    at = 0
    while data[at]:
        at = _skip_space(data, at)
        if data[at] == 10:
            at += 1
            continue
        if data[at] == ord("#"):
            at = data.index(b"\n", at)
            continue
        fields = []
        for _ in range(5):  # qid, iter, docno, rank, sim
            at = _skip_space(data, at)
            end = _field_end(data, at)
            if data[end] == 10:
                raise Malformed("short line")
            fields.append(data[at:end])
            at = end + 1
        at = _skip_space(data, at)
        if data[at] == 10:
            raise Malformed("no run tag")
        at = data.index(b"\n", at) + 1
        docs = lines.setdefault(fields[0], {})
        if fields[2] in docs:
            raise Malformed("duplicate docs")
        docs[fields[2]] = libc.strtod(fields[4], None)
    rankings = {}
    for qid, docs in lines.items():
        docnos = sorted(docs)  # get_trec_results.c's qsort by (qid, docno)
        rankings[qid] = [docnos[i] for i in c_qsort(len(docnos), comp_sim_docno(docnos, docs))]
    return rankings


def comp_sim_docno(docnos: list[bytes], sims: dict[bytes, float]):
    """form_res_rels.c's comparison of the documents at two positions of ``docnos``."""

    def compare(i: int, j: int) -> int:
        if sims[docnos[i]] > sims[docnos[j]]:
            return -1
        if sims[docnos[i]] < sims[docnos[j]]:
            return 1
        return (docnos[j] > docnos[i]) - (docnos[j] < docnos[i])

    return compare


def trec_eval_values(qrels_bytes: bytes, run_bytes: bytes, names: list[str]) -> dict[str, dict[str, float]]:
    """Per-query values of trec_eval 10 on these bytes (Malformed where it stops)."""
    qrels = {
        qid.decode(): {d.decode(): rel for d, rel in row.items()}
        for qid, row in trec_eval_qrels(qrels_bytes).items()
    }
    rankings = trec_eval_rankings(run_bytes)
    run = {
        qid.decode(): {docno.decode(): float(len(ranked) - rank) for rank, docno in enumerate(ranked)}
        for qid, ranked in rankings.items()
    }
    return reference.evaluate(qrels, run, names)[1]


# --------------------------------------------------------------------------- hand-worked values


@pytest.mark.parametrize(
    ("text", "value"),
    [("0.5abc", 0.5), ("abc", 0.0), ("1e", 1.0), ("1e+", 1.0), (".e1", 0.0), ("0x1p-1", 0.5), ("0x", 0.0),
     ("0x1p", 1.0), ("infinit", math.inf), ("-INFINITY", -math.inf), ("1e400", math.inf), ("+.5", 0.5),
     ("-", 0.0), ("0x1.8p1x", 3.0), ("0x1p99999", math.inf), ("1.5e3x", 1500.0), ("-0X1P+0", -1.0)],
)  # fmt: skip
def test_strtod_prefix_is_the_c_librarys_strtod(text: str, value: float) -> None:
    assert strtod_prefix(text) == value == libc.strtod(text.encode(), None)


@pytest.mark.parametrize("text", ["nan", "NaN", "-nan", "nan(12)", "nan(", "nanx"])
def test_strtod_prefix_reads_nan_as_strtod_does(text: str) -> None:
    assert math.isnan(strtod_prefix(text)) and math.isnan(libc.strtod(text.encode(), None))


@pytest.mark.parametrize(
    ("text", "value"),
    [("2abc", 2), ("0x1", 0), ("1.5", 1), ("-0.5", 0), ("abc", 0), ("+", 0), ("+7", 7), ("-3x", -3)],
)
def test_atol_digits_is_the_c_librarys_atol(text: str, value: int) -> None:
    assert atol_digits(text) == value == libc.atol(text.encode())


def test_strtod_and_atol_equal_the_c_librarys_on_random_fields() -> None:
    rng = random.Random(5)
    alphabet = "0123456789abcdefxXpPeE+-.nNaAiIfFtTyY()_9000"
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        ours, theirs = strtod_prefix(text), libc.strtod(text.encode(), None)
        assert ours == theirs or (math.isnan(ours) and math.isnan(theirs)), text
        long_max = 2**63 - 1
        assert max(-long_max - 1, min(long_max, atol_digits(text))) == libc.atol(text.encode()), text


def _write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def test_trec_eval_qrels_rules_on_hand_worked_lines(tmp_path: Path) -> None:
    # A first-byte '#' line is skipped and the line after it read whatever it is; a lone CR separates
    # fields; atol reads 2abc as 2, 0x1 as 0 and 1.5 as 1; a BOM stays in the first id.
    text = "\ufeffq 0 a 1\n#c\n# x y z\nq\r0\rb\r2abc\nq 0 c 0x1\r\nq\t0 d 1.5  \n"
    qrels = read_qrels(_write(tmp_path / "qrels", text), rules="trec_eval").qrels
    assert qrels == {"\ufeffq": {"a": 1}, "#": {"y": 0}, "q": {"b": 2, "c": 0, "d": 1}}
    assert qrels == trec_eval_values_qrels(text.encode())
    for bad, line in (
        ("q 0 a 1\n\nq 0 b 1\n", 2),
        ("q 0 a 1\n # c\n", 2),
        ("q 0 a 1 5\n", 1),
        ("q 0 a 1\n#c\n", 2),
    ):
        with pytest.raises(InputError, match=rf"qrels:{line}: "):
            read_qrels(_write(tmp_path / "qrels", bad), rules="trec_eval")
        with pytest.raises(Malformed):
            trec_eval_qrels(bad.encode())


def trec_eval_values_qrels(data: bytes) -> dict[str, dict[str, int]]:
    return {
        qid.decode(): {d.decode(): rel for d, rel in row.items()}
        for qid, row in trec_eval_qrels(data).items()
    }


def test_trec_eval_run_rules_on_hand_worked_lines(tmp_path: Path) -> None:
    # A lone CR does not end a line: the second record is fields 7-12 of the first line, ignored.
    text = "q Q0 a 1 0.5abc t\rq Q0 z 2 9 t\n  # indented comment\n\nq Q0 b 2 nan t\nq Q0 c 3 nan t x\nq Q0 d 4 abc t\n"
    columns = read_run_columns(_write(tmp_path / "run", text), rules="trec_eval")
    # NaN compares equal to every score, so only docnos decide against it: glibc's merge sort of a (0.5),
    # b (nan), c (nan), d (abc: 0) gives d, c, b, a.
    ranked = [docid for docid, _ in sorted(columns.to_run()["q"].items(), key=lambda item: -item[1])]
    assert (
        ranked
        == ["d", "c", "b", "a"]
        == [docid.decode() for docid in trec_eval_rankings(text.encode())[b"q"]]
    )
    assert (
        columns.extra_column_lines == 2
        and "1 queries with a NaN score ranked as trec_eval 10" in columns.notes[0]
    )
    for bad in ("q Q0 a 1 0.5\n", "q Q0 a 1 0.5 t\nq Q0 a 2 0.4 t\n"):
        with pytest.raises(InputError, match=r"run:\d: "):
            read_run_columns(_write(tmp_path / "run", bad), rules="trec_eval")


def test_the_strict_default_refuses_what_trec_eval_reads_silently(tmp_path: Path, capsys) -> None:
    qrels = _write(tmp_path / "qrels", "q 0 a 2abc\nq 0 b 1\n")
    run = _write(tmp_path / "run", "q Q0 a 1 0.5abc t\nq Q0 b 2 0.25 t\n")
    assert main(["evaluate", str(qrels), str(run)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {qrels}:1: relevance '2abc' is not an integer (relevance grades are whole numbers such as 0, 1, 2)"
    )
    assert (
        main(
            [
                "evaluate",
                str(qrels),
                str(run),
                "--input-rules",
                "trec_eval",
                "--metrics",
                "p@1",
                "-o",
                str(tmp_path / "o.json"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "p@1  1.0000" in out and "read with --input-rules trec_eval, scores ranked in float64" in out
    _write(qrels, "q 0 a 2\nq 0 b 1\n")
    assert main(["evaluate", str(qrels), str(run)]) == 2
    assert f"error: {run}:1: score '0.5abc' is not a number" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ random cases

IDS = ["d1", "d2", "d10", "1", "01", "9", "é", "文", "CR#9", "a-b", "z"]
GRADES = ["0", "1", "2", "2abc", "0x1", "1.5", "-0.5", "+1", "abc", "3e1", "-1"]
SCORES = ["0.5", "0.25", "1", "0.5abc", "abc", "nan", "NaN", "-nan", "0x1p-1", "inf", "1e400", "1e", ".5", "0.3", "0.30000000000000004"]  # fmt: skip
SEPARATORS = [" ", " ", "\t", "  ", "\r", "\v", "\f"]


def _line(rng: random.Random, fields: list[str]) -> str:
    lead = rng.choice(["", "", "", " ", "\t"])
    end = rng.choice(["\n", "\n", "\n", "\r\n", " \n"])
    return lead + "".join(field + rng.choice(SEPARATORS) for field in fields[:-1]) + fields[-1] + end


def random_case(seed: int) -> tuple[str, str]:
    """Qrels and run text in every legacy shape trec_eval reads, and now and then one it refuses."""
    rng = random.Random(seed)
    qrels, run = [], []
    for qid in rng.sample(["q1", "2", "10", "é", "q#3"], rng.randint(1, 4)):
        pool = rng.sample(IDS, rng.randint(2, len(IDS)))
        for docid in rng.sample(pool, rng.randint(1, len(pool))):
            qrels.append(_line(rng, [qid, rng.choice(["0", "Q0"]), docid, rng.choice(GRADES)]))
        for docid in rng.sample(pool, rng.randint(1, len(pool))):
            extra = ["more", "junk"] if rng.random() < 0.1 else []
            run.append(
                _line(rng, [qid, "Q0", docid, str(rng.randint(0, 99)), rng.choice(SCORES), "t", *extra])
            )
    rng.shuffle(qrels)
    rng.shuffle(run)
    odd_qrels = ["# a comment\n", "# two words x\n", "\n", " # indented 1 2\n", "q1 0 d1\n"]
    odd_run = ["# a comment\n", "   # indented\n", "\n", "  \t \n", "q1 Q0 d1 1 0.5\n"]
    for lines, odd, chance in ((qrels, odd_qrels, 0.25), (run, odd_run, 0.5)):
        if rng.random() < chance:
            lines.insert(rng.randint(0, len(lines)), rng.choice(odd))
    if rng.random() < 0.05:  # a record ended by a lone CR: trec_eval reads on into the next record
        run.append("q1 Q0 cr1 1 0.5 t\rq1 Q0 cr2 2 0.6 t\n")
    return "".join(qrels), "".join(run)


def _outcome(qrels: Path, run: Path, rules: str) -> dict[str, dict[str, float]] | None:
    try:
        return evaluate_command(qrels=qrels, run=run, metrics=NAMES, input_rules=rules).evaluation.per_query
    except HarnessError:
        return None


def test_trec_eval_rules_give_trec_eval_10s_values_on_random_legacy_files(tmp_path: Path) -> None:
    agreed_values = agreed_refusals = nan_cases = 0
    for seed in range(N_CASES):
        qrels_text, run_text = random_case(seed)
        qrels, run = _write(tmp_path / f"q{seed}", qrels_text), _write(tmp_path / f"r{seed}", run_text)
        try:
            theirs = trec_eval_values(qrels_text.encode(), run_text.encode(), NAMES)
        except Malformed:
            theirs = None
        theirs = theirs or None  # no judged query in the run: the harness refuses such a pair
        ours = _outcome(qrels, run, "trec_eval")
        assert (ours is None) == (theirs is None), (seed, qrels_text, run_text)
        if theirs is None:
            agreed_refusals += 1
            continue
        assert set(ours) == set(theirs), seed
        for qid, values in theirs.items():
            for name, value in values.items():
                assert ours[qid][name] == pytest.approx(value, rel=1e-12, abs=1e-12), (seed, qid, name)
                agreed_values += 1
        nan_cases += "nan" in run_text.lower()
    assert agreed_values > 10 * N_CASES and agreed_refusals > 5 and nan_cases > N_CASES / 4


# ------------------------------------------------------------------ grades and scores that cannot go


@pytest.mark.parametrize("rules", ["strict", "trec_eval", "ultrarag"])
@pytest.mark.parametrize("grade", ["9223372036854775808", "-9223372036854775809", "99999999999999999999999"])
def test_a_grade_beyond_a_c_long_is_one_error_line_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rules: str, grade: str
) -> None:
    qrels = _write(tmp_path / "qrels", f"q 0 a 1\nq 0 b {grade}\n")
    run = _write(tmp_path / "run", "q Q0 a 1 0.5 t\nq Q0 b 2 0.25 t\n")
    assert main(["evaluate", str(qrels), str(run), "--input-rules", rules]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {qrels}:2: relevance '{grade}'"), err


def test_a_beir_grade_beyond_a_c_long_names_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "test.tsv", "query-id\tcorpus-id\tscore\nq\ta\t1\nq\tb\t9223372036854775808\n")
    with pytest.raises(InputError, match=r"test.tsv:3: relevance '9223372036854775808' does not fit"):
        read_qrels(path, layout="beir")


def test_in_memory_grades_beyond_a_c_long_are_refused() -> None:
    with pytest.raises(HarnessError, match=r"relevance of query 'q', document 'a' is 9223372036854775808"):
        evaluate({"q": {"a": 2**63}}, {"q": {"a": 1.0}}, ["p@1"])


def test_huge_grades_that_fit_are_scored_from_trec_evals_definitions_without_pytrec_eval() -> None:
    # pytrec_eval allocates a counter per grade: 2^40 would crash it, 2^32 gives 0. Such queries go direct.
    qrels = {"q": {"a": 2**40, "b": 1, "c": 0}, "r": {"a": 2**62}}
    run = {"q": {"c": 3.0, "a": 2.0, "b": 1.0}, "r": {"a": 1.0, "x": 2.0}}
    names = ["ndcg@2", "p@2", "map", "mrr", "recall@3"]
    ours = evaluate(qrels, run, names).per_query
    theirs = reference.evaluate(qrels, run, names)[1]
    for qid, values in theirs.items():
        for name, value in values.items():
            assert ours[qid][name] == pytest.approx(value, rel=1e-12), (qid, name)


def test_a_crashing_grade_is_no_longer_a_traceback_in_a_fresh_process(tmp_path: Path) -> None:
    qrels = _write(tmp_path / "qrels", "q 0 a 1099511627776\nq 0 b 0\n")
    run = _write(tmp_path / "run", "q Q0 a 1 0.5 t\nq Q0 b 2 0.25 t\n")
    done = subprocess.run(
        [sys.executable, "-m", "harness", "evaluate", str(qrels), str(run), "--metrics", "ndcg@2", "map"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "map     1.0000" in done.stdout and "ndcg@2  1.0000" in done.stdout


def test_fuse_refuses_infinite_and_nan_scores_naming_the_line(tmp_path: Path) -> None:
    good = _write(tmp_path / "good", "q Q0 a 1 0.5 t\nq Q0 b 2 0.25 t\n")
    infinite = _write(tmp_path / "inf", "q Q0 a 1 0.5 t\nq Q0 b 2 inf t\n")
    with pytest.raises(InputError, match=r"inf:2: score 'inf' is infinite"):
        fuse(runs=[good, infinite], fuse="combsum", norm="min-max", output=tmp_path / "f")
    nan = _write(tmp_path / "nan", "q Q0 a 1 nan t\n")
    with pytest.raises(InputError, match=r"nan:1: score 'nan' is not a finite number"):
        fuse(runs=[good, nan], fuse="rrf", output=tmp_path / "f", input_rules="trec_eval")
    assert read_run(infinite) == {"q": {"a": 0.5, "b": math.inf}}  # evaluation still reads it, as trec_eval


def test_input_rules_is_one_option_of_evaluate_compare_and_fuse(tmp_path: Path, capsys) -> None:
    for command in ("evaluate", "compare", "fuse"):
        assert main([command, "--help"]) == 0
        assert "--input-rules {strict,trec_eval,ultrarag}" in capsys.readouterr().out
    assert main(["evaluate", "q", "r", "--input-rules", "bogus"]) == 2
    assert "invalid choice: 'bogus'" in capsys.readouterr().err
