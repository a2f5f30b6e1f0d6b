"""Each kind of bad input gives one error line naming file and line, and exit code 2, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fault_snapshot import assert_unchanged, snapshot

from harness.cli import main

GOOD_DOCS = ['{"_id": "d1", "title": "t", "text": "one"}', '{"_id": "d2", "text": "two"}']
GOOD_QUERIES = ['{"_id": "q1", "text": "first"}', '{"_id": "q2", "text": "second"}']
GOOD_QRELS = ["query-id\tcorpus-id\tscore", "q1\td1\t1", "q2\td2\t2"]


def _write(root: Path, docs: list[str], queries: list[str], qrels: list[str]) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("\n".join(docs) + "\n", encoding="utf-8")
    (root / "queries.jsonl").write_text("\n".join(queries) + "\n", encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("\r\n".join(qrels) + "\r\n", encoding="utf-8", newline="")
    return root


CASES = {
    "malformed corpus JSON": (
        "corpus",
        [GOOD_DOCS[0], '{"_id": "d2", "text": "two"'],
        "corpus.jsonl:2: malformed JSON",
    ),
    "corpus line not an object": (
        "corpus",
        [GOOD_DOCS[0], '["d2", "two"]'],
        "corpus.jsonl:2: expected a JSON object",
    ),
    "document without _id": (
        "corpus",
        [GOOD_DOCS[0], '{"text": "two"}'],
        "corpus.jsonl:2: document has no `_id`",
    ),
    "document without text": (
        "corpus",
        [GOOD_DOCS[0], '{"_id": "d2", "title": "t"}'],
        "corpus.jsonl:2: document has no `text` (_id 'd2')",
    ),
    "duplicate document id": (
        "corpus",
        [*GOOD_DOCS, '{"_id": "d1", "text": "again"}'],
        "corpus.jsonl:3: duplicate document _id 'd1' (first on line 1)",
    ),
    "malformed query JSON": (
        "queries",
        ['{"_id": "q1", "text": first}', GOOD_QUERIES[1]],
        "queries.jsonl:1: malformed JSON",
    ),
    "query without _id": (
        "queries",
        [GOOD_QUERIES[0], '{"text": "second"}'],
        "queries.jsonl:2: query has no `_id`",
    ),
    "query without text": (
        "queries",
        [GOOD_QUERIES[0], '{"_id": "q2"}'],
        "queries.jsonl:2: query has no `text`",
    ),
    "duplicate query id": (
        "queries",
        [*GOOD_QUERIES, '{"_id": "q2", "text": "again"}'],
        "queries.jsonl:3: duplicate query _id 'q2' (first on line 2)",
    ),
    "corpus line nested 100,000 deep": (
        "corpus",
        [GOOD_DOCS[0], '{"_id": "d2", "text": ' + "[" * 100_000 + "]" * 100_000 + "}"],
        "corpus.jsonl:2: JSON nested deeper than 200 levels",
    ),
    "query line nested 100,000 deep": (
        "queries",
        ["[" * 100_000 + "]" * 100_000, GOOD_QUERIES[1]],
        "queries.jsonl:1: JSON nested deeper than 200 levels",
    ),
    "document id NaN": (
        "corpus",
        [GOOD_DOCS[0], '{"_id": NaN, "text": "two"}'],
        "corpus.jsonl:2: `_id` must be a string, not NaN",
    ),
    "document text Infinity": (
        "corpus",
        [GOOD_DOCS[0], '{"_id": "d2", "text": Infinity}'],
        "corpus.jsonl:2: `text` must be a string (_id 'd2')",
    ),
    "query id -Infinity": (
        "queries",
        [GOOD_QUERIES[0], '{"_id": -Infinity, "text": "second"}'],
        "queries.jsonl:2: `_id` must be a string, not -Infinity",
    ),
    "document id of 5000 digits": (
        "corpus",
        [GOOD_DOCS[0], '{"_id": ' + "7" * 5000 + ', "text": "two"}'],
        "corpus.jsonl:2: malformed JSON (a number with too many digits)",
    ),
    "non-integer score": (
        "qrels",
        [*GOOD_QRELS[:2], "q2\td2\t0.5"],
        "qrels/test.tsv:3: score '0.5' is not an integer",
    ),
    "too few columns": (
        "qrels",
        [GOOD_QRELS[0], "q1\td1", GOOD_QRELS[2]],
        "qrels/test.tsv:2: expected 3 tab-separated columns (query-id, corpus-id, score), found 2",
    ),
    "TREC four columns": (
        "qrels",
        [GOOD_QRELS[0], "q1\t0\td1\t1"],
        "qrels/test.tsv:2: expected 3 tab-separated columns (query-id, corpus-id, score), found 4",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_error_line_with_file_and_line(case: str, tmp_path: Path, capsys):
    which, lines, message = CASES[case]
    files = {"corpus": GOOD_DOCS, "queries": GOOD_QUERIES, "qrels": GOOD_QRELS} | {which: lines}
    root = _write(tmp_path / "bad", files["corpus"], files["queries"], files["qrels"])
    before = snapshot(tmp_path)

    assert main(["data", "verify", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: {root}/{message}"), err
    assert "Traceback" not in err
    assert_unchanged(before, tmp_path)  # no checksum sidecar, nothing else written


def test_the_good_variant_of_those_files_loads(tmp_path: Path, capsys):
    root = _write(tmp_path / "good", GOOD_DOCS, GOOD_QUERIES, GOOD_QRELS)
    assert main(["data", "verify", str(root)]) == 0
    out = capsys.readouterr().out
    assert "docs              2" in out and "queries           2" in out and "qrels             2" in out


def test_verify_of_a_dataset_not_downloaded_says_what_to_do(tmp_path: Path, capsys):
    assert main(["data", "verify", "scifact", "--data-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"error: scifact is not in {tmp_path} (run `harness data download scifact` first)\n"
    )


def test_registry_with_bad_yaml_is_a_clear_error(tmp_path: Path, monkeypatch, capsys):
    (tmp_path / "datasets.yaml").write_text("datasets: [unclosed\n", encoding="utf-8")
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(tmp_path))
    assert main(["data", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'datasets.yaml'}:2: not valid YAML (") and err.count("\n") == 1


def test_json_string_values_are_checked(tmp_path: Path, capsys):
    docs = [GOOD_DOCS[0], json.dumps({"_id": "d2", "text": 5})]
    root = _write(tmp_path / "bad", docs, GOOD_QUERIES, GOOD_QRELS)
    assert main(["data", "verify", str(root)]) == 2
    assert "corpus.jsonl:2: `text` must be a string (_id 'd2')" in capsys.readouterr().err


def test_text_that_is_not_utf8_names_the_exact_line(tmp_path: Path, capsys):
    # Text is decoded in blocks of several lines: the error must still name the bad line, not the block.
    docs = [json.dumps({"_id": f"d{i}", "text": f"document {i}"}) for i in range(1, 301)]
    root = _write(tmp_path / "bad", docs, GOOD_QUERIES, GOOD_QRELS[:2])
    corpus = root / "corpus.jsonl"
    lines = corpus.read_bytes().split(b"\n")
    lines[199] = b'{"_id": "d200", "text": "caf\xe9"}'  # Latin-1, not UTF-8
    corpus.write_bytes(b"\n".join(lines))
    assert main(["data", "verify", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {corpus}:200: not UTF-8 text (") and err.count("\n") == 1, err
    assert "save the file as UTF-8" in err
