"""``--executor ray``: a local Ray cluster with 2 CPU workers gives the local numbers, and a killed run resumes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO_ROOT
from scale_fixtures import (
    HEADLINE,
    SHARD_SIZE,
    corpus_entry,
    corpus_vectors,
    eval_options,
    run_lines,
    scifact_folder,
    share_exact_check,
)

from harness.cli import main
from harness.core.errors import HarnessError
from harness.datasets.beir import load_dataset
from harness.encoding.embedding_cache import ShardJob
from harness.encoding.ray_pool import RayPool, import_ray
from harness.encoding.workers import EncoderSpec
from harness.models.resolve import resolve_model
from harness.pipeline import run_eval
from harness.results.result_store import load_result

HARNESS = str(Path(sys.executable).with_name("harness"))


@pytest.fixture
def small_set(tmp_path: Path) -> Path:
    folder = tmp_path / "small"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        '{"_id": "d1", "text": "gene study"}\n{"_id": "d2", "text": "virus"}\n'
    )
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "gene"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return folder


def test_missing_ray_is_one_line_saying_how_to_install(
    monkeypatch: pytest.MonkeyPatch, small_set: Path, tiny_st_dir: Path, tmp_path: Path, capsys
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` sees when it is not installed
    with pytest.raises(HarnessError, match=r"pip install '\.\[ray\]'"):
        import_ray()
    code = main(
        [
            "eval",
            "--dataset",
            str(small_set),
            "--model",
            str(tiny_st_dir),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--results-dir",
            str(tmp_path / "results"),
            "--executor",
            "ray",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: --executor ray needs Ray"), err


def test_actor_pool_shape_follows_the_cluster(tiny_st_dir: Path) -> None:
    spec = EncoderSpec(resolve_model(str(tiny_st_dir)), 8)
    # (actors, GPUs per actor, CPUs per actor)
    assert RayPool(spec)._pool_shape({"gpus": 4, "cpus": 32}) == (4, 1.0, 8)
    assert RayPool(spec, workers=8)._pool_shape({"gpus": 4, "cpus": 32}) == (8, 0.5, 4)
    assert RayPool(spec)._pool_shape({"gpus": 0, "cpus": 16}) == (4, 0.0, 4)
    assert RayPool(spec, workers=2)._pool_shape({"gpus": 0, "cpus": 2}) == (2, 0.0, 1)
    with pytest.raises(HarnessError, match="at least 1"):
        RayPool(spec, workers=0)


@pytest.fixture(scope="module")
def local_ray():
    """Shut down the local Ray this process starts, so its workers do not outlive these tests."""
    ray = import_ray()
    yield
    ray.shutdown()


@pytest.mark.slow
def test_a_bad_line_met_by_an_actor_is_the_one_line_error_of_a_local_run(
    tmp_path: Path, tiny_st_dir: Path, local_ray, monkeypatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    folder = tmp_path / "set"
    (folder / "qrels").mkdir(parents=True)
    rows = [{"_id": f"d{index}", "text": f"gene study {index}"} for index in range(10)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "gene"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    dataset = load_dataset(folder, "test")
    dataset.shard_starts(3)
    # The file changes (same length) after the driver scanned it: only the actor of shard 2 meets line 8.
    corpus = folder / "corpus.jsonl"
    corpus.write_text(corpus.read_text().replace('"_id": "d7"', '"_id": [77]'))
    spec = EncoderSpec(resolve_model(str(tiny_st_dir)), 4)
    with pytest.raises(HarnessError) as raised:
        RayPool(spec, workers=2)(ShardJob(dataset, spec.build("cpu"), tmp_path / "entry", 3), range(4))
    assert str(raised.value) == f"{corpus}:8: `_id` must be a string, not list"


@pytest.mark.slow
def test_ray_with_two_cpu_workers_gives_the_local_scifact_numbers(
    tmp_path: Path, beir_mirror: Path, tiny_st_dir: Path, scifact_reference, local_ray, monkeypatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    reference, reference_root = scifact_reference
    share_exact_check(reference_root, tmp_path / "cache")
    result = run_eval(
        scifact_folder(beir_mirror), str(tiny_st_dir), eval_options(tmp_path, executor="ray", workers=2)
    )
    for metric in HEADLINE:
        assert result.metrics[metric] == reference.metrics[metric], metric
    assert result.per_query == reference.per_query
    assert run_lines(result) == run_lines(reference)
    ids, vectors = corpus_vectors(tmp_path / "cache")
    reference_ids, reference_vectors = corpus_vectors(reference_root / "cache")
    assert ids == reference_ids
    np.testing.assert_allclose(vectors, reference_vectors, rtol=0, atol=1e-6)

    encoding = result.provenance["retrieval"]["encoding"]
    assert (encoding["executor"], encoding["address"], encoding["workers"], encoding["gpus_per_worker"]) == (
        "ray",
        "local",
        2,
        0.0,
    )
    assert encoding["cpus"] >= 2 and encoding["cpus_per_worker"] >= 1
    assert result.provenance["config"] == reference.provenance["config"]  # the executor is not in it
    assert corpus_entry(tmp_path / "cache").key == corpus_entry(reference_root / "cache").key


def _session_processes(session: int) -> list[int]:
    """Live (non-zombie) processes of one session: the killed command and everything Ray started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, session, ...
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _kill_session(session: int) -> None:
    """SIGKILL every process of the session we started (Ray's workers sit in their own process groups)."""
    deadline = time.monotonic() + 30
    while (pids := _session_processes(session)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    assert not _session_processes(session), "processes of the killed run survived"


def _shards(cache: Path) -> dict[int, tuple[int, list[str]]]:
    """Finished corpus shards: index -> (mtime of the vectors, ids)."""
    found = {}
    for directory in (cache / "embeddings").glob("*__corpus__*"):
        for ids_file in sorted(directory.glob("shard-*.json")):
            index = int(ids_file.stem.split("-")[1])
            vectors = ids_file.with_suffix(".npy")
            found[index] = (vectors.stat().st_mtime_ns, json.loads(ids_file.read_text())["ids"])
    return found


@pytest.mark.slow
def test_a_killed_ray_run_resumes_from_its_finished_shards(
    tmp_path: Path, beir_mirror: Path, tiny_st_dir: Path, scifact_reference
) -> None:
    reference, reference_root = scifact_reference
    cache, results = tmp_path / "cache", tmp_path / "results"
    share_exact_check(reference_root, cache)
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    common = [
        "--dataset",
        scifact_folder(beir_mirror),
        "--model",
        str(tiny_st_dir),
        "--cache-dir",
        str(cache),
        "--shard-size",
        str(SHARD_SIZE),
        "--executor",
        "ray",
        "--workers",
        "2",
        "--no-progress",
    ]
    # Own session: the run and all of Ray's processes can be found and killed by its id.
    first = subprocess.Popen(
        [HARNESS, "encode", *common],
        cwd=REPO_ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 600
        while not _shards(cache) and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        _kill_session(first.pid)
        first.wait()
    killed = _shards(cache)
    assert first.returncode == -signal.SIGKILL, first.stderr.read().decode()[-2000:]
    assert 0 < len(killed) < 8, f"{len(killed)} shards finished before the kill"

    completed = subprocess.run(
        [
            HARNESS,
            "eval",
            *common,
            "--results-dir",
            str(results),
            "--top-k",
            "100",
            "--metrics",
            *HEADLINE,
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    resumed = _shards(cache)
    assert sorted(resumed) == list(range(8))
    for index, (mtime, ids) in killed.items():
        assert resumed[index] == (mtime, ids), f"shard {index} was encoded again"

    ids, vectors = corpus_vectors(cache)
    reference_ids, reference_vectors = corpus_vectors(reference_root / "cache")
    assert ids == reference_ids
    np.testing.assert_allclose(vectors, reference_vectors, rtol=0, atol=1e-6)
    (folder,) = (results / "scifact").iterdir()
    result = load_result(folder)
    assert {metric: result.metrics[metric] for metric in HEADLINE} == {
        metric: reference.metrics[metric] for metric in HEADLINE
    }
