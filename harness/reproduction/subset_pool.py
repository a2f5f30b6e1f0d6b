"""The pool of a subset's corpus: each named retriever's top-k for the sampled queries on the full dataset.

Each retriever is run through the public pipeline (:func:`harness.pipeline.run_eval`), so a result the
user already has is reused, and one computed here is a normal result folder; the pool is read from the
stored run file, each query's ranking in trec_eval order cut at the depth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.core.cache import digest_of
from harness.core.errors import HarnessError
from harness.datasets.subset import PoolRetriever
from harness.evaluation.trec import read_run, top_k_ranking
from harness.models.resolve import resolve_model
from harness.pipeline import EvalOptions, check_inputs, run_eval
from harness.retrieval.systems import find_system


@dataclass
class Pool:
    """The pooled documents of every sampled query, and where each retriever's came from."""

    retrievers: list[PoolRetriever] = field(default_factory=list)
    documents: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


def check_pool_retrievers(dataset_spec: str, retrievers: list[str], options: EvalOptions) -> list[str]:
    """Refuse an unknown retriever (or dataset) in one line before anything runs; notes for unused options."""
    if len(set(retrievers)) != len(retrievers):
        raise HarnessError(f"--pool-from names a retriever twice: {' '.join(retrievers)}")
    return check_inputs([dataset_spec], list(retrievers), options) if retrievers else []


def retriever_slug(spec: str, options: EvalOptions) -> str:
    """The short name a retriever goes by in a subset's name and its result folders (``bm25``)."""
    system = find_system(spec)
    if system is not None:
        return system.slug
    return resolve_model(spec, trust_remote_code=options.trust_remote_code).slug


def pool_options(options: EvalOptions, depth: int) -> EvalOptions:
    """The run options a pool of ``depth`` needs: the given ones, deep enough (the default 1000 usually is)."""
    if options.top_k >= depth:
        return options
    replaced = options.replace(top_k=depth)
    assert isinstance(replaced, EvalOptions)
    return replaced


def pool_documents(
    dataset_spec: str, retrievers: list[str], depth: int, query_ids: list[str], options: EvalOptions
) -> Pool:
    """Run (or reuse) each retriever on the full dataset and pool its top ``depth`` for ``query_ids``."""
    pool = Pool()
    run_options = pool_options(options, depth)
    for spec in retrievers:
        stored = run_eval(dataset_spec, spec, run_options)
        run = read_run(stored.run_path)
        documents = {
            doc_id for query_id in query_ids for doc_id, _ in top_k_ranking(run.get(query_id, {}), depth)
        }
        pool.documents |= documents
        pool.retrievers.append(
            PoolRetriever(
                spec=spec,
                result_key=stored.model_slug,
                label=stored.label,
                identity_settings=stored.identity_settings,
                config_sha256=digest_of(stored.provenance.get("config")),
                docs=len(documents),
            )
        )
        pool.notes.append(
            f"pool: {stored.label} top-{depth} from {stored.directory}"
            + (" (reused)" if stored.reused else "")
        )
    return pool
