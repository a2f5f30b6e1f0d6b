"""Runs and qrels as ranx JSON, parquet and gzip, and ir_datasets sources: read, written, scored alike.

Round trips go through ranx itself (``ranx.Run`` / ``ranx.Qrels`` save and load); ``harness evaluate`` on the
JSON and parquet forms of a run must equal the TREC form bit for bit, ties and awkward floats included.
Every bad input is one error line naming the file (and the query, or the missing columns).
"""

from __future__ import annotations

import gzip
import json
import math
import random
import sys
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ranx

from harness.api import evaluate as evaluate_command
from harness.api import fuse
from harness.cli import main
from harness.core.errors import HarnessError, InputError
from harness.datasets.qrels import irds_dataset_id, read_qrels
from harness.evaluation.trec import read_run, sorted_ranking, write_run

METRICS = ["ndcg@10", "ndcg", "map", "mrr@10", "p@5", "recall@100", "rprec", "bpref", "success@1"]


def _tied_run(seed: int, n_queries: int = 25, n_docs: int = 80) -> dict[str, dict[str, float]]:
    """Heavy ties, numeric docids (string order differs from numeric), floats that differ past float32."""
    rng = random.Random(seed)
    palette = [0.5, 0.25, 1.0, 0.3, 0.30000000000000004, 1.0 + 2**-40, -0.0, 1e-300, 1 / 3]
    return {
        f"q{q}": {str(d): rng.choice([*palette, rng.random()]) for d in rng.sample(range(1, 500), n_docs)}
        for q in range(n_queries)
    }


def _graded_qrels(run: dict[str, dict[str, float]], seed: int) -> dict[str, dict[str, int]]:
    rng = random.Random(seed)
    qrels = {
        qid: {docid: rng.choice([0, 1, 1, 2, 3]) for docid in rng.sample(sorted(docs), 12)}
        for qid, docs in run.items()
    }
    qrels["unretrieved"] = {"7": 1}
    return qrels


def _trec_qrels(path: Path, qrels: dict[str, dict[str, int]]) -> Path:
    path.write_text("".join(f"{q} 0 {d} {g}\n" for q, judged in qrels.items() for d, g in judged.items()))
    return path


def _one_line_error(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


# --- round trips against ranx ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_ranx_json_and_parquet_runs_read_as_ranx_wrote_them(tmp_path: Path, seed: int) -> None:
    run = _tied_run(seed)
    ranx_run = ranx.Run(run, name="ranx")
    ranx_run.save(str(tmp_path / "run.json"))
    ranx_run.save(str(tmp_path / "run.parquet"))
    ranx_run.save(str(tmp_path / "run.trec"))
    expected = ranx_run.to_dict()
    assert expected == run
    for name in ("run.json", "run.parquet", "run.trec"):
        assert read_run(tmp_path / name) == expected, name


@pytest.mark.parametrize("seed", range(3))
def test_runs_the_harness_writes_load_in_ranx(tmp_path: Path, seed: int) -> None:
    run = _tied_run(seed)
    write_run(tmp_path / "run.json", run, tag="t")
    write_run(tmp_path / "run.parquet", run, tag="t")
    assert ranx.Run.from_file(str(tmp_path / "run.json")).to_dict() == run
    # ranx's from_parquet asserts object-dtype ids, which pandas 3 no longer gives (even for ranx's own
    # files): load the frame with pandas and hand it to ranx as strings.
    frame = pd.read_parquet(tmp_path / "run.parquet")
    assert list(frame.columns) == ["q_id", "doc_id", "score"]
    assert ranx.Run.from_df(frame.astype({"q_id": object, "doc_id": object})).to_dict() == run
    # Rows are in trec_eval order, so a reader that trusts the order ranks as trec_eval does.
    for qid, rows in frame.groupby("q_id", sort=False):
        assert list(rows["doc_id"]) == [docid for docid, _ in sorted_ranking(run[qid])]


def test_ranx_json_qrels_read_as_ranx_wrote_them(tmp_path: Path) -> None:
    qrels = _graded_qrels(_tied_run(4), 4)
    ranx.Qrels(qrels).save(str(tmp_path / "qrels.json"))
    assert read_qrels(tmp_path / "qrels.json").qrels == qrels
    with gzip.open(tmp_path / "qrels.json.gz", "wt", encoding="utf-8") as handle:
        json.dump(qrels, handle)
    assert read_qrels(tmp_path / "qrels.json.gz").qrels == qrels
    (tmp_path / "qrels.noext").write_text(json.dumps(qrels))  # told apart by content: a leading {
    assert read_qrels(tmp_path / "qrels.noext").qrels == qrels


def test_gzip_json_and_trec_round_trip_and_compress_deterministically(tmp_path: Path) -> None:
    run = _tied_run(5)
    for name in ("run.json.gz", "run.trec.gz"):
        write_run(tmp_path / name, run, tag="t")
        first = (tmp_path / name).read_bytes()
        assert first[:2] == b"\x1f\x8b" and read_run(tmp_path / name) == run
        write_run(tmp_path / name, run, tag="t")
        assert (tmp_path / name).read_bytes() == first  # no timestamp in the gzip header
    assert json.loads(gzip.decompress((tmp_path / "run.json.gz").read_bytes())) == run


# --- the same numbers whatever the container --------------------------------------------------------


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("seed", range(3))
def test_evaluate_gives_the_same_bits_for_every_container(tmp_path: Path, seed: int, precision: str) -> None:
    run = _tied_run(seed)
    qrels = _graded_qrels(run, seed)
    qrels_trec = _trec_qrels(tmp_path / "qrels.txt", qrels)
    ranx.Qrels(qrels).save(str(tmp_path / "qrels.json"))
    paths = [
        tmp_path / name for name in ("run.trec", "run.trec.gz", "run.json", "run.json.gz", "run.parquet")
    ]
    for path in paths:
        write_run(path, run, tag="t")
    ranx.Run(run).save(str(tmp_path / "ranx.parquet"))
    paths.append(tmp_path / "ranx.parquet")

    def scored(qrels_path: Path, run_path: Path) -> tuple[dict, dict]:
        result = evaluate_command(
            qrels=qrels_path, run=run_path, metrics=METRICS, score_precision=precision, per_query=True
        )
        return result.evaluation.aggregate, result.evaluation.per_query

    expected = scored(qrels_trec, paths[0])
    assert any(value not in (0.0, 1.0) for value in expected[0].values())
    for path in paths[1:]:
        assert scored(qrels_trec, path) == expected, path.name  # == on floats: bit for bit
    assert scored(tmp_path / "qrels.json", paths[2]) == expected


def test_a_json_number_is_read_as_its_trec_text_is(tmp_path: Path) -> None:
    # The same texts in both containers: a JSON number is a float64 exactly as strtod reads the text.
    texts = ["0.3", "0.30000000000000004", "3", "1e-320", "-0.0", "1e400", "123456789012345678901", "2.5E-3"]
    lines, docs = [], []
    for index, text in enumerate(texts):
        lines.append(f"q1 Q0 d{index} {index + 1} {text} t\n")
        docs.append(f'"d{index}": {text}')
    (tmp_path / "run.trec").write_text("".join(lines))
    (tmp_path / "run.json").write_text('{"q1": {' + ", ".join(docs) + "}}")
    trec, from_json = read_run(tmp_path / "run.trec"), read_run(tmp_path / "run.json")
    assert from_json == trec and from_json["q1"]["d5"] == math.inf
    assert [math.copysign(1, v) for v in from_json["q1"].values()] == [
        math.copysign(1, v) for v in trec["q1"].values()
    ]


def test_fuse_writes_the_container_its_output_names(tmp_path: Path) -> None:
    first, second = _tied_run(6), _tied_run(7)
    write_run(tmp_path / "a.trec", first, tag="a")
    write_run(tmp_path / "b.json", second, tag="b")
    for name in ("fused.trec", "fused.json", "fused.parquet"):
        fuse(runs=[tmp_path / "a.trec", tmp_path / "b.json"], fuse="rrf", output=tmp_path / name, top_k=50)
    fused = read_run(tmp_path / "fused.trec")
    assert read_run(tmp_path / "fused.json") == fused == read_run(tmp_path / "fused.parquet")
    assert ranx.Run.from_file(str(tmp_path / "fused.json")).to_dict() == fused
    assert all(len(docs) == 50 for docs in fused.values())


def test_parquet_columns_as_pyterrier_and_ir_datasets_name_them(tmp_path: Path) -> None:
    # pyterrier: qid, docid (its internal int), docno (the id), rank, score, query (the text).
    frame = pa.table(
        {
            "qid": ["1", "1", "2"],
            "docid": [10, 11, 12],
            "docno": ["D1", "D2", "D1"],
            "rank": [0, 1, 0],
            "score": [2.0, 1.0, 5.0],
            "query": ["a b", "a b", "c"],
        }
    )
    pq.write_table(frame, tmp_path / "pyterrier.parquet")
    assert read_run(tmp_path / "pyterrier.parquet") == {"1": {"D1": 2.0, "D2": 1.0}, "2": {"D1": 5.0}}
    # ir_datasets scoreddocs: query_id, doc_id; integer ids become their decimal text, int scores floats.
    pq.write_table(
        pa.table({"query_id": [7, 7], "doc_id": [3, 4], "score": [1, 2]}), tmp_path / "irds.parquet"
    )
    assert read_run(tmp_path / "irds.parquet") == {"7": {"3": 1.0, "4": 2.0}}


# --- one line for bad input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "found"),
    [
        ("run.lz4", b"\x04\x22\x4d\x18rest", "LZ4 (ranx's .lz4)"),
        ("run", b"\x1f\x8b\x08\x00rest", "gzip-compressed, but its name does not end in .gz"),
        ("run.out", b"PK\x03\x04rest", "a zip archive"),
        ("run.out", b"q1 Q0 d1 1 \x00 0.5 t\n", "binary data (it holds NUL bytes)"),
        ("run.jsonl", b'{"qid": "q1"}\n', "JSON lines"),
        ("run.parquet.gz", b"PAR1", "gzip-compressed parquet"),
    ],
)
def test_an_unknown_container_is_one_line(
    tmp_path: Path, capsys, name: str, content: bytes, found: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\n")
    err = _one_line_error(capsys, ["evaluate", str(tmp_path / "qrels.txt"), str(path)])
    assert f"run file {path} is {found}" in err and "ranx JSON {qid: {docid: score}}" in err


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            '{"q1": {"d1": 0.5}, "q2": {"d1": "0.5"}}',
            "query 'q2': document 'd1' has score '\"0.5\"' (str), not a number",
        ),
        ('{"q1": {"d1": true}}', "query 'q1': document 'd1' has score 'true' (bool), not a number"),
        ('{"q1": {"d1": null}}', "query 'q1': document 'd1' has score 'null' (NoneType), not a number"),
        ('{"q1": {"d1": NaN}}', "query 'q1': document 'd1' has score NaN"),
        ('{"q1": {"d1": [1]}}', "query 'q1': document 'd1' has score '[1]' (list), not a number"),
        ('{"q1": [["d1", 0.5]]}', "query 'q1' holds list, not {docid: score}"),
        ('[{"q1": {"d1": 0.5}}]', "a ranx JSON run is one object, found list"),
        ('{"q1": {}}', "no documents in the run"),
        ('{"q1": {"d1": 0.5}', "not valid JSON"),
    ],
)
def test_a_json_run_that_is_not_numbers_names_file_and_query(
    tmp_path: Path, capsys, text: str, problem: str
) -> None:
    path = tmp_path / "run.json"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        read_run(path)
    assert str(caught.value).startswith(f"{path}") and problem in str(caught.value)
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\n")
    assert problem in _one_line_error(capsys, ["evaluate", str(tmp_path / "qrels.txt"), str(path)])


def test_a_json_query_with_no_documents_is_dropped_with_a_note(tmp_path: Path, capsys) -> None:
    (tmp_path / "run.json").write_text('{"q1": {"d1": 1.0}, "q2": {}}')
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d1 1\n")
    assert (
        main(["evaluate", str(tmp_path / "qrels.txt"), str(tmp_path / "run.json"), "--metrics", "p@1"]) == 0
    )
    captured = capsys.readouterr()
    assert "1 judged queries without results" in captured.out  # as if the TREC form lacked q2
    assert "1 queries with no documents dropped (a TREC run cannot list them)" in captured.err


@pytest.mark.parametrize(
    ("columns", "problem"),
    [
        (
            {"query": ["a"], "doc_id": ["d"], "score": [1.0]},
            "no query id column (one of q_id, qid, query_id); its columns: query, doc_id, score",
        ),
        (
            {"q_id": ["a"], "id": ["d"], "score": [1.0]},
            "no document id column (one of doc_id, docno, docid); its columns: q_id, id, score",
        ),
        (
            {"q_id": ["a"], "doc_id": ["d"], "sim": [1.0]},
            "no score column (one of score); its columns: q_id, doc_id, sim",
        ),
        ({"q_id": ["a"], "doc_id": ["d"], "score": ["high"]}, "column 'score' holds string, not numbers"),
        (
            {"q_id": [1.5], "doc_id": ["d"], "score": [1.0]},
            "column 'q_id' holds double; ids must be strings or integers",
        ),
        (
            {"q_id": ["a", None], "doc_id": ["d", "e"], "score": [1.0, 2.0]},
            "column 'q_id' has 1 empty (null) ids",
        ),
        (
            {"q_id": ["a", "a"], "doc_id": ["d", "e"], "score": [1.0, None]},
            "query 'a': document 'e' has no comparable score",
        ),
        (
            {"q_id": ["a", "b", "a"], "doc_id": ["d", "d", "d"], "score": [1.0, 2.0, 3.0]},
            "query 'a' lists document 'd' twice",
        ),
    ],
)
def test_a_parquet_run_without_the_needed_columns_names_them(
    tmp_path: Path, capsys, columns: dict, problem: str
) -> None:
    path = tmp_path / "run.parquet"
    pq.write_table(pa.table(columns), path)
    (tmp_path / "qrels.txt").write_text("a 0 d 1\n")
    err = _one_line_error(capsys, ["evaluate", str(tmp_path / "qrels.txt"), str(path)])
    assert err.startswith(f"error: {path}: ") and problem in err


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"q1": {"d1": 1.5}}', "query 'q1', document 'd1': grade 1.5 is not a whole number"),
        ('{"q1": {"d1": "1"}}', "query 'q1', document 'd1': grade str '1' is not a whole number"),
        ('{"q1": {"d1": true}}', "query 'q1', document 'd1': grade True is not a whole number"),
        ('{"q1": {"d1": 1e30}}', "grade 1e+30 does not fit a 64-bit integer"),
        ('{"q1": ["d1"]}', "query 'q1' holds list, not {docid: grade}"),
        ('{"q1": {}}', "no judgments in file"),
    ],
)
def test_bad_json_qrels_are_one_line(tmp_path: Path, capsys, text: str, problem: str) -> None:
    path = tmp_path / "qrels.json"
    path.write_text(text)
    write_run(tmp_path / "run.trec", {"q1": {"d1": 1.0}}, tag="t")
    err = _one_line_error(capsys, ["evaluate", str(path), str(tmp_path / "run.trec")])
    assert err.startswith(f"error: {path}: ") and problem in err


def test_json_qrels_take_whole_floats_as_ranx_does(tmp_path: Path) -> None:
    (tmp_path / "qrels.json").write_text('{"q1": {"d1": 2.0, "d2": -1, "d3": 0}}')
    assert read_qrels(tmp_path / "qrels.json").qrels == {"q1": {"d1": 2, "d2": -1, "d3": 0}}


def test_parquet_qrels_and_lenient_rules_on_json_are_refused(tmp_path: Path, capsys) -> None:
    pq.write_table(pa.table({"q_id": ["q1"], "doc_id": ["d1"], "score": [1]}), tmp_path / "qrels.parquet")
    write_run(tmp_path / "run.json", {"q1": {"d1": 1.0}}, tag="t")
    err = _one_line_error(capsys, ["evaluate", str(tmp_path / "qrels.parquet"), str(tmp_path / "run.json")])
    assert "qrels file" in err and "is parquet, which the harness does not read" in err
    _trec_qrels(tmp_path / "qrels.txt", {"q1": {"d1": 1}})
    argv = ["evaluate", str(tmp_path / "qrels.txt"), str(tmp_path / "run.json"), "--input-rules", "trec_eval"]
    assert "input rules 'trec_eval' read TREC text;" in _one_line_error(capsys, argv)


def test_fusion_refuses_an_infinite_json_score_naming_query_and_document(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"q1": {"d1": 1.0, "d2": 1e999}}')
    write_run(tmp_path / "b.trec", {"q1": {"d1": 1.0}}, tag="t")
    with pytest.raises(HarnessError, match=r"a.json: query 'q1', document 'd2' has an infinite score"):
        fuse(runs=[tmp_path / "a.json", tmp_path / "b.trec"], fuse="combsum", output=tmp_path / "f.trec")
    with pytest.raises(HarnessError, match="which JSON cannot hold"):
        write_run(tmp_path / "inf.json", {"q1": {"d1": math.inf}}, tag="t")


# --- ir_datasets sources ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("irds:beir/scifact/test", "beir/scifact/test"),
        ("irds:msmarco-passage/dev/small", "msmarco-passage/dev/small"),
        ("irds:vaswani", "vaswani"),
        ("irds:trec-robust04/fold1", "trec-robust04/fold1"),
        ("qrels/test.tsv", None),
        ("irdsbeir/scifact", None),
    ],
)
def test_irds_ids_are_parsed(source: str, expected: str | None) -> None:
    assert irds_dataset_id(source) == expected
    assert irds_dataset_id(Path(source)) == expected


@pytest.mark.parametrize(
    "source", ["irds:", "irds:/beir", "irds:beir/", "irds:beir scifact", "irds:beir//x/"]
)
def test_a_malformed_irds_id_is_one_line(source: str) -> None:
    with pytest.raises(
        HarnessError, match=r"does not name an ir_datasets dataset; write irds:<dataset-id>, e\.g\."
    ):
        irds_dataset_id(source)


def test_without_ir_datasets_an_irds_source_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ir_datasets", None)  # import fails as when it is not installed
    write_run(tmp_path / "run.trec", {"q1": {"d1": 1.0}}, tag="t")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\n")
    err = _one_line_error(capsys, ["evaluate", "irds:beir/scifact/test", str(tmp_path / "run.trec")])
    assert err == (
        "error: irds:beir/scifact/test needs the ir_datasets package, which is not installed "
        "(pip install ir_datasets)\n"
    )
    err = _one_line_error(capsys, ["evaluate", str(tmp_path / "qrels.txt"), "irds:msmarco-passage/dev/small"])
    assert "irds:msmarco-passage/dev/small needs the ir_datasets package" in err


def _stand_in_ir_datasets(datasets: dict[str, SimpleNamespace]) -> SimpleNamespace:
    """ir_datasets' documented surface: ``load(id)`` (KeyError when unknown), ``has_qrels()``/``qrels_iter()``
    of (query_id, doc_id, relevance, iteration), ``has_scoreddocs()``/``scoreddocs_iter()``."""

    def load(dataset_id: str) -> SimpleNamespace:
        return datasets[dataset_id]

    return SimpleNamespace(load=load)


def test_an_irds_source_reads_its_qrels_and_scoreddocs(tmp_path: Path, capsys, monkeypatch) -> None:
    qrel = namedtuple("TrecQrel", "query_id doc_id relevance iteration")
    scored = namedtuple("GenericScoredDoc", "query_id doc_id score")
    rows = [qrel("1", "a", 2, "0"), qrel("1", "b", 0, "0"), qrel("2", "c", 1, "0")]
    hits = [scored("1", "a", 1.5), scored("1", "b", 1.5), scored("2", "d", 3.0)]
    toy = SimpleNamespace(
        has_qrels=lambda: True,
        qrels_iter=lambda: iter(rows),
        has_scoreddocs=lambda: True,
        scoreddocs_iter=lambda: iter(hits),
    )
    bare = SimpleNamespace(has_qrels=lambda: False, has_scoreddocs=lambda: False)
    monkeypatch.setitem(sys.modules, "ir_datasets", _stand_in_ir_datasets({"toy/test": toy, "bare": bare}))
    assert read_qrels("irds:toy/test").qrels == {"1": {"a": 2, "b": 0}, "2": {"c": 1}}
    assert read_run("irds:toy/test") == {"1": {"a": 1.5, "b": 1.5}, "2": {"d": 3.0}}
    write_run(tmp_path / "run.trec", {"1": {"a": 1.5, "b": 1.5}, "2": {"d": 3.0}}, tag="t")
    _trec_qrels(tmp_path / "qrels.txt", {"1": {"a": 2, "b": 0}, "2": {"c": 1}})
    from_irds = evaluate_command(qrels="irds:toy/test", run="irds:toy/test", metrics=METRICS).evaluation
    from_files = evaluate_command(
        qrels=tmp_path / "qrels.txt", run=tmp_path / "run.trec", metrics=METRICS
    ).evaluation
    assert from_irds.aggregate == from_files.aggregate
    assert (
        main(["evaluate", "irds:toy/test", str(tmp_path / "run.trec"), "-o", str(tmp_path / "e.json")]) == 0
    )
    capsys.readouterr()
    assert json.loads((tmp_path / "e.json").read_text())["inputs"]["qrels"] == {
        "ir_datasets": "irds:toy/test"
    }
    assert "ir_datasets has no dataset 'nope'" in _one_line_error(
        capsys, ["evaluate", "irds:nope", str(tmp_path / "run.trec")]
    )
    err = _one_line_error(capsys, ["evaluate", "irds:bare", str(tmp_path / "run.trec")])
    assert "ir_datasets dataset 'bare' has no qrels" in err
