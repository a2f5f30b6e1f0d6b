"""Local multi-process encoding: the worker plan, seeking to shards, and identical results with 1 or 2 workers."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from scale_fixtures import (
    HEADLINE,
    corpus_entry,
    corpus_vectors,
    eval_options,
    run_lines,
    scifact_folder,
    share_exact_check,
)

from harness.cli import main
from harness.core.errors import HarnessError
from harness.datasets.beir import corpus_shard_starts, iter_corpus, load_dataset
from harness.encoding import pool as parallel
from harness.encoding.embedding_cache import ShardJob, encode_corpus_shards, shard_paths
from harness.encoding.pool import LocalPool, parse_devices, plan_workers
from harness.encoding.workers import EncoderSpec, WorkerSlot
from harness.models.resolve import resolve_model
from harness.pipeline import run_eval

DOC_IDS = [f"d{i}" for i in range(11)]


def _write_beir(folder: Path, corpus_lines: list[str]) -> Path:
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_bytes("".join(corpus_lines).encode("utf-8"))
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "immune cells"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\n")
    return folder


def _doc_line(doc_id: str, newline: str = "\n") -> str:
    return (
        json.dumps({"_id": doc_id, "title": "Cells", "text": f"immune cells and protein {doc_id}"}) + newline
    )


@pytest.fixture
def awkward_corpus(tmp_path: Path) -> Path:
    """11 documents behind a BOM, with CRLF endings, blank lines and a line of non-ASCII whitespace."""
    lines = ["\ufeff" + _doc_line("d0", "\r\n")]
    for index, doc_id in enumerate(DOC_IDS[1:], start=1):
        lines.append(_doc_line(doc_id, "\r\n" if index % 2 else "\n"))
        if index == 3:
            lines.append("\n   \n")
        if index == 6:
            lines.append("\u00a0\u3000\n")  # blank to str.strip(), not to bytes.strip()
    return _write_beir(tmp_path / "awkward", lines)


def test_shard_starts_seek_to_the_same_documents_as_streaming(awkward_corpus: Path) -> None:
    path = awkward_corpus / "corpus.jsonl"
    streamed = [doc.id for doc in iter_corpus(path)]
    assert streamed == DOC_IDS
    for shard_size in (1, 2, 3, 4, 11, 50):
        starts = corpus_shard_starts(path, shard_size, expected_docs=11)
        assert starts is not None and len(starts) == -(-11 // shard_size)
        for index, start in enumerate(starts):
            seeked = [doc.id for doc in itertools.islice(iter_corpus(path, start), shard_size)]
            assert seeked == streamed[index * shard_size : (index + 1) * shard_size], (shard_size, index)
    # A count that disagrees with the validating scan means "do not trust the offsets": stream instead.
    assert corpus_shard_starts(path, 3, expected_docs=12) is None


def test_gzip_corpora_have_no_offsets_and_still_stream(tmp_path: Path) -> None:
    folder = _write_beir(tmp_path / "gz", [_doc_line(doc_id) for doc_id in DOC_IDS])
    with gzip.open(folder / "corpus.jsonl.gz", "wb") as handle:
        handle.write((folder / "corpus.jsonl").read_bytes())
    (folder / "corpus.jsonl").unlink()
    dataset = load_dataset(folder, "test")
    assert dataset.shard_starts(4) is None
    assert [doc.id for doc in dataset.iter_documents()] == DOC_IDS


def test_a_worker_seeks_past_earlier_shards_without_reading_them(tmp_path: Path, tiny_st_dir: Path) -> None:
    lines = [_doc_line(doc_id) for doc_id in DOC_IDS]
    folder = _write_beir(tmp_path / "set", lines)
    dataset = load_dataset(folder, "test")
    assert dataset.shard_starts(4) is not None  # remembered from the clean file
    # Corrupt a document of shard 0 in place, keeping every offset valid: a worker that streamed
    # from the top would trip over it; one that seeks to shard 2 never reads it.
    corpus = folder / "corpus.jsonl"
    data = corpus.read_bytes()
    broken = data.replace(b'"_id": "d1"', b'"_id": ]d1"', 1)
    assert len(broken) == len(data)
    corpus.write_bytes(broken)
    encoder = EncoderSpec(resolve_model(str(tiny_st_dir)), 4).build("cpu")
    directory = tmp_path / "entry"
    metas = encode_corpus_shards(ShardJob(dataset, encoder, directory, 4), [2])
    assert [meta["index"] for meta in metas] == [2]
    assert json.loads(shard_paths(directory, 2)[1].read_text())["ids"] == DOC_IDS[8:]
    assert not shard_paths(directory, 0)[0].exists()
    with pytest.raises(HarnessError, match=r"corpus.jsonl:2: malformed JSON"):
        encode_corpus_shards(ShardJob(dataset, encoder, directory, 4), [0])


def test_plan_splits_cores_between_cpu_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "available_cpus", lambda: 8)
    assert plan_workers("cpu") == [WorkerSlot("cpu", 4), WorkerSlot("cpu", 4)]
    assert plan_workers("cpu", workers=3) == [WorkerSlot("cpu", 2)] * 3
    assert plan_workers(None, devices=["cpu", "cpu", "cpu", "cpu"]) == [WorkerSlot("cpu", 2)] * 4
    monkeypatch.setattr(parallel, "available_cpus", lambda: 2)
    assert plan_workers("cpu") == [WorkerSlot("cpu", 2)]  # small machine: one process, all its cores
    with pytest.raises(HarnessError, match="at least 1"):
        plan_workers("cpu", workers=0)


def test_plan_puts_one_worker_on_each_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    # The plan only asks torch how many GPUs there are: pretend there are four.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(parallel, "available_cpus", lambda: 16)
    assert plan_workers(None) == [WorkerSlot(f"cuda:{index}", 4) for index in range(4)]
    assert plan_workers("cuda", workers=8) == [WorkerSlot(f"cuda:{index % 4}", 2) for index in range(8)]
    assert plan_workers(None, devices=parse_devices("cuda:1,cuda:3")) == [
        WorkerSlot("cuda:1", 8),
        WorkerSlot("cuda:3", 8),
    ]
    assert plan_workers("cuda:2") == [WorkerSlot("cuda:2", 16)]  # one named device: one worker
    with pytest.raises(HarnessError, match="4 CUDA device"):
        plan_workers(None, devices=["cuda:7"])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert plan_workers(None) == [WorkerSlot("cuda", 16)]  # a single GPU: encode in this process


def test_plan_refuses_devices_this_machine_lacks() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the refusal is for machines without one")
    with pytest.raises(HarnessError, match="no CUDA GPU"):
        plan_workers(None, devices=parse_devices("cuda:0,cuda:1"))
    assert parse_devices(" cuda:0, cuda:1 ,") == ["cuda:0", "cuda:1"]
    assert parse_devices("") is None


def test_cli_rejects_bad_scaling_options(tmp_path: Path, tiny_st_dir: Path, capsys) -> None:
    folder = _write_beir(tmp_path / "set", [_doc_line(doc_id) for doc_id in DOC_IDS])
    common = [
        "eval",
        "--dataset",
        str(folder),
        "--model",
        str(tiny_st_dir),
        "--cache-dir",
        str(tmp_path / "c"),
    ]
    code = main([*common, "--results-dir", str(tmp_path / "r"), "--ray-address", "ray://nowhere:10001"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["error: --ray-address needs --executor ray"]
    assert main([*common, "--workers", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--workers: must be a whole number from 1" in err[0], err


@pytest.mark.slow  # two worker processes each import torch: about 30 s on two busy cores
def test_two_worker_processes_write_the_shards_one_process_writes(tmp_path: Path, tiny_st_dir: Path) -> None:
    folder = _write_beir(tmp_path / "set", [_doc_line(doc_id) for doc_id in DOC_IDS])
    dataset = load_dataset(folder, "test")
    spec = EncoderSpec(resolve_model(str(tiny_st_dir)), 4)
    encoder = spec.build("cpu")
    single = encode_corpus_shards(ShardJob(dataset, encoder, tmp_path / "one", 3), range(4))
    pool = LocalPool(spec, [WorkerSlot("cpu", 1), WorkerSlot("cpu", 1)])
    seen: list[int] = []
    job = ShardJob(dataset, encoder, tmp_path / "two", 3, on_shard=lambda meta: seen.append(meta["index"]))
    pooled = pool(job, range(4))
    assert sorted(seen) == [0, 1, 2, 3] and len(pooled) == len(single) == 4
    for index in range(4):
        one, two = (shard_paths(tmp_path / name, index) for name in ("one", "two"))
        assert json.loads(two[1].read_text())["ids"] == json.loads(one[1].read_text())["ids"]
        np.testing.assert_allclose(np.load(two[0]), np.load(one[0]), rtol=0, atol=1e-6)

    # A bad line the driver never read (the file changed after loading) fails inside a worker and
    # comes back as one HarnessError naming file and line.
    corpus = folder / "corpus.jsonl"
    corpus.write_text(corpus.read_text().replace('"_id": "d9"', '"_id": 9.5'))
    dataset._shard_starts.clear()
    with pytest.raises(HarnessError, match=r"corpus.jsonl:10: `_id` must be a string"):
        pool(ShardJob(dataset, encoder, tmp_path / "bad", 3), [3])


@pytest.mark.slow
def test_two_cpu_workers_give_the_same_scifact_metrics_as_one(
    tmp_path: Path, beir_mirror: Path, tiny_st_dir: Path, scifact_reference
) -> None:
    reference, reference_root = scifact_reference
    share_exact_check(reference_root, tmp_path / "cache")
    two = run_eval(scifact_folder(beir_mirror), str(tiny_st_dir), eval_options(tmp_path, workers=2))

    for metric in HEADLINE:
        assert two.metrics[metric] == reference.metrics[metric], metric
    assert two.per_query == reference.per_query
    assert run_lines(two) == run_lines(reference)
    ids, vectors = corpus_vectors(tmp_path / "cache")
    reference_ids, reference_vectors = corpus_vectors(reference_root / "cache")
    assert ids == reference_ids and len(ids) == 5183
    np.testing.assert_allclose(vectors, reference_vectors, rtol=0, atol=1e-6)
    assert corpus_entry(tmp_path / "cache").num_shards == 8

    # How it was encoded is recorded, but is not part of the cache key or the result-reuse config.
    encoding = two.provenance["retrieval"]["encoding"]
    assert encoding == {"executor": "local", "workers": 2, "devices": ["cpu", "cpu"], "threads_per_worker": 1}
    assert reference.provenance["retrieval"]["encoding"]["workers"] == 1
    assert two.provenance["config"] == reference.provenance["config"]
    key = two.provenance["retrieval"]["embedding_cache"]["corpus_key"]
    assert key == reference.provenance["retrieval"]["embedding_cache"]["corpus_key"]
    again = run_eval(scifact_folder(beir_mirror), str(tiny_st_dir), eval_options(reference_root, workers=2))
    assert again.reused
