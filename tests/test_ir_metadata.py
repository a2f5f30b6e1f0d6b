"""ir_metadata headers: the layout ir-metadata.org gives, written into run files, read back by ``harness diff``.

A run with a header must still score exactly as the same run without one, with trec_eval's own fixture
(to the digit trec_eval printed), the readable trec_eval of tests/trec_eval_reference.py and
``harness evaluate`` (which keeps its fast columnar reader for it).
"""

from __future__ import annotations

import copy
import gzip
import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import trec_eval_reference as reference
import yaml
from test_trec_eval_fixtures import DATA, check_against

from harness.api import fuse
from harness.cli import main
from harness.core.errors import InputError
from harness.datasets.qrels import read_qrels
from harness.evaluation.ir_metadata import (
    END,
    START,
    TIE_RULE,
    command_line,
    header_from_provenance,
    header_lines,
    read_run_header,
    run_header,
)
from harness.evaluation.metrics import evaluate
from harness.evaluation.trec import read_run, read_run_columns, write_run
from harness.results.settings_diff import header_protocol

FINGERPRINT = {"corpus.jsonl": "a" * 64, "queries.jsonl": "b" * 64, "qrels/test.tsv": "c" * 64}
BM25 = {"method": "lucene", "k1": 1.5, "b": 0.75, "stemmer": "english"}
# The shape harness.pipeline records (provenance.json), trimmed to what the header reads.
PROVENANCE = {
    "harness_version": "0.1.0",
    "created_at": "2026-01-01T00:00:00+00:00",
    "command": ["/venv/bin/harness", "eval", "--dataset", "scifact", "--model", "bm25"],
    "config": {
        "dataset": {"name": "scifact", "split": "test", "fingerprint": FINGERPRINT},
        "model": {
            "spec": "bm25",
            "identity": {"model_id": "bm25", "kind": "bm25", "params": BM25},
            "settings": {"kind": "bm25", "pooling": "mean", "max_length": 512, "params": BM25},
            "libraries": {"bm25s": "0.3.16", "PyStemmer": "2.2.0.3"},
        },
        "retrieval": {"top_k": 1000, "index": None, "drop_identical_ids": False},
    },
    "dataset": {
        "name": "scifact",
        "split": "test",
        "root": "data/scifact",
        "fingerprint": FINGERPRINT,
        "counts": {"docs": 5183, "queries": 300, "qrels": 339},
    },
    "model": {"spec": "bm25", "record": "bm25"},
    "retrieval": {"device": "cpu", "label": "bm25s"},
    "environment": {
        "versions": {"harness": "0.1.0", "python": "3.11.7", "numpy": "2.4.6", "torch": "2.13.0+cpu"},
        "device": "cpu",
        "hardware": {"machine": "x86_64", "processor": "x86_64", "cpu_count": 2, "memory_gib": 23.5},
    },
    "timings": {"load_data": 0.14, "retrieve": 3.1, "bm25_cache_hit": 0.0, "evaluate": 1.3, "total": 5.3},
}


def _random_run(seed: int) -> dict[str, dict[str, float]]:
    rng = random.Random(seed)
    return {
        f"q{q}": {str(d): rng.choice([0.5, 0.25, 1.0, rng.random()]) for d in rng.sample(range(1, 300), 40)}
        for q in range(12)
    }


def _header() -> dict:
    return header_from_provenance(PROVENANCE, tag="harness-bm25")


# --- the layout -------------------------------------------------------------------------------------


def test_header_has_the_ir_metadata_layout() -> None:
    header = _header()
    assert list(header) == [
        "schema-version",
        "tag",
        "method",
        "data",
        "implementation",
        "platform",
        "resources",
    ]
    assert header["schema-version"] == 0.1 and header["tag"] == "harness-bm25"
    method = header["method"]
    assert method["score ties"] == TIE_RULE == "score desc, docno desc" and method["automatic"] is True
    assert method["name"] == "bm25" and method["top k"] == 1000 and method["identical ids"] == "kept"
    (step,) = method["retrieval"]
    assert step["name"] == "bm25" and step["method"] == "bm25" and step["params"] == BM25
    assert step["libraries"] == ["bm25s==0.3.16", "PyStemmer==2.2.0.3"] and step["runtime"] == "bm25s"
    assert "encoding" not in step  # BM25 reads no prefix or pooling
    collection = header["data"]["test collection"]
    assert (
        collection["name"] == "scifact" and collection["split"] == "test" and collection["documents"] == 5183
    )
    assert collection["checksums"]["qrels/test.tsv"] == "sha256:" + "c" * 64
    assert header["implementation"]["executable"]["cmd"] == "harness eval --dataset scifact --model bm25"
    assert header["implementation"]["source"]["lang"] == ["python"]
    software = header["platform"]["software"]
    assert software["python"] == "3.11.7" and software["libraries"]["python"] == [
        "numpy==2.4.6",
        "torch==2.13.0+cpu",
    ]
    assert header["platform"]["hardware"]["cpu"]["number of cores"] == 2
    assert header["platform"]["hardware"]["ram"] == "23.5 GiB"
    runtime = header["resources"]["runtime"]  # the 0.2-beta resource fields
    assert runtime["wallclock"] == "5300 ms" and runtime["stop time"] == "2026-01-01T00:00:00+00:00"
    assert runtime["stages"] == {"load_data": "140 ms", "retrieve": "3100 ms", "evaluate": "1300 ms"}
    assert header["resources"]["ram"]["used process"]["max"].endswith(" MB")


def test_a_system_lists_its_members_fusion_and_reranker_as_steps() -> None:
    provenance = copy.deepcopy(PROVENANCE)
    member = provenance["config"].pop("model")
    dense = {
        "spec": "e5-small",
        "identity": {"model_id": "intfloat/e5-small-v2", "kind": "dense"},
        "settings": {"kind": "dense", "pooling": "mean", "query_prefix": "query: ", "normalize": True},
    }
    fusion = {"method": "rrf", "depth": 100, "k": 60}
    provenance["config"]["system"] = {
        "name": "hybrid",
        "members": [member, dense],
        "fusion": fusion,
        "rerank": {"model": "cross-encoder/ms-marco-MiniLM-L-6-v2", "depth": 50},
    }
    steps = header_from_provenance(provenance, tag="t")["method"]["retrieval"]
    assert [step["name"] for step in steps] == ["bm25", "e5-small", "fusion", "rerank"]
    assert steps[1]["encoding"] == {"pooling": "mean", "query_prefix": "query: ", "normalize": True}
    assert steps[2]["ensembles"] == ["bm25", "e5-small"] and steps[2]["params"] == fusion
    assert steps[3]["reranks"] == "fusion" and steps[3]["runtime"] == "bm25s"


def test_header_lines_are_yaml_behind_hash_between_the_markers(tmp_path: Path) -> None:
    header = _header()
    lines = header_lines(header)
    assert lines[0] == START == "# ir_metadata.start" and lines[-1] == END == "# ir_metadata.end"
    body = lines[1:-1]
    assert all(line.startswith("# ") or line == "#" for line in body)
    assert yaml.safe_load("\n".join(line[2:] for line in body)) == header
    # repro_eval's MetadataHandler.read_metadata: the first line is the start marker, then each line with
    # its '#' stripped (the space kept) up to the end marker, loaded as YAML.
    write_run(tmp_path / "run.trec", _random_run(0), tag="harness-bm25", header=header)
    text = (tmp_path / "run.trec").read_text().splitlines(keepends=True)
    assert text[0].strip("\n") == "# ir_metadata.start"
    kept = ""
    for line in text[1:]:
        if line.strip("\n") == "# ir_metadata.end":
            break
        kept += line.strip("#")
    assert yaml.safe_load(kept) == header


def test_command_line_names_the_harness_entry_point() -> None:
    assert (
        command_line(["/x/.venv/bin/harness", "fuse", "a b.trec", "-o", "f.trec"])
        == "harness fuse 'a b.trec' -o f.trec"
    )
    assert command_line(["/x/harness/__main__.py", "eval"]) == "harness eval"
    assert command_line(["pytest", "-q"]) == "pytest -q"


# --- written, read back, and scored as if absent ----------------------------------------------------


@pytest.mark.parametrize("name", ["run.trec", "run.trec.gz", "run.parquet"])
def test_the_header_reads_back_and_the_run_is_unchanged(tmp_path: Path, name: str) -> None:
    run, header = _random_run(1), _header()
    write_run(tmp_path / name, run, tag="t", header=header)
    assert read_run_header(tmp_path / name) == header
    assert read_run(tmp_path / name) == run
    write_run(tmp_path / f"bare-{name}", run, tag="t")
    assert read_run_header(tmp_path / f"bare-{name}") is None
    if name.endswith(".parquet"):
        assert (
            pq.read_schema(tmp_path / name)
            .metadata[b"ir_metadata"]
            .decode()
            .startswith("schema-version: 0.1")
        )
    else:
        opener = gzip.open if name.endswith(".gz") else open
        with opener(tmp_path / name, "rt") as with_header, opener(tmp_path / f"bare-{name}", "rt") as bare:
            lines = with_header.read().splitlines()
            assert lines[len(header_lines(header)) :] == bare.read().splitlines()


def test_a_header_keeps_the_fast_columnar_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.evaluation.trec as runfile

    run = _random_run(2)
    write_run(tmp_path / "run.trec", run, tag="t", header=_header())
    monkeypatch.setattr(runfile, "_read_run_careful", None)  # must not be needed
    assert read_run(tmp_path / "run.trec") == run


def test_trec_eval_fixture_with_a_header_reproduces_its_printed_output(tmp_path: Path) -> None:
    # results.test (results.comment.test without its comments) behind a header: out.test to the digit.
    lines = (DATA / "results.comment.test").read_text().splitlines(keepends=True)
    body = "".join(line for line in lines if not line.startswith("#"))
    headed = tmp_path / "results.test"
    headed.write_text("".join(f"{line}\n" for line in header_lines(_header())) + body)
    assert check_against(DATA / "out.test", headed) >= 11
    assert check_against(DATA / "out.test.a", headed, precision="float32") >= 11


@pytest.mark.parametrize("seed", range(4))
def test_a_headed_run_scores_as_the_reference_trec_eval_reads_it(tmp_path: Path, seed: int) -> None:
    run = _random_run(seed)
    rng = random.Random(seed)
    qrels = {
        qid: {docid: rng.choice([0, 1, 2]) for docid in rng.sample(sorted(docs), 8)}
        for qid, docs in run.items()
    }
    (tmp_path / "qrels").write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, judged in qrels.items() for d, g in judged.items())
    )
    write_run(tmp_path / "headed.trec", run, tag="t", header=_header())
    write_run(tmp_path / "bare.trec", run, tag="t")
    names = ["ndcg@10", "map", "p@5", "mrr", "bpref"]
    text = (tmp_path / "headed.trec").read_text()
    expected_aggregate, expected_per_query = reference.evaluate(
        reference.read_qrels_text((tmp_path / "qrels").read_text()), reference.read_run_text(text), names
    )
    headed = evaluate(read_qrels(tmp_path / "qrels").qrels, read_run_columns(tmp_path / "headed.trec"), names)
    bare = evaluate(read_qrels(tmp_path / "qrels").qrels, read_run_columns(tmp_path / "bare.trec"), names)
    assert headed.aggregate == bare.aggregate and headed.per_query == bare.per_query
    for name, value in expected_aggregate.items():
        assert headed.aggregate[name] == pytest.approx(value, rel=1e-12, abs=1e-12)
    assert set(headed.per_query) == set(expected_per_query)


def test_harness_evaluate_prints_the_same_for_a_headed_run(tmp_path: Path, capsys) -> None:
    run = _random_run(5)
    (tmp_path / "qrels").write_text(
        "".join(f"{qid} 0 {docid} 1\n" for qid, docs in run.items() for docid in list(docs)[:3])
    )
    write_run(tmp_path / "headed.trec", run, tag="t", header=_header())
    write_run(tmp_path / "bare.trec", run, tag="t")
    outputs = []
    for name in ("headed.trec", "bare.trec"):
        assert main(["evaluate", str(tmp_path / "qrels"), str(tmp_path / name), "--per-query"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]


# --- read back by harness diff -----------------------------------------------------------------------


def test_diff_of_two_run_files_names_each_differing_header_field(tmp_path: Path, capsys) -> None:
    run = _random_run(6)
    changed = copy.deepcopy(PROVENANCE)
    changed["config"]["model"]["identity"]["params"] = {**BM25, "k1": 0.9}
    changed["dataset"]["fingerprint"] = {**FINGERPRINT, "corpus.jsonl": "f" * 64}
    changed["timings"]["total"] = 99.0  # measured: not a setting
    changed["command"] = ["harness", "eval", "--dataset", "scifact", "--model", "bm25-k1-0.9"]  # shown whole
    write_run(tmp_path / "a.trec", run, tag="t", header=_header())
    write_run(
        tmp_path / "b.parquet", run, tag="t", header=header_from_provenance(changed, tag="harness-bm25")
    )
    out_json = tmp_path / "diff.json"
    assert main(["diff", str(tmp_path / "a.trec"), str(tmp_path / "b.parquet"), "-o", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "2 recorded setting(s) differ and can move a number:" in out
    assert "  method.retrieval[bm25].params.k1: A 1.5 | B 0.9" in out
    assert '  data.test collection.checksums.corpus.jsonl: A "sha256:aaaa' in out
    assert "resources (wall time, CPU time, memory) are measured, not settings" in out
    assert "note: A was made by: harness eval --dataset scifact --model bm25\n" in out
    assert "note: B was made by: harness eval --dataset scifact --model bm25-k1-0.9\n" in out
    payload = json.loads(out_json.read_text())
    assert [row["setting"] for row in payload["protocol_differences"]] == [
        "method.retrieval[bm25].params.k1",
        "data.test collection.checksums.corpus.jsonl",
    ]


def test_diff_of_identical_headers_and_of_a_run_without_one(tmp_path: Path, capsys) -> None:
    run = _random_run(7)
    write_run(tmp_path / "a.trec", run, tag="t", header=_header())
    write_run(tmp_path / "b.trec.gz", run, tag="t", header=_header())
    write_run(tmp_path / "bare.trec", run, tag="t")
    assert main(["diff", str(tmp_path / "a.trec"), str(tmp_path / "b.trec.gz")]) == 0
    assert "no protocol difference" in capsys.readouterr().out
    assert main(["diff", str(tmp_path / "a.trec"), str(tmp_path / "bare.trec")]) == 0
    out = capsys.readouterr().out
    assert "note: B has no ir_metadata header" in out and "not recorded by B: method.name" in out


def test_diff_of_a_run_file_and_a_folder_is_one_line(tmp_path: Path, capsys) -> None:
    write_run(tmp_path / "a.trec", _random_run(8), tag="t", header=_header())
    assert main(["diff", str(tmp_path / "a.trec"), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"error: A ({tmp_path / 'a.trec'}) is a run file, so B must be one too; {tmp_path} is not a file\n"
    )


def test_a_broken_header_is_located_by_diff_yet_the_run_still_scores(tmp_path: Path, capsys) -> None:
    run_lines = "q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.25 t\n"
    (tmp_path / "open.trec").write_text("# ir_metadata.start\n# tag: x\n" + run_lines)
    (tmp_path / "bad.trec").write_text("# ir_metadata.start\n# tag: [x\n# ir_metadata.end\n" + run_lines)
    (tmp_path / "qrels").write_text("q1 0 d1 1\n")
    with pytest.raises(
        InputError, match=r"open.trec:3: the ir_metadata header has no `# ir_metadata.end` line"
    ):
        read_run_header(tmp_path / "open.trec")
    with pytest.raises(InputError, match=r"bad.trec:\d: the ir_metadata header is not valid YAML"):
        read_run_header(tmp_path / "bad.trec")
    assert main(["diff", str(tmp_path / "open.trec"), str(tmp_path / "bad.trec")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    for name in ("open.trec", "bad.trec"):
        assert read_run(tmp_path / name) == {"q1": {"d1": 0.5, "d2": 0.25}}


def test_header_protocol_flattens_steps_and_library_lists() -> None:
    protocol = header_protocol(_header())
    assert protocol["method.retrieval (order)"] == ["bm25"]
    assert protocol["method.retrieval[bm25].params.k1"] == 1.5
    assert protocol["method.retrieval[bm25].libraries.bm25s"] == "0.3.16"
    assert protocol["platform.software.libraries.python.numpy"] == "2.4.6"
    assert not any(key.startswith("resources") for key in protocol)
    assert list(protocol)[0].startswith("method.")  # the settings that move numbers come first


# --- harness fuse writes one ------------------------------------------------------------------------


def test_fuse_heads_its_run_with_the_inputs_and_the_fusion(tmp_path: Path) -> None:
    header = _header()
    write_run(tmp_path / "a.trec", _random_run(9), tag="a", header=header)
    write_run(tmp_path / "b.parquet", _random_run(10), tag="b", header=header)
    fuse(runs=[tmp_path / "a.trec", tmp_path / "b.parquet"], fuse="interpolation", output=tmp_path / "f.trec")
    fused = read_run_header(tmp_path / "f.trec")
    inputs, fusion = fused["method"]["retrieval"][:2], fused["method"]["retrieval"][2]
    assert [step["name"] for step in inputs] == ["a", "b"]
    assert all(step["method"] == "run file" and step["checksum"].startswith("sha256:") for step in inputs)
    assert fusion["name"] == "fusion" and fusion["method"] == "interpolation"
    assert fusion["interpolates"] == ["a", "b"] and fusion["params"]["weights"] == [0.5, 0.5]
    assert fused["data"] == header["data"]  # both inputs name the same test collection
    assert fused["method"]["score ties"] == TIE_RULE and "wallclock" in fused["resources"]["runtime"]
    write_run(tmp_path / "c.trec", _random_run(11), tag="c")  # no header: the collection is unknown
    fuse(runs=[tmp_path / "a.trec", tmp_path / "c.trec"], fuse="rrf", output=tmp_path / "g.trec")
    assert "data" not in read_run_header(tmp_path / "g.trec")


def test_run_header_leaves_out_what_is_not_known() -> None:
    header = run_header(tag="t", name=None, steps=[{"name": "x", "method": None}])
    assert "data" not in header and "name" not in header["method"]
    assert header["method"]["retrieval"] == [{"name": "x"}]
    assert header["implementation"]["source"]["package"].startswith("beir-harness==")
