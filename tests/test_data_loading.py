"""Loading BEIR folders: exact BEIR semantics on the real files, streaming, encodings, remembered hashes."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

import harness.datasets.checksums as checksums_module
from harness.cli import main
from harness.core.errors import HarnessError, InputError
from harness.core.fileio import file_digest
from harness.datasets.beir import iter_corpus, load_dataset, load_queries
from harness.datasets.checksums import SIDECAR_FILE, ChecksumStore
from harness.datasets.dataset_registry import get_dataset_record
from harness.datasets.qrels import read_qrels


def write_dataset(
    root: Path,
    docs: list[dict],
    queries: list[dict],
    qrels: list[tuple[str, str, int]],
    split: str = "test",
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    (root / "qrels").mkdir(exist_ok=True)
    rows = "".join(f"{q}\t{d}\t{s}\r\n" for q, d, s in qrels)
    (root / "qrels" / f"{split}.tsv").write_text(
        "query-id\tcorpus-id\tscore\r\n" + rows, encoding="utf-8", newline=""
    )
    return root


DOCS = [
    {"_id": "d1", "title": "First", "text": "alpha"},
    {"_id": "d2", "title": "", "text": "beta"},
    {"_id": "d3", "text": "gamma, no title"},
]
QUERIES = [{"_id": "q1", "text": "one"}, {"_id": "q2", "text": "two"}, {"_id": "q3", "text": "three"}]


# ------------------------------------------------------------------------------------ real data


def test_scifact_test_split_is_exactly_the_papers(beir_mirror: Path):
    dataset = load_dataset(beir_mirror / "scifact")
    assert (dataset.name, dataset.split, dataset.drop_identical_ids) == ("scifact", "test", False)
    assert len(dataset.queries) == 300
    assert dataset.num_docs == 5183
    assert dataset.num_qrels == 339
    assert sum(len(judged) for judged in dataset.qrels.values()) == 339
    assert set(dataset.queries) == set(dataset.qrels)
    assert dataset.report.problems() == []

    # Same queries and judgements as BEIR's own loader (whose corpus dict we only use here, on a small set).
    from beir.datasets.data_loader import GenericDataLoader

    corpus, queries, qrels = GenericDataLoader(str(beir_mirror / "scifact")).load(split="test")
    assert dataset.queries == queries
    assert dataset.qrels == qrels
    # Queries keep queries.jsonl order.
    file_order = [json.loads(line)["_id"] for line in (beir_mirror / "scifact" / "queries.jsonl").open()]
    assert list(dataset.queries) == [qid for qid in file_order if qid in dataset.qrels]

    # Streaming gives BEIR's documents, title and text apart, in file order.
    documents = list(dataset.iter_documents())
    assert [doc.id for doc in documents] == list(corpus)
    assert all(
        doc.title == corpus[doc.id]["title"] and doc.text == corpus[doc.id]["text"] for doc in documents
    )


def test_scifact_train_split(beir_mirror: Path):
    dataset = load_dataset(beir_mirror / "scifact", "train")
    assert (len(dataset.queries), dataset.num_qrels) == (809, 919)


def test_document_batches_cover_the_corpus_in_order(beir_mirror: Path):
    dataset = load_dataset(beir_mirror / "scifact")
    batches = list(dataset.iter_document_batches(1000))
    assert [len(batch) for batch in batches] == [1000] * 5 + [183]
    assert [doc.id for batch in batches for doc in batch] == [doc.id for doc in dataset.iter_documents()]
    with pytest.raises(HarnessError, match="batch size"):
        next(dataset.iter_document_batches(0))


def test_fingerprint_is_the_sha256_of_the_three_files(beir_mirror: Path):
    dataset = load_dataset(beir_mirror / "scifact")
    root = beir_mirror / "scifact"
    expected = {
        name: file_digest(root / name) for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")
    }
    assert dataset.fingerprint() == expected
    assert expected["corpus.jsonl"] == get_dataset_record("scifact").files["corpus.jsonl"]


def test_fingerprint_is_remembered_until_the_file_changes(tmp_path: Path, beir_mirror: Path, monkeypatch):
    root = tmp_path / "scifact"
    shutil.copytree(beir_mirror / "scifact", root, ignore=shutil.ignore_patterns(".*"))
    root.chmod(0o755)  # the mirror is read-only; this copy is the user's own writable folder
    first = load_dataset(root, checksums=ChecksumStore()).fingerprint()
    assert ChecksumStore().path_for(root).is_file() and not (root / SIDECAR_FILE).exists()

    # A new store is what a new process has: only the sidecar remains.

    def no_hashing(*args, **kwargs):
        raise AssertionError("re-hashed an unchanged file")

    monkeypatch.setattr(checksums_module, "file_digest", no_hashing)
    assert load_dataset(root).fingerprint() == first

    monkeypatch.undo()
    with open(root / "queries.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"_id": "extra", "text": "unjudged"}) + "\n")
    changed = load_dataset(root).fingerprint()
    assert changed["queries.jsonl"] == file_digest(root / "queries.jsonl") != first["queries.jsonl"]


def test_read_only_folder_gets_no_sidecar(tmp_path: Path, beir_mirror: Path):
    """A shared mirror stays untouched, even for root (who passes every access check)."""
    root = tmp_path / "scifact"
    shutil.copytree(beir_mirror / "scifact", root, ignore=shutil.ignore_patterns(".*"))
    root.chmod(0o555)
    assert load_dataset(root, checksums=ChecksumStore()).fingerprint()["corpus.jsonl"]
    assert not (root / SIDECAR_FILE).exists()
    # Loading straight from the shared mirror leaves every file there as it was (a sidecar may ship with it).
    mirror = beir_mirror / "scifact"
    before = {path.name: path.stat().st_mtime_ns for path in mirror.iterdir()}
    assert load_dataset(mirror, checksums=ChecksumStore()).fingerprint()["corpus.jsonl"]
    assert {path.name: path.stat().st_mtime_ns for path in mirror.iterdir()} == before


def test_nfcorpus_qrels_keep_graded_relevance(beir_mirror: Path):
    qrels = read_qrels(beir_mirror / "nfcorpus" / "qrels" / "test.tsv", layout="beir")
    scores = Counter(score for judged in qrels.qrels.values() for score in judged.values())
    assert qrels.rows == 12334
    assert scores == {1: 11758, 2: 576}
    assert len(qrels.qrels) == 323
    assert len(load_queries(beir_mirror / "nfcorpus" / "queries.jsonl")) == 3237


def test_folder_without_corpus_is_a_clear_error(beir_mirror: Path):
    with pytest.raises(HarnessError, match=r"nfcorpus: no corpus.jsonl \(or corpus.jsonl.gz\)"):
        load_dataset(beir_mirror / "nfcorpus")


@pytest.mark.parametrize(
    ("dataset", "split", "rows", "queries", "scores"),
    [
        ("arguana", "test", 1406, 1406, {1}),
        ("fiqa", "test", 1706, 648, {1}),
        ("fiqa", "dev", 1238, 500, {1}),
        ("fiqa", "train", 14166, 5500, {1}),
        ("quora", "test", 15675, 10000, {1}),
        ("scidocs", "test", 29928, 1000, {0, 1}),
        ("trec-covid", "test", 66334, 50, {0, 1, 2}),
    ],
)
def test_partial_datasets_qrels_parse(beir_partial: Path, dataset, split, rows, queries, scores):
    path = beir_partial / dataset / "qrels" / f"{split}.tsv"
    assert b"\r\n" in path.read_bytes()[:200]  # the real files are CRLF
    qrels = read_qrels(path, layout="beir")
    assert qrels.rows == rows
    assert len(qrels.qrels) == queries
    assert {score for judged in qrels.qrels.values() for score in judged.values()} == scores


# ------------------------------------------------------------------------------- BEIR semantics


def test_only_judged_queries_are_kept_and_zero_grades_count_as_judged(tmp_path: Path):
    root = write_dataset(tmp_path / "toy", DOCS, QUERIES, [("q3", "d1", 0), ("q1", "d2", 2), ("q1", "d3", 1)])
    dataset = load_dataset(root)
    assert dataset.queries == {"q1": "one", "q3": "three"}  # queries.jsonl order, q2 unjudged
    assert dataset.qrels == {"q3": {"d1": 0}, "q1": {"d2": 2, "d3": 1}}
    assert [tuple(doc) for doc in dataset.iter_documents()] == [
        ("d1", "First", "alpha"),
        ("d2", "", "beta"),
        ("d3", "", "gamma, no title"),
    ]
    # A home-made folder is named by its identity: folder name @ its files' checksums.
    assert re.fullmatch(r"toy@[0-9a-f]{8}", dataset.name) and dataset.drop_identical_ids is False


def test_drop_identical_ids_comes_from_the_registry(tmp_path: Path):
    root = write_dataset(tmp_path / "arguana", DOCS, QUERIES, [("q1", "d1", 1)])
    assert load_dataset(root).drop_identical_ids is True
    assert load_dataset(root, name="custom").drop_identical_ids is False


def test_missing_split_lists_the_available_ones(tmp_path: Path):
    root = write_dataset(tmp_path / "toy", DOCS, QUERIES, [("q1", "d1", 1)], split="dev")
    with pytest.raises(HarnessError, match=r"no qrels for split 'test'.*available splits: dev"):
        load_dataset(root)
    assert load_dataset(root, "dev").split == "dev"


def test_qrels_naming_missing_queries_and_docs_are_reported_then_strict_refuses(tmp_path: Path, caplog):
    qrels = [("q1", "d1", 1), ("q1", "gone-doc", 1), ("ghost", "d2", 1), ("ghost", "d3", 1)]
    root = write_dataset(tmp_path / "toy", DOCS, QUERIES, qrels)
    dataset = load_dataset(root)
    assert dataset.report.missing_query_ids == ["ghost"] and dataset.report.missing_query_rows == 2
    assert dataset.report.missing_doc_ids == ["gone-doc"] and dataset.report.missing_doc_rows == 1
    assert dataset.qrels == {"q1": {"d1": 1, "gone-doc": 1}}  # BEIR keeps judgements of absent docs
    assert dataset.num_qrels == 4
    assert "2 qrels rows name 1 queries absent" in caplog.text
    assert "1 qrels rows name 1 documents absent" in caplog.text

    with pytest.raises(InputError) as caught:
        load_dataset(root, strict=True)
    assert str(caught.value).startswith(
        f"{root}/qrels/test.tsv:3: corpus-id 'gone-doc' is not in the corpus; 2 qrels rows name 1 queries absent"
    )

    duplicated = write_dataset(
        tmp_path / "dup", DOCS, QUERIES, [("q1", "d1", 1), ("q1", "d2", 0), ("q1", "d1", 2)]
    )
    with pytest.raises(
        InputError,
        match=r"qrels/test.tsv:4: duplicate judgment for query 'q1', document 'd1' \(first on line 2\)",
    ):
        load_dataset(duplicated)  # trec_eval's verdict is the default
    dataset = load_dataset(duplicated, qrels_duplicates="last")
    assert (
        dataset.qrels == {"q1": {"d1": 2, "d2": 0}} and dataset.report.duplicate_qrels_rows == 1
    )  # BEIR: last wins
    with pytest.raises(
        InputError, match=r"qrels/test.tsv:4: \('q1', 'd1'\) is judged twice; 1 qrels rows repeat"
    ):
        load_dataset(duplicated, strict=True, qrels_duplicates="last")


def test_cli_verify_reports_missing_references_and_strict_fails(tmp_path: Path, capsys):
    root = write_dataset(tmp_path / "toy", DOCS, QUERIES, [("q1", "d1", 1), ("q1", "gone-doc", 1)])
    assert main(["data", "verify", str(root)]) == 0
    out = capsys.readouterr().out
    assert "note: 1 qrels rows name 1 documents absent from the corpus (e.g. 'gone-doc')" in out
    assert re.search(r"^toy@[0-9a-f]{8}: OK$", out, flags=re.M)
    assert main(["data", "verify", str(root), "--strict"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {root}/qrels/test.tsv:3: corpus-id 'gone-doc' is not in the corpus; ")
    assert err.count("\n") == 1


def test_crlf_bom_and_gzip_inputs_load_like_plain_files(tmp_path: Path):
    plain = write_dataset(tmp_path / "plain", DOCS, QUERIES, [("q1", "d1", 1), ("q2", "d3", 2)])
    fancy = tmp_path / "fancy"
    (fancy / "qrels").mkdir(parents=True)
    corpus_text = "".join(json.dumps(doc) + "\r\n" for doc in DOCS)
    with gzip.open(fancy / "corpus.jsonl.gz", "wt", encoding="utf-8-sig", newline="") as handle:
        handle.write(corpus_text)
    (fancy / "queries.jsonl").write_bytes(
        b"\xef\xbb\xbf" + "".join(json.dumps(q) + "\r\n" for q in QUERIES).encode()
    )
    qrels = (plain / "qrels" / "test.tsv").read_bytes()
    with gzip.open(fancy / "qrels" / "test.tsv.gz", "wb") as handle:
        handle.write(b"\xef\xbb\xbf" + qrels)

    a, b = load_dataset(plain), load_dataset(fancy)
    assert (a.queries, a.qrels, a.num_docs) == (b.queries, b.qrels, b.num_docs)
    assert list(a.iter_documents()) == list(b.iter_documents())
    assert set(b.fingerprint()) == {"corpus.jsonl.gz", "queries.jsonl", "qrels/test.tsv.gz"}


def test_corpus_is_streamed_not_loaded(tmp_path: Path):
    # A bad line late in the file does not stop the documents before it: nothing reads ahead.
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps(DOCS[0]) + "\n" + json.dumps(DOCS[1]) + "\n{broken\n", encoding="utf-8")
    documents = iter_corpus(path)
    assert next(documents).id == "d1" and next(documents).id == "d2"
    with pytest.raises(InputError, match=r"corpus.jsonl:3: malformed JSON"):
        next(documents)


def test_headerless_qrels_keep_their_first_row(tmp_path: Path):
    path = tmp_path / "test.tsv"
    path.write_text("q1\td1\t1\nq1\td2\t0\n", encoding="utf-8")
    assert read_qrels(path, layout="beir").qrels == {"q1": {"d1": 1, "d2": 0}}


def test_integer_ids_are_read_as_text(tmp_path: Path):
    docs = [{"_id": 1, "text": "x"}, {"_id": 2, "title": None, "text": "y"}]
    root = write_dataset(tmp_path / "toy", docs, [{"_id": 7, "text": "q"}], [("7", "2", 1)])
    dataset = load_dataset(root)
    assert dataset.queries == {"7": "q"} and dataset.qrels == {"7": {"2": 1}}
    assert [doc.id for doc in dataset.iter_documents()] == ["1", "2"]
