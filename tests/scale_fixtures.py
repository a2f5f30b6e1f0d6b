"""Shared pieces of the scale tests: scifact with the tiny random model, and one single-worker reference run.

The reference (one local in-process worker) is computed once per pytest session and kept in the
session's base temp folder, so the parallel, Ray and sharded-CLI test modules all compare against
the same numbers without encoding scifact again each time.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.encoding.embedding_cache import ShardedEmbeddings
from harness.pipeline import EvalOptions, run_eval
from harness.results.result_store import StoredResult, load_result

SHARD_SIZE = 700  # scifact's 5,183 documents -> 8 shards
HEADLINE = ("ndcg@10", "recall@100")


def share_exact_check(reference_root: Path, cache: Path) -> None:
    """Start ``cache`` from the reference's recorded exact-runtime choice (torch or onnx, made by timing).

    Two caches would otherwise each time their own check and may pick differently under load: vectors
    equal within the exact tolerance, but run files that differ in the seventh digit.
    """
    recorded = reference_root / "cache" / "onnx"
    if recorded.is_dir():
        shutil.copytree(recorded, cache / "onnx", dirs_exist_ok=True)


def scifact_folder(beir_mirror: Path) -> str:
    return str(beir_mirror / "scifact")


def eval_options(root: Path, **overrides) -> EvalOptions:
    """Options for one scifact run whose data, cache and results live under ``root``."""
    settings = dict(
        top_k=100,
        metrics=list(HEADLINE),
        shard_size=SHARD_SIZE,
        results_dir=root / "results",
        data_dir=root / "data",
        cache_dir=root / "cache",
        no_progress=True,
    )
    settings.update(overrides)
    return EvalOptions(**settings)


def corpus_entry(cache_dir: Path) -> ShardedEmbeddings:
    """The one corpus entry of a cache folder."""
    manifests = [
        path
        for path in (Path(cache_dir) / "embeddings").glob("*__corpus__*/manifest.json")
        if json.loads(path.read_text())["kind"] == "corpus"
    ]
    assert len(manifests) == 1, manifests
    return ShardedEmbeddings(manifests[0].parent, json.loads(manifests[0].read_text()))


def corpus_vectors(cache_dir: Path) -> tuple[list[str], np.ndarray]:
    return corpus_entry(cache_dir).load_all()


def run_lines(result: StoredResult) -> list[str]:
    """The run's ranking lines: its ir_metadata header (``#`` lines, with timings) differs run to run."""
    return [line for line in result.run_path.read_text().splitlines() if not line.startswith("#")]


def reference_run(
    tmp_path_factory: pytest.TempPathFactory, beir_mirror: Path, model_dir: Path
) -> tuple[StoredResult, Path]:
    """``(result, root)`` of a single-worker local run of the tiny model on scifact (once per session)."""
    root = tmp_path_factory.getbasetemp() / "scale-reference"
    if not (root / "results").is_dir():
        run_eval(scifact_folder(beir_mirror), str(model_dir), eval_options(root, workers=1))
    results = sorted((root / "results" / "scifact").iterdir())
    return load_result(results[0]), root
