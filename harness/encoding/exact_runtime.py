"""The ``exact`` runtime: which runtime computes torch fp32's vectors fastest here, decided so that
timing noise cannot flip it, and recorded once per architecture.

* Timing: after one untimed warm-up round (it exports, fuses, builds sessions, and its vectors are
  compared with torch's), the candidates whose vectors equal torch fp32 encode the fixed sample in
  turn, the order rotated every round, for at least ``MIN_ROUNDS`` rounds and until each has
  ``MIN_SECONDS`` of timed work (``MAX_ROUNDS`` at most). A candidate whose median is no faster than
  torch's (round by round) after ``DROP_AFTER`` rounds cannot win: it stops being timed, its session freed.
* The margin rule (``wins``): walking the candidates simplest first (torch, onnx, onnx-fused), a runtime
  replaces the one chosen so far only when the share of its time it saves, compared round by round,
  has a median that exceeds its spread (interquartile range over the rounds) by more than ``MIN_WIN``;
  inside the noise the simpler one stays.
* Reuse: the choice is keyed by the transformer's architecture and shapes (its config, less training
  settings), the record's max length, the CPU model and the library versions, not by the weights, so
  another checkpoint of the same architecture reuses it (``<cache>/onnx/exact-runtime-...__<key16>/``).
  A checkpoint that computes with an ONNX choice it did not time has its own vectors compared with
  torch's once (the verification, kept beside its export); one whose vectors differ computes with torch.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.cache import CacheLayout, digest_of, safe_name
from harness.core.errors import HarnessError, InputError
from harness.core.fileio import atomic_write_json, read_json, read_json_or_none
from harness.encoding.cpu import cpu_model
from harness.encoding.memory import trim_heap
from harness.encoding.onnx_export import export_folder, package_version
from harness.encoding.runtime_checks import check_environment, relative_error

# The runtimes weighed, simplest first: torch is the reference and the fallback.
CANDIDATES = ("torch", "onnx", "onnx-fused")
REFERENCE = CANDIDATES[0]
# Largest relative L2 error ||v - v_torch|| / ||v_torch|| over the sample for ``exact``. ONNX Runtime
# fp32 is ~1e-6 on MiniLM; bf16 is ~1e-2, so the two are far apart.
TOLERANCE = 1e-5
FORMAT = 3
# How much work decides: the 32-text sample takes MiniLM ~0.6 s on 2 cores, so 6 rounds give each
# candidate over 3 s of timed work spread over the whole check, which the load of a busy machine then
# reaches more evenly than one timing of 32 texts.
MIN_ROUNDS = 6
MAX_ROUNDS = 12
MIN_SECONDS = 3.0
DROP_AFTER = 3
# A win must exceed its spread by this share of the simpler runtime's time. Simulated (6 rounds, the
# drop round included): with every run off by up to +-5%, a tie never picks the other runtime and a 20%
# win is taken 99% of the time; at +-15%, a tie flips 0.1% of the time, a 20% win is taken 44%, a 30%
# win 93%. At 5% instead, three real checks of MiniLM on a 2-core EPYC (ONNX Runtime saving 9-12% a
# round, a few rounds hit by other jobs) chose onnx, onnx, torch; at 10% all three keep torch.
MIN_WIN = 0.10
RULE = {
    "min_rounds": MIN_ROUNDS,
    "max_rounds": MAX_ROUNDS,
    "min_seconds": MIN_SECONDS,
    "drop_after": DROP_AFTER,
    "min_win": MIN_WIN,
}
# Config entries that change no forward pass at inference (training settings, bookkeeping): two
# checkpoints that differ only in these share one runtime choice.
_NOT_ARCHITECTURE = frozenset(
    {
        "_name_or_path",
        "architectures",
        "transformers_version",
        "torch_dtype",
        "dtype",
        "id2label",
        "label2id",
        "gradient_checkpointing",
        "use_cache",
        "initializer_range",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "classifier_dropout",
        "finetuning_task",
        "problem_type",
    }
)


# ---- timing and the margin rule ------------------------------------------------------------------


def paired_gain(candidate: Sequence[float], incumbent: Sequence[float]) -> tuple[float, float] | None:
    """The share of the incumbent's time the candidate saves, compared round by round (each round ran
    both side by side, under the same load): ``(median, spread)`` over the rounds both ran, the spread
    being the interquartile range; None when they share fewer than two rounds.
    """
    gains = [(slow - fast) / slow for fast, slow in zip(candidate, incumbent, strict=False) if slow > 0]
    if len(gains) < 2:
        return None
    lower, median, upper = statistics.quantiles(gains, n=4, method="inclusive")
    return median, upper - lower


def wins(candidate: Sequence[float], incumbent: Sequence[float]) -> bool:
    """The margin rule: ``candidate``'s rounds beat ``incumbent``'s when the median share of time saved
    exceeds its spread by more than ``MIN_WIN``.
    """
    gain = paired_gain(candidate, incumbent)
    return gain is not None and gain[0] - gain[1] > MIN_WIN


def choose(candidates: dict[str, dict[str, Any]], order: Sequence[str] = CANDIDATES) -> str:
    """The margin rule over ``order`` (simplest first): the first is kept unless a later runtime whose
    vectors are equal ``wins`` against the one chosen so far (``{name: {"rounds", "equal"}}``).
    """
    names = [name for name in order if name in candidates]
    chosen = names[0]
    for name in names[1:]:
        if candidates[name].get("equal") and wins(candidates[name]["rounds"], candidates[chosen]["rounds"]):
            chosen = name
    return chosen


def _summary(rounds: list[float], reference: list[float]) -> dict[str, Any]:
    gain = paired_gain(rounds, reference)
    return {
        "seconds": round(statistics.median(rounds), 4) if rounds else None,
        "rounds": [round(seconds, 4) for seconds in rounds],
        "gain": None if gain is None else {"median": round(gain[0], 4), "spread": round(gain[1], 4)},
    }


def _warm_up(runners: dict[str, Callable[[], np.ndarray]], reference: str) -> dict[str, dict[str, Any]]:
    """Run every runner once, untimed (the first onnx run exports and builds its session), and compare
    its vectors with the reference's. A runner that raises a ``HarnessError`` is recorded with it.
    """
    results: dict[str, dict[str, Any]] = {}
    vectors: dict[str, np.ndarray] = {}
    for name, runner in runners.items():
        try:
            vectors[name] = runner()
            results[name] = {}
        except HarnessError as error:
            results[name] = {"error": str(error), "equal": False}
        trim_heap()
    if reference not in vectors:
        raise HarnessError(
            f"the exact check could not run the {reference} reference: {results[reference]['error']}"
        )
    for name, computed in vectors.items():
        error = relative_error(computed, vectors[reference])
        results[name].update(relative_error=error, equal=bool(error <= TOLERANCE))
    return results


def _round_order(running: list[str], round_number: int) -> list[str]:
    """The candidates in the order of this round: rotated by one every round, so none always runs first."""
    shift = round_number % len(running)
    return running[shift:] + running[:shift]


def run_exact_check(
    runners: dict[str, Callable[[], np.ndarray]],
    *,
    reference: str = REFERENCE,
    clock: Callable[[], float] = time.perf_counter,
    on_drop: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Time the runners in interleaved rounds and choose by the margin rule (``choose``).

    ``runners`` maps each runtime (in ``choose``'s order, simplest first) to a function that encodes the
    sample. ``on_drop(name)`` is called once a candidate is out of the running (vectors not equal, an
    error, or no faster than the reference after ``DROP_AFTER`` rounds), so its session can be freed.
    Returns ``{"runtime", "rounds", "rule", "tolerance", "candidates": {name: {seconds (median), rounds,
    gain (over the reference: median and spread), relative_error, equal[, error][, dropped_after]}}}``.
    """
    results = _warm_up(runners, reference)
    running = [name for name in runners if results[name]["equal"]]
    drop = on_drop or (lambda name: None)
    for name in runners:
        if name not in running:
            drop(name)
    rounds: dict[str, list[float]] = {name: [] for name in runners}

    def more_rounds(done: int) -> bool:
        if len(running) < 2 or done >= MAX_ROUNDS:
            return False
        return done < MIN_ROUNDS or any(sum(rounds[name]) < MIN_SECONDS for name in running)

    done = 0
    while more_rounds(done):
        for name in _round_order(running, done):
            started = clock()
            runners[name]()
            rounds[name].append(clock() - started)
            trim_heap()  # what one runtime freed is not left for the next to grow past (untimed)
        done += 1
        if done == DROP_AFTER:
            for name in [name for name in running if name != reference]:
                gain = paired_gain(rounds[name], rounds[reference])
                if gain is not None and gain[0] <= 0:  # no faster than torch: cannot win by the margin
                    running.remove(name)
                    results[name]["dropped_after"] = done
                    drop(name)
    candidates = {
        name: {**_summary(rounds[name], rounds[reference] if name != reference else []), **results[name]}
        for name in runners
    }
    return {
        "runtime": choose(candidates, list(runners)),
        "rounds": done,
        "rule": RULE,
        "tolerance": TOLERANCE,
        "candidates": candidates,
    }


# ---- what a choice is keyed by -------------------------------------------------------------------


def _transformer_config(source: str) -> dict[str, Any] | None:
    """The transformers config of a model folder's transformer (a sentence-transformers folder names
    the transformer's subfolder in ``modules.json``; nearly always the folder itself).
    """
    if not source:
        return None
    folder = Path(source)
    try:
        modules = read_json(folder / "modules.json")
        folder = folder / str(modules[0].get("path") or "")
    except (InputError, LookupError, AttributeError, TypeError):
        pass  # a plain transformers folder
    return read_json_or_none(folder / "config.json")


def architecture(model) -> dict[str, Any] | None:
    """What the forward pass's speed depends on: the transformer's config less training settings and
    bookkeeping (None when the folder has no readable config: the choice is then the model's own).
    """
    config = _transformer_config(model.source)
    if config is None:
        return None
    return {
        key: value
        for key, value in sorted(config.items())
        if key not in _NOT_ARCHITECTURE and value is not None
    }


def choice_key_inputs(model, device: str) -> dict[str, Any]:
    """Everything a recorded choice is valid for: architecture and shapes, max length, this CPU and the
    library versions, the candidates and the rule. Weights are not in it: checkpoints share it.
    """
    shapes = architecture(model)
    return {
        "format": FORMAT,
        "architecture": shapes if shapes is not None else {"model": model.identity},
        "max_length": model.record.max_length,
        "environment": {
            **check_environment(device),
            "cpu_model": cpu_model() if device == "cpu" else None,
            "transformers": package_version("transformers"),
        },
        "candidates": list(CANDIDATES),
        "tolerance": TOLERANCE,
        "rule": RULE,
    }


def choice_path(cache_dir: str | Path, model, device: str) -> Path:
    """Where the choice for ``model``'s architecture on this machine is kept."""
    inputs = choice_key_inputs(model, device)
    shapes = inputs["architecture"]
    if "model" in shapes:
        name = f"exact-runtime-{model.slug}"
    else:
        name = "exact-runtime-" + "-".join(
            str(shapes[key]) for key in ("model_type", "num_hidden_layers", "hidden_size") if key in shapes
        )
    return CacheLayout.exact_check(
        CacheLayout(Path(cache_dir)).onnx_export(safe_name(name), digest_of(inputs))
    )


def load_choice(cache_dir: str | Path, model, device: str) -> dict[str, Any] | None:
    """The recorded choice for this architecture, machine and library versions, if there is one."""
    record = read_json_or_none(choice_path(cache_dir, model, device))
    if record is None or record.get("format") != FORMAT:
        return None
    return record if record.get("key_inputs") == choice_key_inputs(model, device) else None


def save_choice(
    cache_dir: str | Path, model, device: str, outcome: dict[str, Any], sample_size: int, threads: int
) -> dict[str, Any]:
    """Record the check's outcome; ``threads`` is the torch thread count the timed runs used."""
    inputs = choice_key_inputs(model, device)
    record = {
        "format": FORMAT,
        "key": digest_of(inputs),
        "key_inputs": inputs,
        "measured_on": model.record.name,
        "threads": threads,
        "sample_size": sample_size,
        **outcome,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    atomic_write_json(choice_path(cache_dir, model, device), record)
    return record


# ---- one checkpoint's vectors under a choice it did not time ------------------------------------


def verification_path(cache_dir: str | Path, model) -> Path:
    """Beside the model's export: its vectors under the chosen ONNX runtime, compared with torch's."""
    return CacheLayout.exact_check(export_folder(cache_dir, model)[0])


def load_verification(cache_dir: str | Path, model, choice: dict[str, Any]) -> dict[str, Any] | None:
    """The model's recorded comparison under ``choice``'s runtime, if it was made under this choice."""
    record = read_json_or_none(verification_path(cache_dir, model))
    if record is None or record.get("format") != FORMAT:
        return None
    return (
        record
        if (record.get("choice"), record.get("runtime")) == (choice["key"], choice["runtime"])
        else None
    )


def save_verification(
    cache_dir: str | Path, model, choice: dict[str, Any], error: float | None, failure: str | None = None
) -> dict[str, Any]:
    """Record how far the model's vectors under ``choice``'s runtime are from torch fp32 (or why they
    could not be computed); ``equal`` says whether it computes with that runtime.
    """
    record = {
        "format": FORMAT,
        "model": model.record.name,
        "choice": choice["key"],
        "runtime": choice["runtime"],
        "relative_error": error,
        "equal": error is not None and error <= TOLERANCE,
        **({"error": failure} if failure else {}),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    atomic_write_json(verification_path(cache_dir, model), record)
    return record
