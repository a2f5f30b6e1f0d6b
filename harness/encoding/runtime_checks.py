"""The checks of how a runtime or precision computes, each run once and recorded in the cache.

* The ``exact`` runtime's choice among torch, onnx and onnx-fused (``harness.encoding.exact_runtime``)
  uses the fixed sample and the error measures here.
* The check of an approximate setting (int8, bf16, fp16): its vectors against torch fp32 on the fixed
  sample; it passes when none moves further than ``APPROXIMATE_TOLERANCE``.
* ``--precision fast``: the fastest setting among ``exact`` and the approximate ones that pass.

These functions measure, compare and record; ``harness.encoding.runtime_choice`` decides when to run them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.cache import digest_of
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write_json, read_json_or_none
from harness.encoding.cpu import int8_cpu_class
from harness.encoding.onnx_export import export_folder, package_version

APPROXIMATE_CHECK_FORMAT = 1
# An approximate setting (int8, bf16, fp16) passes its check when no sample vector moves further than
# this from torch fp32 (relative L2; for unit vectors 0.005 is a cosine of 0.9999875). Measured by
# scripts/bench_vector_noise.py (all-MiniLM-L6-v2, scifact, 100 trials of every vector moved by exactly
# this much): median |change in nDCG@10| 0.0006, within 0.001 in 63% of trials, Recall@100 within 0.002
# in 98% (at 0.04: 0.0016, 39%, 55%). No bound promises "within 0.001" on 300 queries: one query
# swapping two documents near its top moves nDCG@10 by about 0.001, and noise of 0.001 already moves it
# further in 11% of trials.
APPROXIMATE_TOLERANCE = 0.005
# ``--precision fast`` takes an approximate setting over ``exact`` only when it is this much faster on
# the sample: on a near-tie exact vectors win.
EXACT_MIN_SPEEDUP = 1.1


# --------------------------------------------------------------------------------------------
# The fixed sample and how far two sets of vectors are apart
# --------------------------------------------------------------------------------------------

_SAMPLE_SENTENCES = (
    "Vitamin D deficiency is associated with an increased risk of active tuberculosis.",
    "What causes the immune system to attack healthy cells?",
    "The 2019 survey of 1,204 households found a 12.5% rise in broadband use (p < 0.01).",
    "Mutations in BRCA1 and BRCA2 raise the lifetime risk of breast and ovarian cancer.",
    "How do I reset my password if I no longer have access to the e-mail account?",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "Central banks raised interest rates to curb inflation, slowing mortgage lending.",
    "Résumé, naïve café: accented words and punctuation -- even emoji 🙂 -- are text too.",
    "Transformer encoders map every token to a vector; pooling turns them into one.",
    "Is it safe to take ibuprofen together with paracetamol for a fever?",
    "The court held that the contract was void because one party lacked capacity.",
    "Randomised controlled trials remain the strongest design for testing treatments.",
)


def exact_sample_texts() -> list[str]:
    """A fixed, model-independent sample of 32 texts: single sentences, then runs of 2 to 34 of them
    (past any max length), so the comparison covers short queries, padding and truncation.
    """
    sentences = list(_SAMPLE_SENTENCES)
    runs = []
    for count in (*range(2, 14), 15, 17, 19, 21, 24, 27, 30, 34):
        start = (count * 5) % len(sentences)
        rotated = sentences[start:] + sentences[:start]
        runs.append(" ".join((rotated * 3)[:count]))
    return sentences + runs


def check_sample(record) -> list[str]:
    """The fixed sample as a model encodes it: short texts as queries, long ones as documents (so the
    checks cover both prefixes and truncation).
    """
    return [
        f"{record.query_prefix}{text}" if len(text) < 200 else record.doc_prefix + text
        for text in exact_sample_texts()
    ]


def check_environment(device: str) -> dict[str, Any]:
    """What a recorded check is valid for: another device or library version means a new check.

    Thread counts are left out on purpose: workers that split the cores share the driver's check.
    """
    return {
        "device": device.split(":")[0],
        "cpu": int8_cpu_class() if device == "cpu" else None,
        "onnxruntime": package_version("onnxruntime"),
        "torch": package_version("torch"),
    }


def _row_errors(candidate: np.ndarray, reference: np.ndarray) -> np.ndarray:
    norms = np.maximum(np.linalg.norm(reference, axis=1), np.finfo(np.float32).tiny)
    return np.linalg.norm(candidate - reference, axis=1) / norms


def relative_error(candidate: np.ndarray, reference: np.ndarray) -> float:
    """max over rows of ||candidate - reference|| / ||reference||."""
    return float(_row_errors(candidate, reference).max())


def agreement(candidate: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """How far ``candidate`` rows are from ``reference`` rows: largest and mean relative L2 error, and
    the lowest cosine similarity of a row pair.
    """
    errors = _row_errors(candidate, reference)
    tiny = np.finfo(np.float32).tiny
    cosines = (candidate * reference).sum(axis=1) / np.maximum(
        np.linalg.norm(candidate, axis=1) * np.linalg.norm(reference, axis=1), tiny
    )
    return {
        "relative_error": round(float(errors.max()), 6),
        "mean_relative_error": round(float(errors.mean()), 6),
        "lowest_cosine": round(float(cosines.min()), 6),
    }


def _timed_rounds(
    runners: dict[str, Callable[[], np.ndarray]], repeats: int, clock: Callable[[], float]
) -> tuple[dict[str, dict[str, Any]], dict[str, np.ndarray]]:
    """Run every runner ``repeats + 1`` times, interleaved; the first round is an untimed warm-up (it
    exports, quantizes, builds sessions). ``({name: {seconds | error}}, {name: vectors})``; a runner
    that raises a ``HarnessError`` is recorded with its error and not run again.
    """
    results: dict[str, dict[str, Any]] = {name: {"seconds": None} for name in runners}
    vectors: dict[str, np.ndarray] = {}
    for round_number in range(repeats + 1):
        for name, runner in runners.items():
            if results[name].get("error"):
                continue
            started = clock()
            try:
                vectors[name] = runner()
            except HarnessError as error:
                results[name]["error"] = str(error)
                continue
            seconds = clock() - started
            if round_number == 0:
                continue
            best = results[name]["seconds"]
            results[name]["seconds"] = round(seconds if best is None else min(best, seconds), 4)
    return results, vectors


# --------------------------------------------------------------------------------------------
# The check of an approximate setting
# --------------------------------------------------------------------------------------------


def approximate_check_path(cache_dir: str | Path, model, setting: dict[str, Any]) -> Path:
    """Where the check of ``setting`` (runtime, precision, quantization) for ``model`` is kept."""
    name = f"check-{setting['runtime']}-{setting['precision']}-{digest_of(setting)[:12]}.json"
    return export_folder(cache_dir, model)[0] / name


def run_approximate_check(
    candidate: Callable[[], np.ndarray],
    reference: Callable[[], np.ndarray],
    *,
    repeats: int = 2,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Time an approximate setting against torch fp32 on the sample (interleaved, best of ``repeats``)
    and measure how far its vectors move: it passes when no vector moves more than
    ``APPROXIMATE_TOLERANCE`` (relative L2). ``speedup`` is the reference's seconds over its own.
    """
    results, vectors = _timed_rounds({"reference": reference, "candidate": candidate}, repeats, clock)
    if "reference" not in vectors:
        raise HarnessError(
            f"the precision check could not run torch fp32: {results['reference'].get('error')}"
        )
    if "candidate" not in vectors:
        return {"passed": False, "error": results["candidate"]["error"], "tolerance": APPROXIMATE_TOLERANCE}
    measured = agreement(vectors["candidate"], vectors["reference"])
    seconds = {name: result["seconds"] for name, result in results.items()}
    return {
        **measured,
        "tolerance": APPROXIMATE_TOLERANCE,
        "passed": bool(measured["relative_error"] <= APPROXIMATE_TOLERANCE),
        "seconds": seconds,
        "speedup": round(seconds["reference"] / max(seconds["candidate"], 1e-9), 3),
    }


def load_approximate_check(
    cache_dir: str | Path, model, device: str, setting: dict[str, Any]
) -> dict[str, Any] | None:
    """The recorded check of ``setting`` for this model, device kind and library versions, if any."""
    record = read_json_or_none(approximate_check_path(cache_dir, model, setting))
    if record is None or record.get("format") != APPROXIMATE_CHECK_FORMAT:
        return None
    if record.get("environment") != check_environment(device) or record.get("setting") != setting:
        return None
    if record.get("tolerance") != APPROXIMATE_TOLERANCE:  # judged by another bound: check again
        return None
    return record


def save_approximate_check(
    cache_dir: str | Path,
    model,
    device: str,
    setting: dict[str, Any],
    outcome: dict[str, Any],
    sample_size: int,
    threads: int,
) -> dict[str, Any]:
    record = {
        "format": APPROXIMATE_CHECK_FORMAT,
        "model": model.record.name,
        "environment": check_environment(device),
        "setting": setting,
        "reference": "torch fp32",
        "threads": threads,
        "sample_size": sample_size,
        **outcome,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    atomic_write_json(approximate_check_path(cache_dir, model, setting), record)
    return record


def exact_speedup(check: dict[str, Any]) -> float:
    """How much faster than torch fp32 the ``exact`` check's choice ran on the sample (1.0 if torch)."""
    candidates = check.get("candidates") or {}
    torch_seconds = (candidates.get("torch") or {}).get("seconds")
    chosen_seconds = (candidates.get(check.get("runtime")) or {}).get("seconds")
    if not torch_seconds or not chosen_seconds:
        return 1.0
    return round(torch_seconds / chosen_seconds, 3)


def choose_fast(exact: dict[str, Any], approximate: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``--precision fast``: the setting with the largest speedup over torch fp32 among ``exact`` and
    the approximate settings whose check passed; an approximate one must beat ``exact`` by
    ``EXACT_MIN_SPEEDUP`` (on a near-tie exact vectors win). ``{"chosen", "candidates"}``.
    """
    candidates = {"exact": {"speedup": exact_speedup(exact), "passed": True}}
    for name, check in approximate.items():
        candidates[name] = {
            "speedup": check.get("speedup"),
            "passed": bool(check.get("passed")),
            "relative_error": check.get("relative_error"),
        }
    best = "exact"
    for name, candidate in candidates.items():
        if name == "exact" or not candidate["passed"] or not candidate["speedup"]:
            continue
        bar = candidates[best]["speedup"] * (EXACT_MIN_SPEEDUP if best == "exact" else 1.0)
        if candidate["speedup"] > bar:
            best = name
    return {"chosen": best, "min_speedup": EXACT_MIN_SPEEDUP, "candidates": candidates}
