"""``harness encode``: fill the embedding cache ahead of ``harness eval``, whole or one slice at a time.

``--shard I/N`` encodes only the corpus shards ``i`` with ``i % N == I`` (one task of a SLURM job
array, say), skipping those already on disk; ``--merge`` then checks every shard is there and
finalises the entry's manifest. Either way ``harness eval`` with the same options finds the entry
complete and encodes nothing. The command takes eval's options so that the cache key is the same.
"""

from __future__ import annotations

import argparse
import math

from harness.core.errors import HarnessError


def parse_shard_slice(text: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)`` with ``0 <= I < N``."""
    index_text, slash, count_text = text.partition("/")
    if not slash or not index_text.strip().isdigit() or not count_text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected I/N such as 0/4, got {text!r}")
    index, count = int(index_text), int(count_text)
    if count < 1 or index >= count:
        raise argparse.ArgumentTypeError(f"need 0 <= I < N in I/N, got {text!r}")
    return index, count


def slice_shards(num_shards: int, index: int, count: int) -> list[int]:
    """The shards task ``index`` of ``count`` owns: every ``count``-th one, starting at ``index``."""
    return list(range(index, num_shards, count))


def run(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from harness.cli.eval_cmd import options_from_args
    from harness.encoding.pool import EncoderSpec, encoding_plan_for
    from harness.encoding.store import EmbeddingCache, finished_shards
    from harness.pipeline import load_inputs

    options = options_from_args(args)
    dataset, model = load_inputs(args.dataset, args.model, options)
    if model.record.is_lexical:
        raise HarnessError(f"model {model.record.name} is lexical (BM25); it has no embeddings to encode")
    spec = EncoderSpec(model, options.batch_size, dict(options.encoder_options), str(options.cache_dir))
    encoder = spec.build(options.device)  # exactly as `harness eval` builds it, so the cache key matches
    cache = EmbeddingCache(options.cache_dir)
    directory = cache.corpus_directory(dataset, encoder, options.shard_size)
    num_shards = math.ceil(dataset.num_docs / options.shard_size)
    where = f"{dataset.name} x {model.record.name}"

    if args.merge:
        missing = [i for i in range(num_shards) if i not in set(finished_shards(directory, num_shards))]
        if missing:
            shown = ", ".join(str(i) for i in missing[:10]) + (", ..." if len(missing) > 10 else "")
            raise HarnessError(
                f"{len(missing)} of {num_shards} shards of {where} are missing in {directory} ({shown}); "
                "rerun the `harness encode --shard I/N` tasks that own them (shard i belongs to I = i % N)"
            )
        corpus = cache.corpus(dataset, encoder, shard_size=options.shard_size, progress=False)
        print(
            f"merged {num_shards} shards of {where} ({corpus.num_docs} docs, dim {corpus.dim}) in {directory}"
        )
        return 0

    plan = encoding_plan_for(model, encoder, options)
    if args.shard is None:
        corpus = cache.corpus(
            dataset,
            encoder,
            shard_size=options.shard_size,
            progress=options.progress,
            encode_shards=plan.encode_shards,
        )
        cache.queries(dataset, encoder)
        print(
            f"encoded {where}: {corpus.num_docs} docs in {num_shards} shards, and its queries, in {directory}"
        )
        return 0

    index, count = args.shard
    mine = slice_shards(num_shards, index, count)
    done = set(finished_shards(directory, num_shards))
    todo = [shard for shard in mine if shard not in done]
    sizes = {shard: min(options.shard_size, dataset.num_docs - shard * options.shard_size) for shard in mine}
    with tqdm(
        total=sum(sizes.values()),
        initial=sum(sizes[shard] for shard in mine if shard in done),
        unit="doc",
        desc=f"encoding {dataset.name} {index}/{count}",
        disable=not options.progress,
        dynamic_ncols=True,
    ) as bar:
        plan.encode_shards(dataset, encoder, directory, todo, options.shard_size, progress=bar)
    print(
        f"slice {index}/{count} of {where}: encoded {len(todo)} of its {len(mine)} shards "
        f"({len(mine) - len(todo)} already done) in {directory}; `harness encode --merge` when all slices finish"
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from harness.cli.eval_cmd import add_eval_arguments

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
