"""Encode a corpus with every device of one machine: one worker process per GPU, or several CPU ones.

Encoding is embarrassingly parallel: shard ``i`` of the embedding cache depends only on documents
``[i*S, (i+1)*S)``. Each worker process loads the model once, then takes shards one at a time from a
``ProcessPoolExecutor`` queue and writes them with ``encode_corpus_shards`` (seeking straight to the
shard in the corpus file), so a fast GPU simply takes more shards. The parent alone updates the
manifest and the progress bar. Shard boundaries and encoder settings are those of a single worker,
so the cache entry (and every metric computed from it) is the same whatever the worker count.

The plan is automatic and overridable: ``--devices cuda:0,cuda:1`` lists devices (one worker each),
``--workers N`` sets the count (spread over the devices, or CPU processes with the cores split
between them). ``--executor ray`` hands the same shards to Ray actors (``harness.encoding.ray_pool``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.encoding.store import encode_corpus_shards

log = logging.getLogger(__name__)

EXECUTORS = ("local", "ray")
# Automatic CPU plan: one process per this many cores (a BERT forward pass scales well up to about
# four threads; past that, separate processes keep the cores busier).
CORES_PER_CPU_WORKER = 4


@dataclass(frozen=True)
class WorkerSlot:
    """One worker: the device it encodes on and the torch threads it may use."""

    device: str
    threads: int


@dataclass(frozen=True)
class EncoderSpec:
    """How to build this run's encoder in another process: the resolved model and ``Encoder`` arguments."""

    model: Any  # harness.models.resolve.ResolvedModel
    batch_size: int
    options: dict[str, Any] = field(default_factory=dict)
    cache_dir: str | None = None  # where the encoder keeps its exported models and runtime checks

    def build(self, device: str | None):
        from harness.encoding.encoder import Encoder

        return Encoder(
            self.model, device=device, batch_size=self.batch_size, cache_dir=self.cache_dir, **self.options
        )


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
    from harness.encoding.encoder import pick_device

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


# ---------------------------------------------------------------------------------- worker process

# The state of one worker process: set by the pool initializer, the model loaded on the first shard.
_WORKER: dict[str, Any] = {}


def _init_worker(spec, dataset, directory, shard_size, settings, slots) -> None:
    slot = slots.get()
    # The tokenizer's thread pool reads this when it starts; keep it to this worker's share of cores.
    os.environ.setdefault("RAYON_NUM_THREADS", str(slot.threads))
    _WORKER.update(
        spec=spec,
        dataset=dataset,
        directory=directory,
        shard_size=shard_size,
        settings=settings,
        slot=slot,
        encoder=None,
    )


def _worker_encoder():
    if _WORKER["encoder"] is None:
        import torch

        slot = _WORKER["slot"]
        torch.set_num_threads(slot.threads)
        encoder = _WORKER["spec"].build(slot.device)
        if encoder.settings() != _WORKER["settings"]:
            raise HarnessError(
                f"worker on {slot.device} would encode with different settings; not mixing them"
            )
        encoder.load()
        _WORKER["encoder"] = encoder
    return _WORKER["encoder"]


def _encode_in_worker(shard_indices: list[int]) -> list[dict[str, Any]]:
    try:
        return encode_corpus_shards(
            _WORKER["dataset"],
            _worker_encoder(),
            _WORKER["directory"],
            shard_indices,
            _WORKER["shard_size"],
        )
    except HarnessError as error:
        # Subclasses such as InputError cannot be rebuilt from their message in the parent.
        raise HarnessError(str(error)) from None


# ---------------------------------------------------------------------------------------- the pool


def worker_dataset(dataset, shard_size: int):
    """A copy of ``dataset`` small enough to ship to workers, with its shard offsets already found."""
    if hasattr(dataset, "shard_starts"):
        dataset.shard_starts(shard_size)  # computed once here, not once per worker
    try:
        return replace(dataset, queries={}, qrels={})
    except TypeError:  # not a dataclass (e.g. a test double): ship it as it is
        return dataset


def work_units(shard_indices: Sequence[int], dataset, shard_size: int, workers: int) -> list[list[int]]:
    """Shards per task: one each when the corpus file can seek, else one contiguous run per worker."""
    shards = sorted(shard_indices)
    seekable = hasattr(dataset, "shard_starts") and dataset.shard_starts(shard_size) is not None
    if seekable or len(shards) <= 1:
        return [[index] for index in shards]
    size = -(-len(shards) // workers)
    return [shards[start : start + size] for start in range(0, len(shards), size)]


@dataclass
class LocalPool:
    """Encodes shards in worker processes; call it like ``encode_corpus_shards``."""

    spec: EncoderSpec
    slots: list[WorkerSlot]

    def describe(self) -> dict[str, Any]:
        return {
            "executor": "local",
            "workers": len(self.slots),
            "devices": [slot.device for slot in self.slots],
            "threads_per_worker": self.slots[0].threads if self.slots else None,
        }

    def __call__(
        self,
        dataset,
        encoder,
        directory: Path,
        shard_indices: Iterable[int],
        shard_size: int,
        *,
        progress=None,
        on_shard: Callable[[dict[str, Any]], None] | None = None,
    ) -> list[dict[str, Any]]:
        shards = sorted(set(shard_indices))
        if not shards:
            return []
        settings = encoder.settings()
        check_same_settings(self.spec, [slot.device for slot in self.slots], settings)
        shipped = worker_dataset(dataset, shard_size)
        units = work_units(shards, shipped, shard_size, len(self.slots))
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
            initializer=_init_worker,
            initargs=(self.spec, shipped, Path(directory), shard_size, settings, slots),
        )
        try:
            pending = {pool.submit(_encode_in_worker, unit) for unit in units}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    for meta in future.result():
                        written.append(meta)
                        if on_shard is not None:
                            on_shard(meta)
                        if progress is not None:
                            progress.update(meta["count"])
        except BrokenProcessPool:
            raise HarnessError(
                "an encoding worker process died (out of memory?); finished shards are kept, rerun to resume"
            ) from None
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return written


def _on_device(encoder_for_slot):
    """Encode in this process with an encoder built for the one planned device."""

    def encode(dataset, encoder, directory, shard_indices, shard_size, *, progress=None, on_shard=None):
        if encoder_for_slot.settings() != encoder.settings():
            raise HarnessError("the planned device would encode with different settings than the run")
        return encode_corpus_shards(
            dataset,
            encoder_for_slot,
            directory,
            shard_indices,
            shard_size,
            progress=progress,
            on_shard=on_shard,
        )

    return encode


@dataclass
class EncodingPlan:
    """How the corpus is encoded: the ``encode_shards`` callable for the cache, and what to record."""

    encode_shards: Callable[..., Any]
    details: dict[str, Any]

    def describe(self) -> dict[str, Any]:
        """Recorded in provenance; not part of any cache key (the vectors do not depend on it)."""
        runner = self.encode_shards
        return runner.describe() if hasattr(runner, "describe") else dict(self.details)


def plan_encoding(
    spec: EncoderSpec,
    encoder,
    *,
    executor: str = "local",
    workers: int | None = None,
    devices: Sequence[str] | None = None,
    ray_address: str | None = None,
) -> EncodingPlan:
    """Choose how ``encoder``'s corpus shards get encoded: in this process, local workers, or Ray."""
    if executor not in EXECUTORS:
        raise HarnessError(f"unknown executor {executor!r} (use {' or '.join(EXECUTORS)})")
    if executor == "ray":
        from harness.encoding.ray_pool import RayPool

        pool = RayPool(spec, address=ray_address, workers=workers)
        return EncodingPlan(pool, {})
    if ray_address:
        raise HarnessError("--ray-address needs --executor ray")
    slots = plan_workers(encoder.device, workers, devices)
    if len(slots) > 1:
        return EncodingPlan(LocalPool(spec, slots), {})
    details = {"executor": "local", "workers": 1, "devices": [slots[0].device], "threads_per_worker": None}
    if slots[0].device == encoder.device:
        return EncodingPlan(encode_corpus_shards, details)
    return EncodingPlan(_on_device(spec.build(slots[0].device)), details)


def encoding_plan_for(model, encoder, options) -> EncodingPlan:
    """The plan an ``EvalOptions`` asks for (``workers``, ``devices``, ``executor``, ``ray_address``)."""
    spec = EncoderSpec(model, options.batch_size, dict(options.encoder_options), str(options.cache_dir))
    return plan_encoding(
        spec,
        encoder,
        executor=options.executor,
        workers=options.workers,
        devices=options.devices,
        ray_address=options.ray_address,
    )
