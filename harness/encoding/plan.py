"""How a run's corpus gets encoded: in this process, in local worker processes, or on Ray.

Every plan writes the same shards (and so the same cache entry); the plan is recorded in provenance
(``EncodingPlan.describe``) and is never part of a cache key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.paths import default_cache_dir
from harness.core.protocols import ShardExecutor
from harness.encoding.encoder import Encoder
from harness.encoding.pool import LOCAL_EXECUTOR, InProcess, LocalPool, plan_workers
from harness.encoding.ray_pool import RayPool
from harness.encoding.workers import EncoderSpec

EXECUTORS = (LOCAL_EXECUTOR, "ray")


@dataclass(frozen=True)
class EncodingSettings:
    """What the encoding stage needs: how to build the encoder, where to cache, and how to spread the work.

    ``workers``, ``devices``, ``executor`` and ``ray_address`` choose the plan only: every plan writes
    the same vectors, so they are recorded in provenance but never part of a cache key.
    """

    batch_size: int = 128
    device: str | None = None
    cache_dir: Path = field(default_factory=default_cache_dir)
    shard_size: int | None = None  # None: harness.core.cache.auto_shard_size of the corpus
    progress: bool = True
    encoder_options: dict[str, Any] = field(default_factory=dict)  # runtime, precision
    workers: int | None = None
    devices: list[str] | None = None
    executor: str = LOCAL_EXECUTOR
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if self.batch_size <= 0:
            raise HarnessError(f"--batch-size must be positive, got {self.batch_size}")
        object.__setattr__(self, "cache_dir", Path(self.cache_dir))


@dataclass
class EncodingPlan:
    """How the corpus is encoded: the executor the cache calls to encode shards."""

    encode_shards: ShardExecutor

    def describe(self) -> dict[str, Any]:
        """Recorded in provenance; not part of any cache key (the vectors do not depend on it)."""
        return self.encode_shards.describe()


def plan_encoding(
    spec: EncoderSpec,
    encoder: Encoder,
    *,
    executor: str = LOCAL_EXECUTOR,
    workers: int | None = None,
    devices: Sequence[str] | None = None,
    ray_address: str | None = None,
) -> EncodingPlan:
    """Choose how ``encoder``'s corpus shards get encoded: in this process, local workers, or Ray."""
    if executor not in EXECUTORS:
        raise HarnessError(f"unknown executor {executor!r} (use {' or '.join(EXECUTORS)})")
    if executor == "ray":
        return EncodingPlan(RayPool(spec, address=ray_address, workers=workers))
    if ray_address:
        raise HarnessError("--ray-address needs --executor ray")
    slots = plan_workers(encoder.device, workers, devices)
    if len(slots) > 1:
        return EncodingPlan(LocalPool(spec, slots))
    details = {
        "executor": LOCAL_EXECUTOR,
        "workers": 1,
        "devices": [slots[0].device],
        "threads_per_worker": None,
    }
    if slots[0].device == encoder.device:
        return EncodingPlan(InProcess(details))
    return EncodingPlan(InProcess(details, spec.build(slots[0].device)))


def encoder_spec_for(model, options: EncodingSettings) -> EncoderSpec:
    """The encoder ``options`` describe, buildable in any process (``harness eval`` and ``encode`` agree)."""
    return EncoderSpec(model, options.batch_size, dict(options.encoder_options), str(options.cache_dir))


def encoding_plan_for(model, encoder: Encoder, options: EncodingSettings) -> EncodingPlan:
    """The plan ``options`` ask for (``workers``, ``devices``, ``executor``, ``ray_address``)."""
    return plan_encoding(
        encoder_spec_for(model, options),
        encoder,
        executor=options.executor,
        workers=options.workers,
        devices=options.devices,
        ray_address=options.ray_address,
    )
