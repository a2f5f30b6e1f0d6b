"""How far can a model's vectors move before nDCG@10 and Recall@100 move? The measured basis of the
precision check's bound (``building_blocks.APPROXIMATE_TOLERANCE``).

Takes the exact fp32 vectors of a dataset (encoded once, or found in the embedding cache), moves every
corpus and query vector by a random direction of relative length ``e`` (so every vector has error
exactly ``e``, the statistic the check bounds), retrieves by exact inner product, evaluates with the
harness's metrics, and repeats ``--trials`` times per ``e``. It prints, per ``e``, how far nDCG@10 and
Recall@100 moved: the median and 90th percentile of |change|, and how often the change stayed within
``--ndcg-within`` (0.001) and ``--recall-within`` (0.002). Quantization error is not isotropic noise,
but a setting with a given largest error cannot be promised more than noise of that size gets.

Usage: ``python scripts/bench_vector_noise.py [--dataset-dir ../shared/data/beir/scifact]
[--noise 0.001 0.003 ...] [--trials 100] [--cache-dir cache]``
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.api.building_blocks import (
    EmbeddingCache,
    build_encoder,
    load_dataset,
    resolve_model,
    score_run,
    search_exact,
    to_run,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATASET = REPO.parent / "shared" / "data" / "beir" / "scifact"
DEFAULT_NOISE = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.04, 0.08)
METRICS = ("ndcg@10", "recall@100")


@dataclass
class MovedCorpus:
    """The corpus vectors as the search reads the embedding cache (one shard, in memory)."""

    doc_ids: list[str]
    vectors: np.ndarray
    directory: Path = Path(".")

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]

    @property
    def num_docs(self) -> int:
        return len(self.doc_ids)

    def shards(self) -> Iterator[tuple[list[str], np.ndarray]]:
        yield self.doc_ids, self.vectors


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (float32; a zero row stays zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


def moved(vectors: np.ndarray, error: float, rng: np.random.Generator) -> np.ndarray:
    """``vectors`` each moved by ``error`` times its own length in a random direction, renormalised."""
    direction = normalise(rng.standard_normal(vectors.shape).astype(np.float32))
    return normalise(vectors + error * np.linalg.norm(vectors, axis=1, keepdims=True) * direction)


def scores(qrels, query_ids, doc_ids, queries: np.ndarray, corpus: np.ndarray) -> dict[str, float]:
    """The harness's exact search and metrics over these vectors."""
    found, names = search_exact(queries, MovedCorpus(doc_ids, corpus), 100)
    run = to_run(query_ids, found, names, 100, drop_identical_ids=False)
    return score_run(qrels, run, list(METRICS), diagnose=False).aggregate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset-dir", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--noise", type=float, nargs="+", default=DEFAULT_NOISE)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--ndcg-within", type=float, default=0.001)
    parser.add_argument("--recall-within", type=float, default=0.002)
    parser.add_argument("--cache-dir", type=Path, default=Path("cache"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    dataset = load_dataset(args.dataset_dir)
    encoder = build_encoder(resolve_model(args.model), device="cpu", batch_size=128, cache_dir=args.cache_dir)
    cache = EmbeddingCache(args.cache_dir)
    doc_ids, corpus = cache.corpus(dataset, encoder, progress=False).load_all()
    query_ids, queries = cache.queries(dataset, encoder)
    corpus, queries = normalise(corpus), normalise(queries)
    base = scores(dataset.qrels, query_ids, doc_ids, queries, corpus)
    print(f"{args.model} on {dataset.name} ({len(query_ids)} queries), fp32: "
          + ", ".join(f"{name} {base[name]:.5f}" for name in METRICS))
    print(f"{args.trials} trials per error; |change| median / p90, and the share of trials within "
          f"{args.ndcg_within} (nDCG@10), {args.recall_within} (Recall@100) and both")
    rng = np.random.default_rng(args.seed)
    for error in args.noise:
        changes = np.array([
            [value - base[name] for name, value in scores(
                dataset.qrels, query_ids, doc_ids, moved(queries, error, rng), moved(corpus, error, rng)
            ).items()]
            for _ in range(args.trials)
        ])
        ndcg, recall = np.abs(changes[:, 0]), np.abs(changes[:, 1])
        within_ndcg, within_recall = ndcg <= args.ndcg_within, recall <= args.recall_within
        print(
            f"error {error:<7g} nDCG@10 |change| {np.median(ndcg):.5f} / {np.quantile(ndcg, 0.9):.5f}"
            f"  Recall@100 |change| {np.median(recall):.4f} / {np.quantile(recall, 0.9):.4f}"
            f"  within: nDCG {within_ndcg.mean():.2f}, recall {within_recall.mean():.2f},"
            f" both {(within_ndcg & within_recall).mean():.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
