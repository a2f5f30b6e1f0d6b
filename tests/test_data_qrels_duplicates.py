"""One qrels file, one verdict: a (query, document) pair judged twice is refused by default by every
command that reads qrels (as trec_eval does), and ``--qrels-duplicates last`` keeps the last grade.

Also: the ChecksumStore recomputes a remembered checksum only when its file changes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import harness.datasets.checksums as checksums_module
from harness.cli import main
from harness.datasets.beir import load_dataset
from harness.datasets.checksums import SIDECAR_FILE, ChecksumStore
from harness.datasets.qrels import read_qrels

# q1 judges d3 twice: first 0, then 2. bm25 ranks d3 ("apple", the shorter match) above d1.
DOCS = [
    {"_id": "d1", "text": "apple banana"},
    {"_id": "d2", "text": "cherry"},
    {"_id": "d3", "text": "apple"},
]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td3\t0\nq1\td3\t2\n"
RUN = "q1 Q0 d3 1 2.0 t\nq1 Q0 d1 2 1.0 t\n"
DUPLICATE_LINE = ":4: duplicate judgment for query 'q1', document 'd3' (first on line 3)"


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    root = tmp_path / "toy"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in DOCS), encoding="utf-8")
    query = json.dumps({"_id": "q1", "text": "apple"})
    (root / "queries.jsonl").write_text(query + "\n", encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text(QRELS, encoding="utf-8")
    (tmp_path / "run.trec").write_text(RUN, encoding="utf-8")
    return root


def _assert_one_error_line(err: str, qrels: Path) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: {qrels}{DUPLICATE_LINE}"), err
    assert "--qrels-duplicates last" in err


def test_evaluate_refuses_duplicates_by_default_and_keeps_the_last_grade_when_asked(toy: Path, capsys):
    qrels, run = toy / "qrels" / "test.tsv", toy.parent / "run.trec"
    args = ["evaluate", str(qrels), str(run), "--metrics", "p@2", "ndcg@10"]
    assert main(args) == 2
    _assert_one_error_line(capsys.readouterr().err, qrels)

    output = toy.parent / "metrics.json"
    assert main([*args, "--qrels-duplicates", "last", "-o", str(output)]) == 0
    metrics = json.loads(output.read_text(encoding="utf-8"))["metrics"]
    # The last grade (2) makes d3 relevant: P@2 = 1 and d3 above d1 is the ideal order.
    # The first grade (0) would give P@2 = 0.5 and nDCG@10 = 1/log2(3).
    assert metrics == {"p@2": 1.0, "ndcg@10": 1.0}


def test_compare_refuses_duplicates_by_default(toy: Path, capsys):
    qrels, run = toy / "qrels" / "test.tsv", toy.parent / "run.trec"
    other = toy.parent / "other.trec"
    other.write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d3 2 1.0 t\n", encoding="utf-8")
    args = ["compare", str(qrels), str(run), str(other), "--metrics", "ndcg@10", "--n-resamples", "100"]
    assert main(args) == 2
    _assert_one_error_line(capsys.readouterr().err, qrels)
    assert main([*args, "--qrels-duplicates", "last"]) == 0


def test_eval_refuses_duplicates_by_default_and_keeps_the_last_grade_when_asked(toy: Path, capsys):
    qrels = toy / "qrels" / "test.tsv"
    results, cache = toy.parent / "results", toy.parent / "cache"
    args = ["eval", "--dataset", str(toy), "--model", "bm25", "--results-dir", str(results)]
    args += ["--cache-dir", str(cache), "--metrics", "p@2", "ndcg@10", "--no-progress"]
    assert main(args) == 2
    _assert_one_error_line(capsys.readouterr().err, qrels)
    assert not results.exists()

    assert main([*args, "--qrels-duplicates", "last"]) == 0
    # A home-made folder's results are keyed by its checksums; a non-default rule keeps its own result.
    (folder,) = results.glob("toy@*/bm25@qrels_duplicates=last")
    stored = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    assert stored["metrics"] == {"p@2": 1.0, "ndcg@10": 1.0}
    provenance = json.loads((folder / "provenance.json").read_text(encoding="utf-8"))
    assert provenance["config"]["dataset"]["qrels_duplicates"] == "last"


def test_data_verify_refuses_by_default_and_reports_the_count_when_asked(toy: Path, capsys):
    assert main(["data", "verify", str(toy)]) == 2
    _assert_one_error_line(capsys.readouterr().err, toy / "qrels" / "test.tsv")
    assert main(["data", "verify", str(toy), "--qrels-duplicates", "last"]) == 0
    out = capsys.readouterr().out
    assert "note: 1 qrels rows repeat a (query, document) pair; last one kept" in out
    assert "qrels             3" in out  # rows read, as BEIR's tables count them


def test_reader_policies(toy: Path):
    path = toy / "qrels" / "test.tsv"
    kept = read_qrels(path, duplicates="last")
    assert kept.qrels == {"q1": {"d1": 1, "d3": 2}}
    assert (kept.rows, kept.duplicate_rows, kept.first_duplicate_line) == (3, 1, 4)
    assert load_dataset(toy, qrels_duplicates="last").report.duplicate_qrels_rows == 1
    with pytest.raises(Exception, match="unknown qrels duplicates policy 'first'"):
        read_qrels(path, duplicates="first")


def test_checksum_store_recomputes_only_when_the_file_changes(tmp_path: Path, monkeypatch):
    root = tmp_path / "folder"
    root.mkdir()
    data = root / "corpus.jsonl"
    data.write_text("one\n", encoding="utf-8")
    calls: list[Path] = []
    real_digest = checksums_module.file_digest

    def counting_digest(path, algorithm="sha256"):
        calls.append(Path(path))
        return real_digest(path, algorithm)

    monkeypatch.setattr(checksums_module, "file_digest", counting_digest)
    store = ChecksumStore()
    first = store.sha256(root, "corpus.jsonl")
    assert store.sha256(root, "corpus.jsonl") == first and len(calls) == 1  # reused in memory
    fresh = ChecksumStore()  # what a new process has: only the sidecar
    assert fresh.sha256(root, "corpus.jsonl") == first and len(calls) == 1
    assert not (root / SIDECAR_FILE).exists()  # the folder is only read: the values live in the cache
    stored = json.loads(store.path_for(root).read_text(encoding="utf-8"))
    status = data.stat()
    assert stored == {
        "version": 2,
        "folder": str(root.resolve()),
        "entries": {"sha256:corpus.jsonl": {"stamp": [[status.st_size, status.st_mtime_ns]], "value": first}},
    }

    data.write_text("two\n", encoding="utf-8")  # same size: the mtime tells
    os.utime(data, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000_000))
    second = store.sha256(root, "corpus.jsonl")
    assert second != first and second == real_digest(data, "sha256") and len(calls) == 2

    data.write_text("three\n", encoding="utf-8")  # another size
    os.utime(data, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000_000))  # even with the same mtime
    assert store.sha256(root, "corpus.jsonl") == real_digest(data, "sha256") and len(calls) == 3
