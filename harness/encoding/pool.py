"""Encode a corpus with every device of one machine: one worker process per GPU, or several CPU ones.

Encoding is embarrassingly parallel: shard ``i`` of the embedding cache depends only on documents
``[i*S, (i+1)*S)``. Each worker process loads the model once, then takes shards one at a time from a
``ProcessPoolExecutor`` queue and writes them with ``encode_corpus_shards`` (seeking straight to the
shard in the corpus file), so a fast GPU simply takes more shards. The parent alone updates the
manifest and the progress bar. Shard boundaries and encoder settings are those of a single worker,
so the cache entry (and every metric computed from it) is the same whatever the worker count.

The plan is automatic and overridable: ``--devices cuda:0,cuda:1`` lists devices (one worker each),
``--workers N`` sets the count (spread over the devices, or CPU processes with the cores split
between them). ``--executor ray`` hands the same shards to Ray actors (``harness.encoding.ray_pool``);
``harness.encoding.plan`` chooses between them. Per-process worker state is ``harness.encoding.workers``.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.protocols import CorpusSource, DocumentEncoder
from harness.encoding.embedding_cache import ShardJob, encode_corpus_shards
from harness.encoding.runtime import pick_device
from harness.encoding.workers import EncoderSpec, WorkerSlot, encode_in_worker, start_worker

LOCAL_EXECUTOR = "local"  # processes on this machine: the default executor

log = logging.getLogger(__name__)

# Automatic CPU plan: one process per this many cores (a BERT forward pass scales well up to about
# four threads; past that, separate processes keep the cores busier).
CORES_PER_CPU_WORKER = 4


def available_cpus() -> int:
    """Cores this process may run on (the affinity mask, which containers and SLURM set)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def parse_devices(text: str | Sequence[str] | None) -> list[str] | None:
    """``"cuda:0,cuda:1"`` (or a list of such strings) -> ``["cuda:0", "cuda:1"]``; None when empty."""
    if text is None:
        return None
    parts = [text] if isinstance(text, str) else list(text)
    devices = [item.strip() for part in parts for item in part.split(",") if item.strip()]
    return devices or None


def plan_workers(
    device: str | None = None, workers: int | None = None, devices: Sequence[str] | None = None
) -> list[WorkerSlot]:
    """The worker slots for this machine.

    ``devices`` wins over ``device``; ``workers`` repeats the devices round-robin up to that count.
    Without either: every visible GPU when ``device`` is auto or ``cuda``, else one CPU process per
    ``CORES_PER_CPU_WORKER`` cores. Cores are split evenly between the workers.
    """
    if workers is not None and workers < 1:
        raise HarnessError(f"--workers must be at least 1, got {workers}")
    if devices:
        chosen = [pick_device(name) for name in devices]
    else:
        main = pick_device(device)
        if main == "cuda":
            import torch

            gpus = torch.cuda.device_count()
            chosen = [f"cuda:{index}" for index in range(gpus)] if gpus > 1 else [main]
        elif main == "cpu" and workers is None:
            chosen = ["cpu"] * max(1, available_cpus() // CORES_PER_CPU_WORKER)
        else:
            chosen = [main]
    count = workers or len(chosen)
    chosen = [chosen[index % len(chosen)] for index in range(count)]
    threads = max(1, available_cpus() // count)
    return [WorkerSlot(name, threads) for name in chosen]


def check_same_settings(spec: EncoderSpec, devices: Iterable[str], expected: dict[str, Any]) -> None:
    """Every device must produce the vectors the cache key describes (e.g. no fp16 GPU beside a CPU)."""
    for name in sorted(set(devices)):
        settings = spec.build(name).settings()
        if settings != expected:
            changed = sorted(key for key in {*settings, *expected} if settings.get(key) != expected.get(key))
            raise HarnessError(
                f"device {name} would encode with different settings ({', '.join(changed)}) than the rest "
                "of the run; list devices of one kind in --devices"
            )


def worker_dataset(dataset: CorpusSource, shard_size: int) -> CorpusSource:
    """A copy of ``dataset`` small enough to ship to workers, with its shard offsets already found."""
    dataset.shard_starts(shard_size)  # computed once here, not once per worker
    try:
        return replace(dataset, queries={}, qrels={})
    except TypeError:  # not a dataclass (e.g. a test double): ship it as it is
        return dataset


def work_units(
    shard_indices: Sequence[int], dataset: CorpusSource, shard_size: int, workers: int
) -> list[list[int]]:
    """Shards per task: one each when the corpus file can seek, else one contiguous run per worker."""
    shards = sorted(shard_indices)
    seekable = dataset.shard_starts(shard_size) is not None
    if seekable or len(shards) <= 1:
        return [[index] for index in shards]
    size = -(-len(shards) // workers)
    return [shards[start : start + size] for start in range(0, len(shards), size)]


class InProcess:
    """Encodes shards in this process: with the run's encoder, or one built for the planned device."""

    def __init__(self, details: dict[str, Any], encoder: DocumentEncoder | None = None):
        self.details = details
        self.encoder = encoder

    def describe(self) -> dict[str, Any]:
        return dict(self.details)

    def __call__(self, job: ShardJob, shard_indices: Iterable[int]) -> list[dict[str, Any]]:
        if self.encoder is None:
            return encode_corpus_shards(job, shard_indices)
        if self.encoder.settings() != job.encoder.settings():
            raise HarnessError("the planned device would encode with different settings than the run")
        return encode_corpus_shards(replace(job, encoder=self.encoder), shard_indices)


@dataclass
class LocalPool:
    """Encodes shards in worker processes; call it like ``encode_corpus_shards``."""

    spec: EncoderSpec
    slots: list[WorkerSlot]

    def describe(self) -> dict[str, Any]:
        return {
            "executor": LOCAL_EXECUTOR,
            "workers": len(self.slots),
            "devices": [slot.device for slot in self.slots],
            "threads_per_worker": self.slots[0].threads if self.slots else None,
        }

    def __call__(self, job: ShardJob, shard_indices: Iterable[int]) -> list[dict[str, Any]]:
        shards = sorted(set(shard_indices))
        if not shards:
            return []
        # Settle an ``exact`` runtime here, once: every worker then reads the recorded choice from the
        # cache instead of timing its own, so all shards of an entry come from one runtime.
        job.encoder.resolve_runtime()
        settings = job.encoder.settings()
        check_same_settings(self.spec, [slot.device for slot in self.slots], settings)
        shipped = worker_dataset(job.dataset, job.shard_size)
        units = work_units(shards, shipped, job.shard_size, len(self.slots))
        workers = min(len(self.slots), len(units))
        log.info(
            "encoding %d shard(s) with %d worker process(es) on %s",
            len(shards),
            workers,
            ", ".join(slot.device for slot in self.slots[:workers]),
        )
        # spawn, not fork: a forked copy of an initialised torch (threads, CUDA) is not safe to use.
        context = multiprocessing.get_context("spawn")
        slots = context.Queue()
        for slot in self.slots[:workers]:
            slots.put(slot)
        written: list[dict[str, Any]] = []
        pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=start_worker,
            initargs=(self.spec, shipped, Path(job.directory), job.shard_size, settings, slots),
        )
        try:
            pending = {pool.submit(encode_in_worker, unit) for unit in units}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    for meta in future.result():
                        written.append(meta)
                        job.shard_written_elsewhere(meta)
        except BrokenProcessPool:
            raise HarnessError(
                "an encoding worker process died (out of memory?); finished shards are kept, rerun to resume"
            ) from None
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return written
