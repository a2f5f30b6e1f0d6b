"""``--executor ray``: encode corpus shards on a Ray cluster (or a local Ray started on the spot).

The shards still missing from the cache entry become a Ray Data dataset of ``{"shard": i}`` rows,
mapped one row at a time over a fixed pool of ``ShardEncoderActor`` actors. Each actor loads the
model once (on its own GPU when the cluster has GPUs) and writes its shards straight into the entry
directory with ``encode_corpus_shards``, so the files are exactly those a local run writes: a killed
run resumes from its finished shards, and ``harness eval`` reuses them like any other cache entry.

On a multi-node cluster every node must see the same paths: the corpus file, the model folder and
the cache directory need shared storage (NFS, Lustre, ...), and the harness must be installed on
every node. Ray is optional (``pip install '.[ray]'``) and imported only here, only when used.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.encoding.embedding_cache import ShardJob
from harness.encoding.pool import CORES_PER_CPU_WORKER, available_cpus, worker_dataset
from harness.encoding.runtime import current_torch_threads
from harness.encoding.workers import EncoderSpec, encode_with_threads

log = logging.getLogger(__name__)

_RESULT_FIELDS = ("index", "count", "dim", "seconds")
_HARNESS_ERROR = f"{HarnessError.__module__}.{HarnessError.__qualname__}: "
_EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception|Interrupt)\b.*?: ")


def import_ray():
    """The ``ray`` module with Ray Data, or a one-line error saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401  (Ray Data ships in the ray[data] extra)
    except ImportError as error:
        raise HarnessError(
            f"--executor ray needs Ray with Ray Data ({error}); install it with `pip install '.[ray]'`"
        ) from None
    # Ray Data logs every execution plan at INFO; like the other libraries', show its warnings only.
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    return ray


def connect(address: str | None = None, *, num_cpus: int | None = None) -> dict[str, Any]:
    """Join the cluster at ``address`` (or ``RAY_ADDRESS``), else start a local Ray; return where we are.

    A Ray already initialised in this process is reused as it is.
    """
    ray = import_ray()
    address = address or os.environ.get("RAY_ADDRESS") or None
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
        try:
            if address:
                ray.init(address=address, **kwargs)
            else:
                ray.init(num_cpus=num_cpus or available_cpus(), include_dashboard=False, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as error:
            where = f"the Ray cluster at {address}" if address else "a local Ray instance"
            first_line = (str(error).strip() or type(error).__name__).splitlines()[0]
            raise HarnessError(f"cannot start or reach {where}: {first_line}") from None
    resources = ray.cluster_resources()
    return {
        "address": address or "local",
        "nodes": sum(1 for node in ray.nodes() if node.get("Alive")),
        "cpus": int(resources.get("CPU", 0)),
        "gpus": int(resources.get("GPU", 0)),
    }


class ShardEncoderActor:
    """A Ray Data map worker: loads the model once, then encodes one shard per row into the cache entry."""

    def __init__(self, spec: EncoderSpec, dataset, directory: str, shard_size: int, settings, threads):
        import torch

        self.threads = int(threads) if threads else current_torch_threads()
        device = "cuda" if torch.cuda.is_available() else "cpu"  # Ray pins each actor to its own GPU
        self.encoder = spec.build(device, threads=self.threads)
        if self.encoder.settings() != settings:
            raise HarnessError(
                f"a Ray actor on {device} would encode with different settings than the driver; "
                "use nodes of one kind"
            )
        self.encoder.load()
        self.dataset = dataset
        self.directory = Path(directory)
        self.shard_size = shard_size

    def __call__(self, batch: dict[str, Any]) -> dict[str, list]:
        shards = [int(index) for index in batch["shard"]]
        job = ShardJob(self.dataset, self.encoder, self.directory, self.shard_size)
        metas = encode_with_threads(job, shards, self.threads)
        return {name: [meta[name] for meta in metas] for name in _RESULT_FIELDS}


class RayPool:
    """Encodes shards on Ray; call it like ``encode_corpus_shards``."""

    def __init__(self, spec: EncoderSpec, *, address: str | None = None, workers: int | None = None):
        if workers is not None and workers < 1:
            raise HarnessError(f"--workers must be at least 1, got {workers}")
        import_ray()  # fail before any work when Ray is missing
        self.spec = spec
        self.address = address
        self.workers = workers
        self.used: dict[str, Any] | None = None

    def describe(self) -> dict[str, Any]:
        if self.used is None:
            return {"executor": "ray", "address": self.address, "note": "no shard needed encoding"}
        return dict(self.used)

    def _pool_shape(self, cluster: dict[str, Any]) -> tuple[int, float, int]:
        """``(actors, gpus per actor, cpus per actor)`` for this cluster."""
        gpus, cpus = cluster["gpus"], max(1, cluster["cpus"])
        if gpus:
            actors = self.workers or gpus
            return actors, min(1.0, gpus / actors), max(1, cpus // actors)
        actors = self.workers or max(1, cpus // CORES_PER_CPU_WORKER)
        return actors, 0.0, max(1, cpus // actors)

    def __call__(self, job: ShardJob, shard_indices: Iterable[int]) -> list[dict[str, Any]]:
        shards = sorted(set(shard_indices))
        if not shards:
            return []
        job.encoder.resolve_runtime()  # one ``exact`` choice, recorded in the shared cache, for every actor
        ray = import_ray()
        # A local Ray gets at least one CPU per requested worker, so --workers N is honoured on any machine.
        cluster = connect(self.address, num_cpus=max(available_cpus(), self.workers or 0))
        actors, gpus_per_actor, cpus_per_actor = self._pool_shape(cluster)
        actors = min(actors, len(shards))
        self.used = {
            "executor": "ray",
            **cluster,
            "workers": actors,
            "gpus_per_worker": gpus_per_actor,
            "cpus_per_worker": cpus_per_actor,
        }
        log.info(
            "encoding %d shard(s) on Ray (%s: %d node(s), %d CPU, %d GPU) with %d actor(s)",
            len(shards),
            cluster["address"],
            cluster["nodes"],
            cluster["cpus"],
            cluster["gpus"],
            actors,
        )
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # our own bar counts documents
        rows = ray.data.from_items([{"shard": index} for index in shards])
        encoded = rows.map_batches(
            ShardEncoderActor,
            fn_constructor_kwargs={
                "spec": self.spec,
                "dataset": worker_dataset(job.dataset, job.shard_size),
                "directory": str(job.directory),
                "shard_size": job.shard_size,
                "settings": job.encoder.settings(),
                "threads": cpus_per_actor,
            },
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=actors),
            num_gpus=gpus_per_actor,
            num_cpus=cpus_per_actor,
        )
        written: list[dict[str, Any]] = []
        try:
            for row in encoded.iter_rows():
                meta = {
                    name: row[name].item() if hasattr(row[name], "item") else row[name]
                    for name in _RESULT_FIELDS
                }
                written.append(meta)
                job.shard_written_elsewhere(meta)
        except ray.exceptions.RayError as error:
            message, expected = _cause(error)
            if expected:  # bad input or model, reported as a local run reports it
                raise HarnessError(message) from None
            raise HarnessError(
                f"Ray encoding failed: {message}; finished shards are kept, rerun to resume"
            ) from None
        return written


def _cause(error: BaseException) -> tuple[str, bool]:
    """``(message, is_harness_error)`` of what failed inside a Ray worker.

    Ray hands the worker's exception back as text (its traceback) wrapped in its own errors, so the
    cause is read from that text: a ``HarnessError`` line if there is one, else the last exception line.
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        if line.startswith(_HARNESS_ERROR):
            return line[len(_HARNESS_ERROR) :], True
    raised = [line for line in lines if _EXCEPTION_LINE.match(line) and not line.startswith("ray.")]
    return ((raised or lines or [type(error).__name__])[-1])[:300], False
