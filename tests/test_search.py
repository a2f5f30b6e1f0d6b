"""Sharded exact search equals brute force; approximate indexes are built once and reused."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from harness.core.errors import HarnessError
from harness.retrieval.dense import dense_search, parse_index_spec, search_exact


@dataclass
class ArrayShards:
    """Embeddings split into shards of ``shard_size`` rows, as the cache serves them."""

    vectors: np.ndarray
    ids: list[str]
    shard_size: int
    directory: Path

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]

    @property
    def num_docs(self) -> int:
        return len(self.ids)

    def shards(self):
        for start in range(0, self.num_docs, self.shard_size):
            yield self.ids[start : start + self.shard_size], self.vectors[start : start + self.shard_size]


def _brute_force(queries: np.ndarray, docs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = queries @ docs.T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), order


@pytest.mark.parametrize("shard_size", [7, 50, 1000])
def test_sharded_exact_search_matches_brute_force(tmp_path: Path, shard_size: int) -> None:
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((203, 16)).astype(np.float32)
    queries = rng.standard_normal((11, 16)).astype(np.float32)
    source = ArrayShards(docs, [f"d{i}" for i in range(203)], shard_size, tmp_path)
    scores, ids = search_exact(queries, source, 10)
    expected_scores, expected_order = _brute_force(queries, docs, 10)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-5)
    assert ids == [[f"d{i}" for i in row] for row in expected_order]


def test_cosine_normalises_without_touching_stored_vectors(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    docs = rng.standard_normal((40, 8)).astype(np.float32) * rng.uniform(0.1, 10, (40, 1)).astype(np.float32)
    original = docs.copy()
    queries = rng.standard_normal((3, 8)).astype(np.float32)
    source = ArrayShards(docs, [str(i) for i in range(40)], 16, tmp_path)
    scores, _ = search_exact(queries, source, 5, normalize=True)
    unit_docs = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    unit_queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    expected, _ = _brute_force(unit_queries, unit_docs, 5)
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(docs, original)


def test_identical_ids_dropped_and_top_k_kept(tmp_path: Path) -> None:
    docs = np.eye(4, dtype=np.float32)
    queries = np.eye(4, dtype=np.float32)[:2] + 0.1
    source = ArrayShards(docs, ["q1", "x", "q2", "y"], 2, tmp_path)
    spec = parse_index_spec("Flat")
    run = dense_search(queries, ["q1", "q2"], source, 2, spec, normalize=False, drop_identical_ids=True)
    assert all(len(hits) == 2 for hits in run.values())
    assert "q1" not in run["q1"] and "q2" not in run["q2"]
    kept = dense_search(queries, ["q1", "q2"], source, 2, spec, normalize=False, drop_identical_ids=False)
    assert "q1" in kept["q1"]


def test_hnsw_index_is_saved_and_reused(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    docs = rng.standard_normal((500, 16)).astype(np.float32)
    queries = docs[:20] + 0.01
    source = ArrayShards(docs, [f"d{i}" for i in range(500)], 128, tmp_path)
    spec = parse_index_spec("HNSW16,efSearch=64")
    run = dense_search(
        queries, [f"q{i}" for i in range(20)], source, 5, spec, normalize=False, drop_identical_ids=False
    )
    saved = list(tmp_path.glob("index-*.faiss"))
    assert len(saved) == 1
    stamp = saved[0].stat().st_mtime_ns
    again = dense_search(
        queries, [f"q{i}" for i in range(20)], source, 5, spec, normalize=False, drop_identical_ids=False
    )
    assert saved[0].stat().st_mtime_ns == stamp
    assert run == again
    # Each query is a slightly perturbed copy of a document: the approximate search still finds it first.
    assert sum(max(run[f"q{i}"], key=run[f"q{i}"].get) == f"d{i}" for i in range(20)) >= 19


def test_ivfpq_trains_on_a_sample(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    docs = rng.standard_normal((2000, 16)).astype(np.float32)
    source = ArrayShards(docs, [f"d{i}" for i in range(2000)], 300, tmp_path)
    spec = parse_index_spec("IVF16,PQ4,nprobe=16")
    run = dense_search(
        docs[:5], ["a", "b", "c", "d", "e"], source, 10, spec, normalize=False, drop_identical_ids=False
    )
    assert all(len(hits) == 10 for hits in run.values())


@pytest.mark.parametrize("spec", ["NotAnIndex", "IVF16,PQ4,nprobe=x", "HNSW32,bogus=3"])
def test_rejected_index_spec_is_one_clear_error(spec: str) -> None:
    with pytest.raises(HarnessError) as info:
        parse_index_spec(spec)
    assert spec in str(info.value)
    assert "\n" not in str(info.value)
