"""MTEB-layout (Hugging Face hub) retrieval datasets: local copies, a hub served on 127.0.0.1, real scifact."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.core.errors import HarnessError
from harness.datasets.beir import iter_corpus, load_dataset, load_queries
from harness.datasets.download import HostUnreachable, fetch_url
from harness.datasets.prepare import DataSettings, check_dataset_spec, open_dataset
from harness.datasets.qrels import read_qrels

README = """---
configs:
- config_name: corpus
  data_files:
  - split: corpus
    path: corpus/corpus-*
- config_name: queries
  data_files:
  - split: queries
    path: queries/queries-*
- config_name: default
  data_files:
  - split: test
    path: qrels/test.jsonl
---
# a dataset card
"""

DOCS = [
    {"_id": "d1", "title": "Cats", "text": "cats sleep all day"},
    {"_id": "d2", "title": "", "text": "dogs bark at night"},
    {"_id": "d3", "title": "Fish", "text": "fish swim in water"},
]
QUERIES = [
    {"_id": "q1", "text": "sleeping cats"},
    {"_id": "q2", "text": "barking dogs"},
    {"_id": "q3", "text": "x"},
]
QRELS = [
    {"query-id": "q1", "corpus-id": "d1", "score": 1},
    {"query-id": "q2", "corpus-id": "d2", "score": 2},
]


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def _write_parquet_shards(folder: Path, stem: str, rows: list[dict], shards: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(rows) // shards)
    for index in range(shards):
        chunk = rows[index * size : (index + 1) * size]
        pq.write_table(pa.Table.from_pylist(chunk), folder / f"{stem}-{index:05d}-of-{shards:05d}.parquet")


def make_hub_copy(
    target: Path,
    docs: list[dict],
    queries: list[dict],
    qrels: list[dict],
    *,
    readme: bool = True,
    shards: int = 2,
) -> Path:
    """A folder laid out as the hub stores an MTEB retrieval dataset (parquet corpus, JSONL qrels)."""
    _write_parquet_shards(target / "corpus", "corpus", docs, shards)
    _write_parquet_shards(target / "queries", "queries", queries, 1)
    _write_jsonl(target / "qrels" / "test.jsonl", qrels)
    if readme:
        (target / "README.md").write_text(README, encoding="utf-8")
    return target


def _settings(tmp_path: Path, **changes) -> DataSettings:
    return DataSettings(data_dir=tmp_path / "data", **changes)


# ------------------------------------------------------------------------------- local folders


@pytest.mark.parametrize("readme", [True, False], ids=["card-configs", "inferred-configs"])
def test_local_hub_folder_loads_like_beir(tmp_path: Path, readme: bool) -> None:
    folder = make_hub_copy(tmp_path / "toy", DOCS, QUERIES, QRELS, readme=readme)
    dataset = open_dataset(str(folder), _settings(tmp_path))
    assert [(doc.id, doc.title, doc.text) for doc in dataset.iter_documents()] == [
        (row["_id"], row["title"], row["text"]) for row in DOCS
    ]
    assert dataset.queries == {
        "q1": "sleeping cats",
        "q2": "barking dogs",
    }  # q3 is unjudged: dropped as mteb does
    assert dataset.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2}}
    assert dataset.excluded_ids == {}
    assert dataset.name.startswith("toy@") and dataset.split == "test"
    # Converted once: a second open reuses the copy (same folder, no new conversion).
    again = open_dataset(str(folder), _settings(tmp_path))
    assert again.root == dataset.root and again.name == dataset.name


def test_changed_local_copy_gets_a_new_identity(tmp_path: Path) -> None:
    folder = make_hub_copy(tmp_path / "toy", DOCS, QUERIES, QRELS)
    first = open_dataset(str(folder), _settings(tmp_path))
    _write_jsonl(folder / "qrels" / "test.jsonl", QRELS[:1])
    second = open_dataset(str(folder), _settings(tmp_path))
    assert second.name != first.name and second.qrels == {"q1": {"d1": 1}}


def test_excluded_ids_are_carried_per_query(tmp_path: Path) -> None:
    queries = [dict(row, excluded_ids=ids) for row, ids in zip(QUERIES, [["d3"], ["N/A"], []], strict=True)]
    folder = make_hub_copy(tmp_path / "toy", DOCS, queries, QRELS)
    dataset = open_dataset(str(folder), _settings(tmp_path))
    assert dataset.excluded_ids == {"q1": ["d3"]}  # BRIGHT's ["N/A"] means none


def test_bright_layout_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BRIGHT's repo: documents/<domain> and examples/<domain> with gold_ids and excluded_ids."""
    mirror = tmp_path / "mirror" / "xlangai" / "BRIGHT"
    _write_parquet_shards(
        mirror / "documents", "biology", [{"id": d["_id"], "content": d["text"]} for d in DOCS], 1
    )
    examples = [
        {
            "id": "q1",
            "query": "sleeping cats",
            "gold_ids": ["d1"],
            "gold_ids_long": [],
            "excluded_ids": ["d2"],
        },
        {
            "id": "q2",
            "query": "barking dogs",
            "gold_ids": ["d2"],
            "gold_ids_long": [],
            "excluded_ids": ["N/A"],
        },
    ]
    _write_parquet_shards(mirror / "examples", "biology", examples, 1)
    config = tmp_path / "config"
    config.mkdir()
    (config / "datasets.yaml").write_text(
        "datasets:\n"
        "  bright-biology-toy:\n"
        "    hub: xlangai/BRIGHT\n    hub_revision: abc123\n    hub_layout: bright\n"
        "    hub_split: biology\n    splits: [standard]\n    eval_split: standard\n    group: bright-toy\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(config))
    monkeypatch.setenv("HF_ENDPOINT", "http://nonexistent.invalid")  # never reached: the mirror has it
    from harness.datasets.dataset_registry import expand_dataset_names

    assert expand_dataset_names(["bright-toy"]) == ["bright-biology-toy"]
    dataset = open_dataset("bright-biology-toy", _settings(tmp_path, mirror=str(tmp_path / "mirror")))
    assert dataset.qrels == {"q1": {"d1": 1}, "q2": {"d2": 1}}
    assert dataset.excluded_ids == {"q1": ["d2"]}
    assert [doc.text for doc in dataset.iter_documents()] == [d["text"] for d in DOCS]


def test_qrels_naming_missing_queries_is_one_line(tmp_path: Path) -> None:
    folder = make_hub_copy(
        tmp_path / "toy", DOCS, QUERIES, [*QRELS, {"query-id": "q9", "corpus-id": "d1", "score": 1}]
    )
    with pytest.raises(HarnessError) as error:
        open_dataset(str(folder), _settings(tmp_path, strict=True))
    message = str(error.value)
    assert "\n" not in message and "'q9'" in message and "not in the queries file" in message


def test_missing_qrels_config_is_one_line(tmp_path: Path) -> None:
    folder = make_hub_copy(tmp_path / "toy", DOCS, QUERIES, QRELS, readme=False)
    (folder / "qrels" / "test.jsonl").unlink()
    with pytest.raises(HarnessError, match=r"no 'qrels' config for the qrels") as error:
        open_dataset(str(folder), _settings(tmp_path))
    assert "\n" not in str(error.value)


def test_hub_spec_needs_a_revision() -> None:
    with pytest.raises(HarnessError, match=r"has no revision; pin one"):
        check_dataset_spec("hf:mteb/scifact")


# ---------------------------------------------------------------------------- a hub on 127.0.0.1


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub:
    """Serves a folder as the hub's HTTP API serves repo ``owner/name`` at revision ``rev``."""

    def __init__(self, folder: Path, repo: str, revision: str) -> None:
        self.folder, self.repo, self.revision = folder, repo, revision
        self.requests: list[str] = []
        self.corrupt: set[str] = set()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (the http.server name)
                hub.requests.append(self.path)
                assert len(hub.requests) < 100, "too many requests"
                status, headers, body = hub.answer(self.path)
                self.send_response(status)
                for key, value in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.timeout = 5
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _entries(self) -> list[dict]:
        entries = []
        for path in sorted(self.folder.rglob("*")):
            if path.is_file():
                data = path.read_bytes()
                entry = {"type": "file", "path": path.relative_to(self.folder).as_posix(), "size": len(data)}
                entry["oid"] = _git_blob_sha1(data)
                if path.suffix == ".parquet":  # LFS files: the listing gives their sha256
                    entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data)}
                entries.append(entry)
        return entries

    def answer(self, raw_path: str) -> tuple[int, dict[str, str], bytes]:
        parts = urlsplit(raw_path)
        path = unquote(parts.path)
        tree = f"/api/datasets/{self.repo}/tree/"
        resolve = f"/datasets/{self.repo}/resolve/"
        if path.startswith(tree):
            if path[len(tree) :] != self.revision:
                return 404, {"X-Error-Code": "RevisionNotFound"}, b'{"error": "Invalid rev id"}'
            entries = self._entries()
            page = 1 if "page=2" in parts.query else 0
            half = len(entries) // 2
            headers = {"Content-Type": "application/json"}
            if page == 0:  # two pages, as the hub pages long listings
                headers["Link"] = f'<{self.endpoint}{parts.path}?recursive=true&page=2>; rel="next"'
            return 200, headers, json.dumps(entries[:half] if page == 0 else entries[half:]).encode()
        if path.startswith(resolve):
            revision, _, relative = path[len(resolve) :].partition("/")
            file = self.folder / relative
            if revision != self.revision or not file.is_file():
                return 404, {"X-Error-Code": "EntryNotFound"}, b"not found"
            data = file.read_bytes()
            if relative in self.corrupt:
                data = data[:-1] + bytes([data[-1] ^ 1])
            return 200, {}, data
        return 404, {"X-Error-Code": "RepoNotFound"}, b"no such repo"

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def fake_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    folder = make_hub_copy(tmp_path / "served", DOCS, QUERIES, QRELS)
    with FakeHub(folder, "toy-org/toy", REVISION) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        yield hub


def test_hub_spec_downloads_checks_and_loads(tmp_path: Path, fake_hub: FakeHub) -> None:
    settings = _settings(tmp_path)
    dataset = open_dataset(f"hf:toy-org/toy@{REVISION}", settings)
    assert dataset.name == f"toy-org/toy@{REVISION}"
    assert dataset.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2}}
    assert [doc.id for doc in dataset.iter_documents()] == ["d1", "d2", "d3"]
    source = json.loads((dataset.root / ".harness-source.json").read_text())
    assert source["kind"] == "hub" and source["revision"] == REVISION
    served = fake_hub.folder / "corpus" / "corpus-00000-of-00002.parquet"
    assert (
        source["files"]["corpus/corpus-00000-of-00002.parquet"]
        == hashlib.sha256(served.read_bytes()).hexdigest()
    )
    # Both listing pages, the card and the 4 data files; a second open downloads nothing.
    assert len(fake_hub.requests) == 7
    open_dataset(f"hf:toy-org/toy@{REVISION}", settings)
    assert len(fake_hub.requests) == 7


def test_unknown_revision_is_one_line_naming_repo_and_revision(tmp_path: Path, fake_hub: FakeHub) -> None:
    with pytest.raises(HarnessError) as error:
        open_dataset("hf:toy-org/toy@deadbeef", _settings(tmp_path))
    message = str(error.value)
    assert "\n" not in message
    assert "Hugging Face hub toy-org/toy@deadbeef: this revision does not exist" in message
    assert len(fake_hub.requests) == 1  # a 404 is not retried


def test_corrupted_download_is_refused(tmp_path: Path, fake_hub: FakeHub) -> None:
    fake_hub.corrupt.add("corpus/corpus-00001-of-00002.parquet")
    with pytest.raises(HarnessError, match=r"corpus-00001-of-00002.parquet: sha256 \w+ is not the expected"):
        open_dataset(f"hf:toy-org/toy@{REVISION}", _settings(tmp_path))
    assert not list((tmp_path / "data").glob("hf/**/corpus.jsonl"))  # nothing half-installed


def test_registry_record_with_hub_fields_and_pins(
    tmp_path: Path, fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = fake_hub.folder / "qrels" / "test.jsonl"
    config = tmp_path / "config"
    config.mkdir()
    (config / "datasets.yaml").write_text(
        "datasets:\n  toy-mteb:\n    hub: toy-org/toy\n"
        f"    hub_revision: {REVISION}\n    splits: [test]\n    eval_split: test\n"
        "    counts: {test: {docs: 3, queries: 2, qrels: 2}}\n"
        f"    hub_files: {{qrels/test.jsonl: {hashlib.sha256(served.read_bytes()).hexdigest()}}}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(config))
    dataset = open_dataset("toy-mteb", _settings(tmp_path))
    assert dataset.name == "toy-mteb" and dataset.root == tmp_path / "data" / "toy-mteb"
    assert dataset.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2}}


# ------------------------------------------------------------------------- unreachable hosts


def test_unresolvable_host_fails_at_once_with_one_line(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(HostUnreachable) as error:
        fetch_url(
            "http://nonexistent.invalid/scifact.zip",
            tmp_path / "x.zip",
            md5=None,
            attempts=3,
            backoff=2.0,
            timeout=5,
        )
    message = str(error.value)
    assert time.monotonic() - started < 10  # three attempts with backoff would sleep 6 s
    assert "\n" not in message and "cannot reach host nonexistent.invalid: name does not resolve" in message
    assert "--mirror" in message


def test_refused_connection_fails_at_once(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(HostUnreachable, match=r"cannot reach host 127.0.0.1: connection refused"):
        fetch_url(
            f"http://127.0.0.1:{port}/a.zip", tmp_path / "a.zip", md5=None, attempts=3, backoff=2.0, timeout=5
        )
    assert time.monotonic() - started < 2


def test_unreachable_hub_is_one_line_with_the_offline_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://nonexistent.invalid")
    with pytest.raises(HarnessError) as error:
        open_dataset(f"hf:toy-org/toy@{REVISION}", _settings(tmp_path))
    message = str(error.value)
    assert "\n" not in message and "nonexistent.invalid" in message and "local folder" in message


# ------------------------------------------------------------------------ real data: scifact


def _scifact_as_hub_copy(beir_folder: Path, target: Path) -> Path:
    """BEIR's scifact rewritten as the hub lays out mteb/scifact: parquet corpus in shards, JSONL qrels."""
    docs = [
        {"_id": doc.id, "title": doc.title, "text": doc.text}
        for doc in iter_corpus(beir_folder / "corpus.jsonl")
    ]
    queries = [
        {"_id": qid, "text": text} for qid, text in load_queries(beir_folder / "queries.jsonl").items()
    ]
    qrels_file = read_qrels(beir_folder / "qrels" / "test.tsv", layout="beir")
    qrels = [
        {"query-id": qid, "corpus-id": did, "score": score}
        for qid, judged in qrels_file.qrels.items()
        for did, score in judged.items()
    ]
    return make_hub_copy(target, docs, queries, qrels, shards=3)


@pytest.mark.slow  # ~11 s: two BM25 indexes of scifact
def test_scifact_through_the_hub_layout_equals_the_beir_path(beir_mirror: Path, tmp_path: Path) -> None:
    from harness.evaluation.metrics import evaluate
    from harness.models.model_registry import find_record
    from harness.retrieval.bm25 import BM25Retriever

    beir = load_dataset(beir_mirror / "scifact", "test")
    hub = open_dataset(
        str(_scifact_as_hub_copy(beir_mirror / "scifact", tmp_path / "scifact")), _settings(tmp_path)
    )
    assert hub.num_docs == beir.num_docs == 5183 and hub.queries == beir.queries and hub.qrels == beir.qrels
    scores = []
    for dataset in (beir, hub):
        run = BM25Retriever(find_record("bm25-mteb"), cache_dir=tmp_path / "cache", progress=False).retrieve(
            dataset, 1000
        )
        scores.append(evaluate(dataset.qrels, run, ["ndcg@10", "recall@100"]).aggregate)
    assert scores[0] == scores[1]  # bit for bit
    assert scores[0]["ndcg@10"] == pytest.approx(0.6897, abs=0.01)
