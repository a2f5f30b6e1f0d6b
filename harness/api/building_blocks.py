"""The stages' building blocks: what a notebook or a benchmark uses below the command functions.

The commands (``harness.eval``, ``harness.evaluate``, ...) run whole stages with their checks, result
folders and reuse; these are the pieces they are made of, for work a command does not do (timing one
stage, scoring vectors moved by hand, a search over a synthetic corpus). Each is the stage's own object,
re-exported as it is (only ``score_run`` is renamed: ``harness.evaluate`` is the command)::

    from harness.api.building_blocks import load_dataset, read_run, score_run

    dataset = load_dataset("data/scifact")
    score_run(dataset.qrels, read_run("run.trec"), ["ndcg@10"]).aggregate    # {"ndcg@10": ...}

Anything not listed here is internal to its stage and may change without notice.
"""

from __future__ import annotations

# Data: a BEIR folder and judgments.
from harness.datasets.beir import load_dataset  # a BEIR folder's split: corpus (scanned), queries, qrels
from harness.datasets.qrels import read_qrels  # a TREC or BEIR qrels file (`.qrels` holds the judgments)

# Encoding: the CPU's features, encoders, their runtime checks, ONNX export and int8, the embedding cache.
from harness.encoding.cpu import (
    int8_cpu_class,  # "vnni" or "no-vnni": which int8 kernels this CPU gets
    relevant_cpu_flags,  # this CPU's flags that matter to bf16 and int8
)
from harness.encoding.embedding_cache import (
    EmbeddingCache,  # cached corpus and query vectors on disk
    ShardedEmbeddings,  # one cached corpus, read shard by shard
    write_shard,  # writes one shard in the embedding cache's format
)
from harness.encoding.multivector import (
    ShardedTokenVectors,  # a finished multivector corpus entry: token vectors shard by shard
    TokenMatrices,  # many texts' token vectors as one array plus offsets
    write_token_shard,  # write one shard of token vectors, checksummed
)
from harness.encoding.onnx_export import ensure_exported  # a model's ONNX graph, exported once to the cache
from harness.encoding.onnx_quantize import (
    INT8_VARIANTS,  # the int8 quantization variants, by name
    ensure_quantized,  # an ONNX graph quantized to int8, once
    int8_settings,  # one int8 variant's settings ("auto": the one for this CPU)
)
from harness.encoding.runtime import cpu_has_native_bf16  # whether this CPU computes bf16 in hardware
from harness.encoding.runtime_checks import (
    APPROXIMATE_TOLERANCE,  # the precision check's bound on the largest relative error
    agreement,  # largest and mean relative error and lowest cosine of candidate vs reference rows
    exact_sample_texts,  # the fixed texts every runtime check encodes
    relative_error,  # the largest relative L2 error of any row: the statistic the checks bound
)
from harness.encoding.runtime_choice import build_encoder  # an encoder for a runtime and precision, checked

# Evaluation: runs, metrics and significance.
from harness.evaluation.metrics import evaluate as score_run  # trec_eval-exact metrics of a run, in memory
from harness.evaluation.significance import (
    RESAMPLE_BATCH_ELEMENTS,  # resampled values the bootstrap and permutation test hold at once
    adjust_pvalues,  # Holm or Bonferroni over several p-values
    bootstrap_interval,  # the percentile-bootstrap interval of a mean
    paired_test,  # a paired test of two systems' per-query values, with a CI of the difference
)
from harness.evaluation.trec import (
    read_run,  # a TREC run file as {qid: {docid: score}}
    write_run,  # a run as a TREC file, in trec_eval order
)

# Models.
from harness.models.resolve import resolve_model  # a registry name, model folder or hub id as a model

# Retrieval: dense search over cached vectors, and BM25.
from harness.retrieval.bm25 import (
    BM25Retriever,  # BM25 over a dataset's corpus, its index cached
    library_versions,  # the versions of the libraries a BM25 score depends on
)
from harness.retrieval.dense import (
    IndexSpec,  # a FAISS index factory string and its search parameters
    build_or_load_index,  # an approximate index over a corpus's shards, built once
    search_exact,  # exact inner-product top-k over a sharded corpus
    search_index,  # top-k from an approximate index
    to_run,  # search output as a run {qid: {docid: score}}
)
from harness.retrieval.multivector import exact_search as maxsim_search  # exact MaxSim top-k, in chunks
from harness.retrieval.sparse import (
    SeismicSpec,  # seismic's index settings (--index seismic,...), for sparse records
    build_seismic_index,  # a seismic index over sparse corpus vectors
    exact_sparse_search,  # exact sparse dot-product top-k over corpus chunks, in trec_eval order
    recall_against_exact,  # an index's recall@k against the exact ranking
    seismic_search,  # top-k from a seismic index
)

__all__ = [
    "SeismicSpec",
    "build_seismic_index",
    "exact_sparse_search",
    "recall_against_exact",
    "seismic_search",
    "ShardedTokenVectors",
    "TokenMatrices",
    "write_token_shard",
    "maxsim_search",
    "load_dataset",
    "read_qrels",
    "resolve_model",
    "build_encoder",
    "EmbeddingCache",
    "ShardedEmbeddings",
    "write_shard",
    "int8_cpu_class",
    "relevant_cpu_flags",
    "cpu_has_native_bf16",
    "ensure_exported",
    "INT8_VARIANTS",
    "int8_settings",
    "ensure_quantized",
    "APPROXIMATE_TOLERANCE",
    "exact_sample_texts",
    "relative_error",
    "agreement",
    "search_exact",
    "to_run",
    "IndexSpec",
    "build_or_load_index",
    "search_index",
    "BM25Retriever",
    "library_versions",
    "read_run",
    "write_run",
    "score_run",
    "paired_test",
    "adjust_pvalues",
    "bootstrap_interval",
    "RESAMPLE_BATCH_ELEMENTS",
]
