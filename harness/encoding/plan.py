"""How a run's corpus gets encoded: in this process, in local worker processes, or on Ray.

Every plan writes the same shards (and so the same cache entry); the plan is recorded in provenance
(``EncodingPlan.describe``) and is never part of a cache key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.core.errors import HarnessError
from harness.core.protocols import EncodingOptions, ShardExecutor
from harness.encoding.encoder import Encoder
from harness.encoding.pool import InProcess, LocalPool, plan_workers
from harness.encoding.ray_pool import RayPool
from harness.encoding.workers import EncoderSpec

EXECUTORS = ("local", "ray")


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
    executor: str = "local",
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
    details = {"executor": "local", "workers": 1, "devices": [slots[0].device], "threads_per_worker": None}
    if slots[0].device == encoder.device:
        return EncodingPlan(InProcess(details))
    return EncodingPlan(InProcess(details, spec.build(slots[0].device)))


def encoder_spec_for(model, options: EncodingOptions) -> EncoderSpec:
    """The encoder ``options`` describe, buildable in any process (``harness eval`` and ``encode`` agree)."""
    return EncoderSpec(model, options.batch_size, dict(options.encoder_options), str(options.cache_dir))


def encoding_plan_for(model, encoder: Encoder, options: EncodingOptions) -> EncodingPlan:
    """The plan ``options`` ask for (``workers``, ``devices``, ``executor``, ``ray_address``)."""
    return plan_encoding(
        encoder_spec_for(model, options),
        encoder,
        executor=options.executor,
        workers=options.workers,
        devices=options.devices,
        ray_address=options.ray_address,
    )
