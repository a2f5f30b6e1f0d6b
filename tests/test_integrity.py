"""Nothing lost, nothing silently wrong: installs, result folders, the cache and bad input (issue 15, part A).

Every failure case asserts one ``error:`` line on stderr naming the file or option and the fix, exit
code 2, no traceback, and that the results, cache and data already on disk are byte-for-byte unchanged.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import REPO_ROOT
from fault_snapshot import assert_unchanged
from fault_snapshot import snapshot as full_snapshot
from tiny_bert import tiny_record

from harness.cli import main
from harness.core.artifacts import CorruptArtifact, load_array, save_array
from harness.core.cache import auto_shard_size, shard_paths
from harness.core.staging import is_stale
from harness.datasets import download
from harness.datasets.beir import load_dataset
from harness.datasets.dataset_registry import SOURCE_FILE, get_dataset_record
from harness.datasets.download import DownloadError, fetch_url
from harness.encoding.embedding_cache import EmbeddingCache, encode_corpus_shards
from harness.encoding.onnx_export import ensure_exported
from harness.encoding.plan import EncodingSettings, encoder_spec_for
from harness.encoding.runtime_choice import build_encoder
from harness.models.resolve import resolve_model, resolve_record
from harness.results.result_store import load_result

WORDS = [
    "gene",
    "protein",
    "cell",
    "mouse",
    "study",
    "cancer",
    "brain",
    "virus",
    "immune",
    "drug",
    "trial",
    "dose",
    "risk",
    "blood",
    "heart",
]


def _docs(count: int) -> list[dict]:
    return [
        {
            "_id": f"d{i}",
            "title": WORDS[i % len(WORDS)],
            "text": " ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 9)),
        }
        for i in range(count)
    ]


def write_beir(root: Path, docs: list[dict], queries: list[dict], qrels: list[tuple[str, str, int]]) -> Path:
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    rows = "".join(f"{q}\t{d}\t{s}\n" for q, d, s in qrels)
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    return root


def toy_dataset(root: Path, num_docs: int = 40) -> Path:
    queries = [{"_id": f"q{i}", "text": f"{WORDS[i]} {WORDS[i + 1]}"} for i in range(6)]
    qrels = [(f"q{i}", f"d{(i * 7) % num_docs}", 1) for i in range(6)]
    return write_beir(root, _docs(num_docs), queries, qrels)


def snapshot(*folders: Path) -> dict[str, str]:
    """sha256 of every file under ``folders`` (what must not change when a command fails)."""
    found = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")) if folder.exists() else []:
            if path.is_file():  # every file, a sidecar too: nothing is ever written beside the data
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def one_error_line(capsys: pytest.CaptureFixture[str], code: int, *needles: str) -> str:
    """The single ``error:`` line a failed command printed (exit 2, no traceback), checked for ``needles``."""
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def eval_args(work: Path, dataset: str | Path, model: str | Path = "bm25", *extra: str) -> list[str]:
    return [
        "eval",
        "--dataset",
        str(dataset),
        "--model",
        str(model),
        "--results-dir",
        str(work / "results"),
        "--cache-dir",
        str(work / "cache"),
        "--data-dir",
        str(work / "data"),
        "--no-progress",
        *extra,
    ]


@pytest.fixture
def toy_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A registry overlay with dataset ``toy`` (no pins, a dead URL) and a local mirror folder holding it."""
    mirror = tmp_path / "mirror"
    toy_dataset(mirror / "toy", num_docs=10_000)  # big enough that installs and loads overlap
    document = {
        "datasets": {
            "toy": {"url": "http://127.0.0.1:9/toy.zip", "splits": ["test"], "eval_split": "test"},
        }
    }
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "datasets.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    monkeypatch.setenv("HARNESS_CONFIG_DIR", str(configs))
    return mirror


# ------------------------------------------------------------------------------------ installs


def _harness(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "harness", *args],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_two_processes_installing_and_evaluating_one_dataset_both_succeed(toy_registry: Path, tmp_path: Path):
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "HARNESS_BEIR_MIRROR": str(toy_registry),
        "OMP_NUM_THREADS": "1",
    }
    for round_ in range(10):
        work = tmp_path / f"round{round_}"
        processes = [
            _harness(
                [
                    "eval",
                    "--dataset",
                    "toy",
                    "--model",
                    "bm25",
                    "--no-progress",
                    "--data-dir",
                    str(work / "data"),  # shared, and fresh each round
                    "--cache-dir",
                    str(work / f"cache{side}"),
                    "--results-dir",
                    str(work / f"results{side}"),
                ],
                env,
            )
            for side in (0, 1)
        ]
        outcomes = [process.communicate(timeout=300) for process in processes]
        for process, (_, err) in zip(processes, outcomes, strict=True):
            assert process.returncode == 0, f"round {round_}: {err}"
            assert "Traceback" not in err
        first, second = (load_result(work / f"results{side}" / "toy" / "bm25") for side in (0, 1))
        assert first.metrics == second.metrics and first.per_query == second.per_query
        assert ranking_lines(first.run_path) == ranking_lines(second.run_path)  # headers hold timings
        assert not list((work / "data").glob(".tmp-*"))  # no staging folder left behind


def test_a_copy_that_appears_meanwhile_is_kept_not_replaced(toy_registry: Path, tmp_path: Path, monkeypatch):
    data_dir = tmp_path / "data"
    theirs = tmp_path / "theirs"
    shutil.copytree(toy_registry / "toy", theirs)
    original = download._materialise

    def another_process_finishes_first(*args, **kwargs):
        candidate = original(*args, **kwargs)
        shutil.copytree(theirs, data_dir / "toy")  # the other install renamed its copy into place
        return candidate

    monkeypatch.setattr(download, "_materialise", another_process_finishes_first)
    with open(theirs / "corpus.jsonl", "rb"):
        folder = download.install_dataset(
            get_dataset_record("toy"), data_dir, str(toy_registry), progress=False
        )
    assert folder == data_dir / "toy"
    # Theirs, untouched: this install's copy would also hold its source record.
    assert not (folder / SOURCE_FILE).exists()
    assert {path.relative_to(folder): path.read_bytes() for path in folder.rglob("*") if path.is_file()} == {
        path.relative_to(theirs): path.read_bytes() for path in theirs.rglob("*") if path.is_file()
    }
    assert not list(data_dir.glob(".tmp-*"))  # this install's own staging copy is freed


def test_staging_leftovers_of_a_killed_install_are_freed_at_the_next_start(
    toy_registry: Path, tmp_path: Path
):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    # A process that makes its staging folder, then dies by SIGKILL, as a killed download would.
    code = (
        "import os, signal, sys; from pathlib import Path; from harness.core.staging import make_staging; "
        "folder = make_staging(Path(sys.argv[1]), '.tmp-toy-'); (folder / 'corpus.jsonl').write_text('x'); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    killed = subprocess.run(
        [sys.executable, "-c", code, str(data_dir)], env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    )
    assert killed.returncode == -signal.SIGKILL
    (dead,) = data_dir.glob(".tmp-toy-*")
    alive = data_dir / f".tmp-toy-@{socket.gethostname()}@{os.getppid()}@live"  # a running writer's
    alive.mkdir()
    untagged = data_dir / ".tmp-toy-oldformat"  # recent, from a version without owner tags
    untagged.mkdir()
    assert is_stale(dead) and not is_stale(alive) and not is_stale(untagged)
    assert main(["data", "download", "toy", "--data-dir", str(data_dir), "--mirror", str(toy_registry)]) == 0
    assert not dead.exists() and alive.is_dir() and untagged.is_dir()
    os.utime(untagged, (0, 0))  # untouched for longer than the bound: stale
    assert is_stale(untagged)


def test_bm25_staging_leftovers_of_a_killed_build_are_freed(tmp_path: Path):
    folder = toy_dataset(tmp_path / "toy")
    stale = tmp_path / "cache" / "bm25" / f".0123abcd.@{socket.gethostname()}@{_dead_pid()}@x.tmp"
    stale.mkdir(parents=True)
    (stale / "vocab.index.json").write_text("{}")
    assert main(eval_args(tmp_path, folder)) == 0
    assert not stale.exists()
    assert not list((tmp_path / "cache" / "bm25").glob(".*.tmp"))


def _dead_pid() -> int:
    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(finished.stdout)


# ------------------------------------------------------------------------------------- results


def test_a_custom_folder_named_like_a_registry_dataset_never_replaces_its_results(
    tmp_path: Path, beir_mirror: Path, capsys
):
    genuine = ["--mirror", str(beir_mirror)]
    assert main(eval_args(tmp_path, "scifact", "bm25", *genuine)) == 0
    results = tmp_path / "results"
    before = snapshot(results / "scifact")
    assert before

    mine = tmp_path / "mine" / "scifact"  # a home-made scifact: same name, other judgments
    shutil.copytree(beir_mirror / "scifact", mine)
    qrels = (mine / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    (mine / "qrels" / "test.tsv").write_text("".join(qrels[:100]), encoding="utf-8")
    assert main(eval_args(tmp_path, mine, "bm25", "--force")) == 0
    assert snapshot(results / "scifact") == before
    (custom,) = [path for path in results.iterdir() if path.name.startswith("scifact@")]
    assert load_result(custom / "bm25").n_queries < load_result(results / "scifact" / "bm25").n_queries
    assert load_result(custom / "bm25").dataset == custom.name

    # A byte-identical copy elsewhere is scifact itself: it finds (and reuses) the genuine result.
    twin = tmp_path / "twin" / "scifact"
    shutil.copytree(beir_mirror / "scifact", twin)
    capsys.readouterr()
    assert main(eval_args(tmp_path, twin, "bm25")) == 0
    assert "(reused)" in capsys.readouterr().out
    assert snapshot(results / "scifact") == before


# --------------------------------------------------------------------------------------- cache


@pytest.mark.parametrize("key", ["", "  ", "a", "0x12zz"])
def test_cache_clear_refuses_an_empty_or_ambiguous_key(tmp_path: Path, capsys, key: str):
    folder = toy_dataset(tmp_path / "toy")
    assert main(eval_args(tmp_path, folder)) == 0
    capsys.readouterr()
    before = snapshot(tmp_path / "cache")
    assert before
    code = main(["cache", "clear", key, "--cache-dir", str(tmp_path / "cache")])
    one_error_line(capsys, code, "KEY", "harness cache list", "--all")
    assert snapshot(tmp_path / "cache") == before


@pytest.fixture
def encoded(tmp_path: Path, tiny_st_dir: Path, capsys) -> Path:
    """A toy folder evaluated once with the tiny model: its corpus and queries are in the cache."""
    folder = toy_dataset(tmp_path / "toy")
    assert main(eval_args(tmp_path, folder, tiny_st_dir)) == 0
    capsys.readouterr()
    return folder


def _entry(cache: Path, part: str) -> Path:
    (directory,) = (cache / "embeddings").glob(f"*__{part}__*")
    return directory


def test_a_corpus_shard_overwritten_from_outside_is_refused(
    encoded: Path, tiny_st_dir: Path, tmp_path, capsys
):
    vectors_path = shard_paths(_entry(tmp_path / "cache", "corpus"), 0)[0]
    original = np.load(vectors_path)
    np.save(vectors_path, np.zeros_like(original), allow_pickle=False)  # same shape and dtype, other values
    before = snapshot(tmp_path / "results", tmp_path / "cache", encoded)
    code = main(eval_args(tmp_path, encoded, tiny_st_dir, "--force"))
    one_error_line(capsys, code, str(vectors_path), "changed since it was written", "harness cache clear")
    assert snapshot(tmp_path / "results", tmp_path / "cache", encoded) == before


def test_a_truncated_corpus_shard_is_refused(encoded: Path, tiny_st_dir: Path, tmp_path, capsys):
    vectors_path = shard_paths(_entry(tmp_path / "cache", "corpus"), 0)[0]
    vectors_path.write_bytes(vectors_path.read_bytes()[:100])
    before = snapshot(tmp_path / "results", tmp_path / "cache", encoded)
    code = main(eval_args(tmp_path, encoded, tiny_st_dir, "--force"))
    one_error_line(capsys, code, str(vectors_path), "truncated or replaced", "harness cache clear")
    assert snapshot(tmp_path / "results", tmp_path / "cache", encoded) == before


@pytest.mark.parametrize("damage", ["truncate", "reshape"])
def test_a_damaged_query_embedding_file_is_encoded_again_with_a_note(
    encoded: Path, tiny_st_dir: Path, tmp_path, capsys, caplog, damage: str
):
    results = tmp_path / "results"
    (result_folder,) = results.glob("toy@*/*")
    first = load_result(result_folder)
    vectors_path = shard_paths(_entry(tmp_path / "cache", "queries"), 0)[0]
    if damage == "truncate":
        vectors_path.write_bytes(vectors_path.read_bytes()[:-40])
    else:
        np.save(vectors_path, np.zeros((2, 3), dtype=np.float32), allow_pickle=False)
    assert main(eval_args(tmp_path, encoded, tiny_st_dir, "--force")) == 0
    assert "Traceback" not in capsys.readouterr().err
    notes = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert any(str(vectors_path) in note and "encoding the queries again" in note for note in notes), notes
    again = load_result(result_folder)
    assert again.metrics == first.metrics
    assert np.load(vectors_path).shape[0] == 6  # the toy set's six judged queries, encoded afresh


def test_small_corpora_still_checkpoint(tmp_path: Path, tiny_st_dir: Path):
    assert [auto_shard_size(n) for n in (10, 2_000, 5_183, 400_000, 8_800_000)] == [
        256,
        256,
        648,
        50_000,
        50_000,
    ]
    dataset = load_dataset(toy_dataset(tmp_path / "toy", num_docs=700))
    encoder = encoder_spec_for(resolve_model(str(tiny_st_dir)), EncodingSettings(device="cpu")).build("cpu")
    cache = EmbeddingCache(tmp_path / "cache")
    encoded: list[int] = []

    def killed_after_one_shard(job, shards):
        encode_corpus_shards(job, shards[:1])
        encoded.extend(shards[:1])
        raise KeyboardInterrupt  # kill -9 stand-in: only whole shards are on disk

    with pytest.raises(KeyboardInterrupt):
        cache.corpus(dataset, encoder, progress=False, encode_shards=killed_after_one_shard)

    def counting(job, shards):
        encoded.extend(shards)
        return encode_corpus_shards(job, shards)

    corpus = cache.corpus(dataset, encoder, progress=False, encode_shards=counting)
    assert (corpus.shard_size, corpus.num_shards) == (256, 3)
    assert encoded == [0, 1, 2]  # the rerun encoded only the two shards the kill lost
    assert len(corpus.doc_ids()) == 700


def test_an_entry_written_with_the_former_shard_size_is_still_used(tmp_path: Path, tiny_st_dir: Path):
    dataset = load_dataset(toy_dataset(tmp_path / "toy", num_docs=700))
    encoder = encoder_spec_for(resolve_model(str(tiny_st_dir)), EncodingSettings(device="cpu")).build("cpu")
    cache = EmbeddingCache(tmp_path / "cache")
    legacy = cache.corpus(dataset, encoder, shard_size=50_000, progress=False)
    before = snapshot(tmp_path / "cache")

    def must_not_encode(job, shards):
        raise AssertionError(f"re-encoded {shards}")

    again = cache.corpus(dataset, encoder, progress=False, encode_shards=must_not_encode)
    assert again.directory == legacy.directory and again.shard_size == 50_000
    assert snapshot(tmp_path / "cache") == before


def test_a_gzipped_corpus_works_with_bm25(tmp_path: Path):
    plain = toy_dataset(tmp_path / "plain" / "toy")
    zipped = toy_dataset(tmp_path / "zipped" / "toy")
    with gzip.open(zipped / "corpus.jsonl.gz", "wb") as handle:
        handle.write((zipped / "corpus.jsonl").read_bytes())
    (zipped / "corpus.jsonl").unlink()
    assert main(eval_args(tmp_path, plain)) == 0
    assert main(eval_args(tmp_path, zipped)) == 0
    plain_result, zipped_result = (
        load_result(tmp_path / "results" / load_dataset(folder).name / "bm25") for folder in (plain, zipped)
    )
    assert zipped_result.metrics == plain_result.metrics
    # The same ranking; the runs' ir_metadata headers (# lines) differ in timings and data checksums.
    assert ranking_lines(zipped_result.run_path) == ranking_lines(plain_result.run_path)


def ranking_lines(run_file: Path) -> list[str]:
    return [line for line in run_file.read_text().splitlines() if not line.startswith("#")]


# ----------------------------------------------------------------------------------- bad input


def _eval_fails(tmp_path: Path, capsys, dataset: Path | str, *needles: str) -> str:
    before = snapshot(tmp_path / "results", tmp_path / "cache", Path(dataset))
    line = one_error_line(capsys, main(eval_args(tmp_path, dataset)), *needles)
    assert snapshot(tmp_path / "results", tmp_path / "cache", Path(dataset)) == before
    assert not (tmp_path / "results").exists()  # no empty result folder either
    return line


@pytest.mark.parametrize("where", ["corpus", "queries"])
def test_ids_with_whitespace_are_refused_at_load_by_file_and_line(tmp_path: Path, capsys, where: str):
    folder = toy_dataset(tmp_path / "toy")
    name = "corpus.jsonl" if where == "corpus" else "queries.jsonl"
    lines = (folder / name).read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = lines[2].replace('"_id": "', '"_id": "two words ', 1)
    (folder / name).write_text("".join(lines), encoding="utf-8")
    _eval_fails(tmp_path, capsys, folder, f"{folder / name}:3:", "contains whitespace", "rename it")


def test_judged_queries_with_empty_text_are_counted_in_a_warning(tmp_path: Path, capsys, caplog):
    folder = toy_dataset(tmp_path / "toy")
    lines = (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[3] = json.dumps({"_id": "q3", "text": "  "}) + "\n"
    (folder / "queries.jsonl").write_text("".join(lines), encoding="utf-8")
    assert main(eval_args(tmp_path, folder)) == 0
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    expected = f"{folder / 'queries.jsonl'}:4: 1 judged queries have empty text (first 'q3')"
    assert any(warning.startswith(expected) and "--complete" in warning for warning in warnings), warnings
    (result,) = (tmp_path / "results").glob("toy@*/bm25")
    assert "q3" not in load_result(result).per_query  # left out, as the warning says


def test_an_empty_queries_file_is_named(tmp_path: Path, capsys):
    folder = toy_dataset(tmp_path / "toy")
    (folder / "queries.jsonl").write_text("", encoding="utf-8")
    _eval_fails(tmp_path, capsys, folder, str(folder / "queries.jsonl"), "no queries")


def test_queries_that_match_no_judgment_are_named(tmp_path: Path, capsys):
    folder = toy_dataset(tmp_path / "toy")
    (folder / "queries.jsonl").write_text('{"_id": "other", "text": "gene"}\n', encoding="utf-8")
    _eval_fails(tmp_path, capsys, folder, str(folder / "qrels" / "test.tsv"), str(folder / "queries.jsonl"))


def test_space_separated_beir_qrels_get_the_tab_hint(tmp_path: Path, capsys):
    folder = toy_dataset(tmp_path / "toy")
    qrels = folder / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text(encoding="utf-8").replace("\t", " "), encoding="utf-8")
    line = _eval_fails(tmp_path, capsys, folder, f"{qrels}:2:", "separated by spaces", "tabs")
    assert "TREC" not in line


def test_dataset_pointing_at_a_file_says_what_it_is(tmp_path: Path, capsys):
    folder = toy_dataset(tmp_path / "toy")
    _eval_fails(
        tmp_path,
        capsys,
        folder / "corpus.jsonl",
        "is a file",
        "BEIR folder",
        f"did you mean its folder {folder}",
    )


def test_a_folder_given_as_a_run_file_says_what_it_is(tmp_path: Path, capsys):
    folder = toy_dataset(tmp_path / "toy")
    assert main(eval_args(tmp_path, folder)) == 0
    (result,) = (tmp_path / "results").glob("toy@*/bm25")
    capsys.readouterr()
    before = snapshot(tmp_path / "results")
    code = main(["evaluate", str(folder / "qrels" / "test.tsv"), str(result)])
    one_error_line(capsys, code, f"run file {result} is a folder", "expected a TREC run file", "run.trec")
    code = main(["evaluate", str(folder / "qrels"), str(result / "run.trec")])
    one_error_line(capsys, code, "is a folder", "test.tsv")
    assert snapshot(tmp_path / "results") == before


def test_a_run_matching_no_judged_document_is_warned_about(tmp_path: Path, capsys, caplog):
    folder = toy_dataset(tmp_path / "toy")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 doc-1 1 2.0 x\nq2 Q0 doc-7 1 1.0 x\n", encoding="utf-8")
    assert main(["evaluate", str(folder / "qrels" / "test.tsv"), str(run)]) == 0
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert any(
        "none of the run's documents is judged" in warning and "'doc-1'" in warning for warning in warnings
    )


# --------------------------------------------------------------------------------- downloads


class _DroppingServer:
    """Announces more bytes than it sends, then closes: the client sees http.client's IncompleteRead."""

    def __init__(self):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                self.send_response(200)
                self.send_header("Content-Length", "100000")
                self.end_headers()
                self.wfile.write(b"PK" + b"\0" * 998)
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_dropped_connection_is_one_clean_line(toy_registry: Path, tmp_path: Path, capsys):
    server = _DroppingServer()
    try:
        with pytest.raises(DownloadError) as raised:
            fetch_url(f"{server.url}/toy.zip", tmp_path / "x.zip", md5=None, attempts=1, backoff=0, timeout=5)
        assert "connection dropped mid-transfer" in str(raised.value)
        assert "IncompleteRead(" not in str(raised.value)
        data_dir = tmp_path / "data"
        args = [
            "data",
            "download",
            "toy",
            "--data-dir",
            str(data_dir),
            "--mirror",
            server.url,
            "--retries",
            "1",
        ]
        line = one_error_line(capsys, main(args), "connection dropped mid-transfer", "--mirror")
        assert "IncompleteRead(" not in line and "ProtocolError" not in line
        assert not (data_dir / "toy").exists()
    finally:
        server.close()


def test_a_changed_onnx_export_is_exported_again(tmp_path: Path, tiny_bert_dir: Path, caplog):
    encoder = build_encoder(
        resolve_record(tiny_record(tiny_bert_dir)), device="cpu", cache_dir=tmp_path / "cache"
    )
    graph, record = ensure_exported(encoder.load(), encoder.model, tmp_path / "cache")
    assert record["files"]["model.onnx"]["bytes"] == graph.stat().st_size
    good = graph.read_bytes()
    graph.write_bytes(good[: len(good) // 2])  # truncated from outside
    again, _ = ensure_exported(encoder.load(), encoder.model, tmp_path / "cache")
    assert again == graph and graph.read_bytes() == good
    notes = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert any(str(graph) in note and "exporting it again" in note for note in notes), notes


def test_the_checked_loader_refuses_what_was_not_written(tmp_path: Path):
    path = tmp_path / "vectors.npy"
    record = save_array(path, np.ones((4, 3), dtype=np.float32))
    assert load_array(path, record, shape=(4, 3), fix="redo").shape == (4, 3)
    with pytest.raises(CorruptArtifact, match=r"shape \(4, 3\), expected \(5, 3\)"):
        load_array(path, record, shape=(5, 3), fix="redo")  # ids file says 5 documents
    # Files written before records existed: shape and dtype still checked.
    np.save(path, np.ones((4, 2), dtype=np.float64), allow_pickle=False)
    with pytest.raises(CorruptArtifact, match="dtype float64, expected float32"):
        load_array(path, None, shape=(4, 3), fix="redo")
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)  # a pickle is never loaded
    with pytest.raises(CorruptArtifact, match=f"{path}: unreadable .*; redo"):
        load_array(path, None, fix="redo")
    path.unlink()
    with pytest.raises(CorruptArtifact, match="missing from the cache"):
        load_array(path, record, fix="redo")


# ------------------------------------------------------------------------------- a full cache disk (issue 33)

ONE_ERROR_LINE = "no space left on the device holding"


def _short_write(fid, array, **kwargs):
    """numpy's own writer on a full disk: part of the bytes, then an OSError that carries no errno."""
    data = array.tobytes()
    fid.write(data[: len(data) // 2])
    raise OSError(f"{len(data)} requested and {len(data) // 2} written")


def _cache_files(cache: Path) -> list[str]:
    return sorted(str(path.relative_to(cache)) for path in cache.rglob("*") if path.is_file())


def test_a_full_cache_disk_is_named_with_what_was_needed_and_the_fix(
    tmp_path: Path, tiny_st_dir: Path, capsys, monkeypatch: pytest.MonkeyPatch
):
    inputs = toy_dataset(tmp_path / "toy")
    before = full_snapshot(inputs, tmp_path / "results", tmp_path / "data")
    monkeypatch.setattr(np.lib.format, "write_array", _short_write)
    free = shutil.disk_usage(tmp_path)._replace(free=4096)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: free)

    code = main(eval_args(tmp_path, inputs, tiny_st_dir, "--runtime", "torch"))
    line = one_error_line(
        capsys, code, ONE_ERROR_LINE, "shard-00000.npy", "needed", "4.1 kB free", "--cache-dir"
    )
    assert "requested and" not in line
    assert_unchanged(before, inputs, tmp_path / "results", tmp_path / "data")
    # Nothing half-written: no shard, no temporary file; only the entry's manifest (its resume state).
    (entry,) = (tmp_path / "cache" / "embeddings").iterdir()
    assert [name.split("/")[-1] for name in _cache_files(entry)] == ["manifest.json"]
    assert not json.loads((entry / "manifest.json").read_text())["finished_shards"]


@pytest.mark.parametrize(("code", "expected"), [(28, ONE_ERROR_LINE), (13, "permission denied")])
def test_a_failed_ids_file_write_takes_its_vectors_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, expected: str
):
    from harness.core.errors import OutputError
    from harness.core.fileio import output_error
    from harness.encoding import embedding_cache

    real = embedding_cache.atomic_write_json

    def failing(path, payload, **kwargs):
        if Path(path).name.startswith("shard-"):
            try:
                raise OSError(code, os.strerror(code), str(path))
            except OSError as error:
                raise output_error(path, error) from None
        return real(path, payload, **kwargs)

    monkeypatch.setattr(embedding_cache, "atomic_write_json", failing)
    free = shutil.disk_usage(tmp_path)._replace(free=1000)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: free)
    with pytest.raises(OutputError, match=expected) as raised:
        embedding_cache.write_shard(tmp_path, 0, ["d1", "d2"], np.ones((2, 4), dtype=np.float32), 0.1)
    assert "shard-00000.json" in str(raised.value)
    assert list(tmp_path.iterdir()) == []  # the vectors went with their missing ids file


def _tmpfs_available() -> bool:
    probe = (
        subprocess.run(
            ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=16k tmpfs /mnt"],
            capture_output=True,
            check=False,
        )
        if shutil.which("unshare")
        else None
    )
    return probe is not None and probe.returncode == 0


@pytest.mark.skipif(not _tmpfs_available(), reason="cannot mount a tmpfs here (the injected test above runs)")
def test_a_real_full_tmpfs_cache_says_no_space_left(tmp_path: Path, tiny_st_dir: Path):
    """A 16 kB tmpfs as the cache: the real ENOSPC / short write, in its own mount namespace."""
    inputs = toy_dataset(tmp_path / "toy", num_docs=300)
    mount = tmp_path / "full"
    mount.mkdir()
    before = full_snapshot(inputs, tmp_path / "results")
    harness = [
        sys.executable,
        "-m",
        "harness",
        *eval_args(tmp_path, inputs, tiny_st_dir, "--runtime", "torch"),
    ]
    harness[harness.index("--cache-dir") + 1] = str(mount)
    script = (
        f"mount -t tmpfs -o size=16k tmpfs {mount} && {' '.join(map(shlex.quote, harness))}; "
        f"echo exit=$?; find {mount} -type f"
    )
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "exit=2" in done.stdout and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(errors) == 1 and ONE_ERROR_LINE in errors[0] and "--cache-dir" in errors[0], done.stderr
    assert "requested and" not in errors[0] and "needed" in errors[0]
    left = [line for line in done.stdout.splitlines() if line.startswith(str(mount))]
    assert [Path(line).name for line in left] == ["manifest.json"], left  # no shard, no temporary file
    assert_unchanged(before, inputs, tmp_path / "results")


# ---------------------------------------------------------------------- fusion: only finite numbers (issue 33)


def _run_file(path: Path, scores: dict[str, float]) -> Path:
    lines = [f"q1 Q0 {docid} {rank} {score!r} x\n" for rank, (docid, score) in enumerate(scores.items(), 1)]
    path.write_text("".join(lines), encoding="utf-8")
    return path


RUN_A = {"d1": 1.5, "d2": 0.5}
RUN_B = {"d1": 1.0, "d3": 0.5}
INTERPOLATE = ["--method", "interpolation", "--weights"]
# name: (run a, run b, options, what the one error line names)
FUSE_CASES = {
    "inf weight": (RUN_A, RUN_B, [*INTERPOLATE, "inf", "1"], ["--weights", "finite"]),
    "nan weight": (RUN_A, RUN_B, [*INTERPOLATE, "nan", "1"], ["--weights", "finite"]),
    "inf score": (RUN_A, {**RUN_B, "d1": float("inf")}, ["--method", "combsum"], ["b.trec", "finite score"]),
    "-inf score": (RUN_A, {**RUN_B, "d3": float("-inf")}, ["--method", "rrf"], ["b.trec", "finite score"]),
    "overflowing sum": (
        {"d1": 1e308, "d2": 0.5},
        {"d1": 1.5e308, "d3": 0.5},
        [*INTERPOLATE, "1", "1"],
        ["a.trec", "b.trec", "overflowed", "--norm"],
    ),
    "overflowing min-max": (
        {"d1": 1.5e308, "d2": -1.5e308},
        RUN_B,
        ["--method", "combsum"],
        ["a.trec", "b.trec", "overflowed"],
    ),
}


@pytest.mark.parametrize("case", FUSE_CASES)
def test_fusion_never_writes_a_non_finite_score(tmp_path: Path, capsys, case: str):
    first, second, options, needles = FUSE_CASES[case]
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    a, b = _run_file(inputs / "a.trec", first), _run_file(inputs / "b.trec", second)
    output = tmp_path / "out" / "fused.trec"
    before = full_snapshot(inputs, output.parent)
    code = main(["fuse", str(a), str(b), *options, "--output", str(output)])
    one_error_line(capsys, code, *needles)
    assert_unchanged(before, inputs, output.parent)  # no fused file, nothing changed


def test_fusion_settings_and_fuse_refuse_non_finite_numbers_through_the_api():
    from harness.core.errors import HarnessError
    from harness.retrieval.fusion import FusionSettings, fuse

    for weight in (float("inf"), float("-inf"), float("nan")):
        with pytest.raises(
            HarnessError, match=r"interpolation weight .* is not a finite number; give --weights"
        ):
            FusionSettings("interpolation", weights=(weight, 1.0))
    good = {"q1": {"d1": 2.0, "d2": 1.0}}
    for bad_score in (float("inf"), float("nan")):
        with pytest.raises(HarnessError, match=r"cannot fuse dense: query 'q1', document 'd2' has score"):
            fuse([good, {"q1": {"d1": 1.0, "d2": bad_score}}], FusionSettings("rrf"), ["bm25", "dense"])
    with pytest.raises(HarnessError, match="fusing bm25, dense overflowed for query 'q1', document 'd1'"):
        fuse(
            [{"q1": {"d1": 1e308}}, {"q1": {"d1": 1e308}}],
            FusionSettings("combsum", normalization="none"),
            ["bm25", "dense"],
        )
