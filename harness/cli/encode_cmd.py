"""``harness encode``: fill the embedding cache ahead of ``harness eval``, whole or one slice at a time.

Arguments and printing only; the work is ``harness.encoding.shards.CorpusEncoding``. The command
takes eval's options so that the cache key is the same.
"""

from __future__ import annotations

import argparse

from harness.cli.common import add_eval_arguments, options_from_args
from harness.encoding.shards import CorpusEncoding
from harness.pipeline import load_inputs


def parse_shard_slice(text: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)`` with ``0 <= I < N``."""
    index_text, slash, count_text = text.partition("/")
    if not slash or not index_text.strip().isdigit() or not count_text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected I/N such as 0/4, got {text!r}")
    index, count = int(index_text), int(count_text)
    if count < 1 or index >= count:
        raise argparse.ArgumentTypeError(f"need 0 <= I < N in I/N, got {text!r}")
    return index, count


def run(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    dataset, model = load_inputs(
        args.dataset, args.model, options.data_settings(), trust_remote_code=options.trust_remote_code
    )
    job = CorpusEncoding.create(dataset, model, options.encoding_settings())
    if args.merge:
        corpus = job.merge()
        print(
            f"merged {job.num_shards} shards of {job.label} ({corpus.num_docs} docs, dim {corpus.dim}) "
            f"in {job.directory}"
        )
    elif args.shard is None:
        corpus = job.encode_all()
        print(
            f"encoded {job.label}: {corpus.num_docs} docs in {job.num_shards} shards, and its queries, "
            f"in {job.directory}"
        )
    else:
        done = job.encode_slice(*args.shard)
        print(
            f"slice {done.index}/{done.count} of {job.label}: encoded {len(done.encoded)} of its "
            f"{len(done.owned)} shards ({len(done.owned) - len(done.encoded)} already done) in "
            f"{job.directory}; `harness encode --merge` when all slices finish"
        )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "encode",
        help="encode a corpus into the embedding cache (whole, or one --shard I/N slice for job arrays)",
        description="Encode one dataset's corpus with one model into the embedding cache, so that "
        "`harness eval` with the same options reuses it. With --shard I/N only the shards i with "
        "i % N == I are encoded (one task of a SLURM array: --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT); "
        "--merge then checks that every shard exists and finalises the cache entry. All tasks must "
        "share the cache directory. Eval's options are accepted so the cache key is identical; "
        "retrieval and metric options have no effect here.",
    )
    parser.add_argument("--dataset", required=True, help="registry name or BEIR-format folder")
    parser.add_argument("--model", required=True, help="registry name/alias, Hugging Face id or local folder")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--shard",
        type=parse_shard_slice,
        metavar="I/N",
        help="encode only the shards i with i %% N == I (0 <= I < N); finished shards are skipped",
    )
    mode.add_argument(
        "--merge",
        "--finalize",
        action="store_true",
        help="check that all shards exist and finalise the cache entry (run after every --shard task)",
    )
    add_eval_arguments(parser)
    parser.set_defaults(func=run)
