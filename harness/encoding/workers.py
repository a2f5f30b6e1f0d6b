"""What one encoding worker process holds: its slot, the shipped dataset, and its encoder.

A ``ProcessPoolExecutor`` runs plain functions in its worker processes, so the state a worker keeps
between shards (the loaded model, above all) lives in one ``ShardWorker`` per process, created by
the pool initializer (``start_worker``) and used by ``encode_in_worker``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.protocols import CorpusSource
from harness.encoding.embedding_cache import ShardJob, encode_corpus_shards
from harness.encoding.encoder import Encoder
from harness.encoding.runtime import tokenizer_threads, torch_threads
from harness.encoding.runtime_choice import build_encoder


@dataclass(frozen=True)
class WorkerSlot:
    """One worker: the device it encodes on and the torch threads it may use."""

    device: str
    threads: int


@dataclass(frozen=True)
class EncoderSpec:
    """How to build this run's encoder in another process: the resolved model and ``build_encoder``
    arguments (each process makes the same choice, reading the checks the first one recorded).
    """

    model: Any  # harness.models.model_registry.ResolvedModel
    batch_size: int
    options: dict[str, Any] = field(default_factory=dict)
    cache_dir: str | None = None  # where the encoder keeps its exported models and runtime checks

    def build(self, device: str | None, threads: int | None = None) -> Encoder:
        """The encoder for ``device``, its runtime and precision chosen now (``build_encoder``)."""
        return build_encoder(
            self.model,
            device=device,
            batch_size=self.batch_size,
            cache_dir=self.cache_dir,
            threads=threads,
            **self.options,
        )


class ShardWorker:
    """One worker process's state: encodes the shards it is handed with one encoder, loaded once."""

    def __init__(
        self,
        spec: EncoderSpec,
        dataset: CorpusSource,
        directory: Path,
        shard_size: int,
        settings: dict[str, Any],
        slot: WorkerSlot,
    ):
        self.spec = spec
        self.dataset = dataset
        self.directory = Path(directory)
        self.shard_size = shard_size
        self.settings = settings
        self.slot = slot
        self._encoder: Encoder | None = None

    def encoder(self) -> Encoder:
        """The worker's encoder, built and loaded on first use, refusing settings unlike the run's."""
        if self._encoder is None:
            encoder = self.spec.build(self.slot.device, threads=self.slot.threads)
            if encoder.settings() != self.settings:
                raise HarnessError(
                    f"worker on {self.slot.device} would encode with different settings; not mixing them"
                )
            encoder.load()
            self._encoder = encoder
        return self._encoder

    def encode(self, shard_indices: list[int]) -> list[dict[str, Any]]:
        """Encode these shards into the entry folder, within this worker's share of the cores."""
        job = ShardJob(self.dataset, self.encoder(), self.directory, self.shard_size)
        return encode_with_threads(job, shard_indices, self.slot.threads)


def encode_with_threads(job: ShardJob, shard_indices: list[int], threads: int) -> list[dict[str, Any]]:
    """A worker's unit of work (local process or Ray actor): its shards, on its share of the cores."""
    try:
        with torch_threads(threads), tokenizer_threads(threads):
            return encode_corpus_shards(job, shard_indices)
    except HarnessError as error:
        # Subclasses such as InputError cannot be rebuilt from their message in the parent.
        raise HarnessError(str(error)) from None


# The one worker of this process (None in the parent): set by ``start_worker``, the pool's initializer.
_this_process_worker: ShardWorker | None = None


def start_worker(spec, dataset, directory, shard_size, settings, slots) -> None:
    """Pool initializer: take a slot from the shared queue and make this process's ``ShardWorker``."""
    global _this_process_worker
    _this_process_worker = ShardWorker(spec, dataset, directory, shard_size, settings, slots.get())


def encode_in_worker(shard_indices: list[int]) -> list[dict[str, Any]]:
    """The task a pool runs: this process's worker encodes ``shard_indices``."""
    if _this_process_worker is None:
        raise RuntimeError("encode_in_worker runs only in a process started with start_worker")
    return _this_process_worker.encode(shard_indices)
