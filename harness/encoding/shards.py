"""Encoding a corpus in slices: which shards a task owns, encoding them, and merging the entry.

``harness encode --shard I/N`` encodes only the corpus shards ``i`` with ``i % N == I`` (one task of
a SLURM job array, say), skipping those already on disk; ``--merge`` then checks that every shard is
there and finalises the entry's manifest. Either way ``harness eval`` with the same options finds the
entry complete and encodes nothing, because the encoder is built exactly as eval builds it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from harness.core.errors import HarnessError
from harness.core.protocols import EvalDataset
from harness.encoding.embedding_cache import EmbeddingCache, ShardedEmbeddings, ShardJob, finished_shards
from harness.encoding.encoder import Encoder
from harness.encoding.plan import EncodingSettings, encoder_spec_for, encoding_plan_for


def slice_shards(num_shards: int, index: int, count: int) -> list[int]:
    """The shards task ``index`` of ``count`` owns: every ``count``-th one, starting at ``index``."""
    if count < 1 or not 0 <= index < count:
        raise HarnessError(f"slice {index}/{count}: need 0 <= I < N")
    return list(range(index, num_shards, count))


@dataclass(frozen=True)
class SliceOutcome:
    """What one ``--shard I/N`` task did: the shards it owns and those it encoded now."""

    index: int
    count: int
    owned: list[int]
    encoded: list[int]


@dataclass
class CorpusEncoding:
    """One dataset's corpus with one model, headed for the embedding cache entry ``harness eval`` reads."""

    dataset: EvalDataset
    model: object  # harness.models.model_registry.ResolvedModel
    options: EncodingSettings
    encoder: Encoder
    cache: EmbeddingCache

    @classmethod
    def create(cls, dataset: EvalDataset, model, options: EncodingSettings) -> CorpusEncoding:
        """Build the encoder exactly as ``harness eval`` does, so the cache key matches."""
        if model.record.is_lexical:
            raise HarnessError(f"model {model.record.name} is lexical (BM25); it has no embeddings to encode")
        encoder = encoder_spec_for(model, options).build(options.device)
        return cls(dataset, model, options, encoder, EmbeddingCache(options.cache_dir))

    @property
    def label(self) -> str:
        return f"{self.dataset.name} x {self.model.record.name}"

    @property
    def shard_size(self) -> int:
        return self.cache.shard_size_for(self.dataset, self.encoder, self.options.shard_size)

    @property
    def num_shards(self) -> int:
        return math.ceil(self.dataset.num_docs / self.shard_size)

    @property
    def directory(self) -> Path:
        return self.cache.corpus_directory(self.dataset, self.encoder, self.shard_size)

    def missing_shards(self) -> list[int]:
        done = set(finished_shards(self.directory, self.num_shards))
        return [index for index in range(self.num_shards) if index not in done]

    def merge(self) -> ShardedEmbeddings:
        """Check that every shard exists, then finalise the entry (encodes nothing)."""
        missing = self.missing_shards()
        if missing:
            shown = ", ".join(str(i) for i in missing[:10]) + (", ..." if len(missing) > 10 else "")
            raise HarnessError(
                f"{len(missing)} of {self.num_shards} shards of {self.label} are missing in {self.directory} "
                f"({shown}); rerun the `harness encode --shard I/N` tasks that own them "
                "(shard i belongs to I = i % N)"
            )
        return self.cache.corpus(self.dataset, self.encoder, shard_size=self.shard_size, progress=False)

    def encode_all(self) -> ShardedEmbeddings:
        """Every missing shard, with the planned executor, then the queries."""
        plan = encoding_plan_for(self.model, self.encoder, self.options)
        corpus = self.cache.corpus(
            self.dataset,
            self.encoder,
            shard_size=self.shard_size,
            progress=self.options.progress,
            encode_shards=plan.encode_shards,
        )
        self.cache.queries(self.dataset, self.encoder)
        return corpus

    def encode_slice(self, index: int, count: int) -> SliceOutcome:
        """The missing shards of slice ``index`` of ``count``; the manifest is left to ``merge``."""
        owned = slice_shards(self.num_shards, index, count)
        done = set(finished_shards(self.directory, self.num_shards))
        todo = [shard for shard in owned if shard not in done]
        num_docs = self.dataset.num_docs
        sizes = {shard: min(self.shard_size, num_docs - shard * self.shard_size) for shard in owned}
        plan = encoding_plan_for(self.model, self.encoder, self.options)
        with tqdm(
            total=sum(sizes.values()),
            initial=sum(sizes[shard] for shard in owned if shard in done),
            unit="doc",
            desc=f"encoding {self.dataset.name} {index}/{count}",
            disable=not self.options.progress,
            dynamic_ncols=True,
        ) as bar:
            job = ShardJob(self.dataset, self.encoder, self.directory, self.shard_size, progress=bar)
            plan.encode_shards(job, todo)
        return SliceOutcome(index, count, owned, todo)
