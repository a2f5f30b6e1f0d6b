"""Every precision setting side by side on a sample of scifact documents, in one process: seconds (best
of ``--repeats`` interleaved rounds after a warm-up), docs/s, speed-up and vector error against torch fp32.

A quick way to see what a CPU gains from each setting before the full ``bench_pipeline.py`` run; the
vector error is the one the precision check bounds (``building_blocks.APPROXIMATE_TOLERANCE``).

Usage: ``python scripts/bench_precision.py [--dataset-dir ../shared/data/beir/scifact] [--docs 512]``
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from harness.api.building_blocks import (
    APPROXIMATE_TOLERANCE,
    INT8_VARIANTS,
    agreement,
    build_encoder,
    cpu_has_native_bf16,
    int8_cpu_class,
    load_dataset,
    relevant_cpu_flags,
    resolve_model,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATASET = REPO.parent / "shared" / "data" / "beir" / "scifact"


def settings() -> dict[str, dict]:
    """name -> build_encoder arguments: the exact candidates, bf16 where native, every int8 variant."""
    lines = {
        "torch fp32": {"runtime": "torch"},
        "onnx fp32": {"runtime": "onnx"},
        "exact fp32": {},
    }
    if cpu_has_native_bf16():
        lines["torch bf16"] = {"precision": "bf16"}
    for variant in INT8_VARIANTS:
        lines[f"int8 {variant}"] = {"precision": "int8", "int8": variant}
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset-dir", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--docs", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--cache-dir", type=Path, default=Path("cache"))
    args = parser.parse_args()
    print(f"cpu flags: {' '.join(relevant_cpu_flags())}; int8 class: {int8_cpu_class()}")
    model = resolve_model("sentence-transformers/all-MiniLM-L6-v2")
    docs = list(load_dataset(args.dataset_dir, "test").iter_documents())
    sample = np.random.default_rng(0).choice(len(docs), min(args.docs, len(docs)), replace=False)
    encoders = {
        name: build_encoder(model, device="cpu", batch_size=args.batch_size, cache_dir=args.cache_dir, **options)
        for name, options in settings().items()
    }
    texts = [encoders["torch fp32"].document_text(docs[i]) for i in sample]
    best: dict[str, float] = {}
    vectors: dict[str, np.ndarray] = {}
    for round_number in range(args.repeats + 1):  # round 0 warms up (exports, quantizes, checks)
        for name, encoder in encoders.items():
            started = time.perf_counter()
            vectors[name] = encoder.encode_texts(texts)
            if round_number:
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - started)
    reference = best["torch fp32"]
    print(f"{'setting':22s} {'seconds':>8s} {'docs/s':>7s} {'x torch':>7s} {'max err':>8s} {'low cos':>8s}  label")
    for name, encoder in encoders.items():
        measured = agreement(vectors[name], vectors["torch fp32"])
        flag = "" if measured["relative_error"] <= APPROXIMATE_TOLERANCE else "  (above the check's bound)"
        print(
            f"{name:22s} {best[name]:8.2f} {len(texts) / best[name]:7.1f} {reference / best[name]:7.2f} "
            f"{measured['relative_error']:8.4f} {measured['lowest_cosine']:8.5f}  {encoder.label()}{flag}"
        )


if __name__ == "__main__":
    main()
