"""Choosing how an encoder computes, before it is built: ``--runtime``, ``--precision`` and ``--int8``
in, an immutable ``RuntimeChoice`` out (``build_encoder`` then builds the ``Encoder`` with it).

* ``torch`` or ``onnx`` fp32: nothing to check.
* An approximate precision (int8, bf16, fp16): its check against torch fp32 is read from the cache, or
  run on the fixed sample and recorded; the verdict is part of the cache key, and a setting asked for
  that fails it gets a warning naming its error.
* ``exact``: the runtime recorded for this architecture on this machine (``exact_runtime``). With none
  recorded the choice is pending, and ``settle_exact`` runs the check when the encoder is about to
  compute its first batch: an ``exact`` key does not depend on the check, so a run that finds every
  vector cached loads no model and times nothing (the encoder is built with ``settle_exact`` for that,
  and calls nothing else here). What the check built and the encoder does not compute with is freed
  before the first batch: onnx sessions, their scratch memory, graphs on disk.
* ``fast``: the exact check and every candidate's check (read or run), and the fastest that passes.

The checks time encoders built here for the purpose, which share one loaded model; the choice is
handed over with the model its checks loaded, so the encoder does not load it again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.cache import EXACT_CHECK, EXPORT_RECORD
from harness.core.errors import HarnessError
from harness.core.paths import default_cache_dir
from harness.encoding import exact_runtime, runtime_checks
from harness.encoding import runtime as runtimes
from harness.encoding.cpu import int8_cpu_class
from harness.encoding.encoder import Encoder, Settle, check_encoder_arguments
from harness.encoding.exact_runtime import CANDIDATES
from harness.encoding.loaded_model import LoadedModel
from harness.encoding.onnx_export import export_folder, onnxruntime_available
from harness.encoding.onnx_quantize import int8_settings
from harness.encoding.runtime import (
    FAST,
    RuntimeChoice,
    check_int8_option,
    current_torch_threads,
    pick_device,
    resolve_runtime,
)
from harness.models.resolve import ResolvedModel

log = logging.getLogger(__name__)

TORCH_FP32 = RuntimeChoice("torch", "float32", "torch")


@dataclass(frozen=True)
class EncoderSetup:
    """Everything an encoder is built with besides its choice; the checks time encoders built from it."""

    model: ResolvedModel
    device: str
    batch_size: int
    cache_dir: Path
    threads: int

    def loaded(self, dtype: str, quantization: dict[str, Any] | None = None) -> LoadedModel:
        return LoadedModel(self.model, self.device, dtype, self.cache_dir, quantization)

    def encoder(
        self,
        choice: RuntimeChoice,
        loaded: LoadedModel,
        settle: Settle | None = None,
        encoder_class: type[Encoder] = Encoder,
    ) -> Encoder:
        return encoder_class(
            self.model,
            choice,
            device=self.device,
            batch_size=self.batch_size,
            cache_dir=self.cache_dir,
            threads=self.threads,
            loaded=loaded,
            settle=settle,
        )


def encoder_setup(
    model: ResolvedModel,
    device: str | None = None,
    batch_size: int = 64,
    cache_dir: str | Path | None = None,
    threads: int | None = None,
) -> EncoderSetup:
    """The setup of an encoder, its arguments checked and defaults filled in (before any check runs)."""
    check_encoder_arguments(model, batch_size, threads)
    return EncoderSetup(
        model,
        pick_device(device),
        batch_size,
        Path(cache_dir) if cache_dir is not None else default_cache_dir(),
        threads if threads is not None else current_torch_threads(),
    )


def build_encoder(
    model: ResolvedModel,
    *,
    device: str | None = None,
    batch_size: int = 64,
    runtime: str | None = None,
    precision: str | None = None,
    cache_dir: str | Path | None = None,
    threads: int | None = None,
    int8: str = "auto",
    encoder_class: type[Encoder] = Encoder,
) -> Encoder:
    """An encoder that computes as these options ask: the choice is made first (its checks read from
    the cache, or run and recorded), then handed to the encoder with the model the checks loaded.

    ``threads``: torch threads the encoder (and its checks) compute with (default: torch's count now).
    ``int8``: the quantization variant of ``--precision int8`` (``auto``: the one for this CPU; see
    ``harness.encoding.onnx_quantize.INT8_VARIANTS``). ``encoder_class``: an ``Encoder`` subclass to build.
    A dual-encoder record (``query_model_id``) gets a second encoder, for its queries, as
    ``Encoder.query_encoder``; a one-model record builds and loads nothing more.
    """
    setup = encoder_setup(model, device, batch_size, cache_dir, threads)
    choice, loaded = choose_runtime(setup, runtime, precision, int8)
    settle = None if choice.settled else partial(settle_exact, setup)
    encoder = setup.encoder(choice, loaded, settle, encoder_class)
    if model.record.is_dual_encoder:
        # The query model gets its own choice (its checks are its own weights'), made the same way.
        query_options = {"runtime": runtime, "precision": precision, "int8": int8}
        encoder.query_encoder = build_encoder(
            model.query_side(),
            device=device,
            batch_size=batch_size,
            cache_dir=cache_dir,
            threads=threads,
            encoder_class=encoder_class,
            **query_options,
        )
    return encoder


def choose_runtime(
    setup: EncoderSetup, runtime: str | None = None, precision: str | None = None, int8: str = "auto"
) -> tuple[RuntimeChoice, LoadedModel]:
    """The choice for these options, with the loaded model its checks left (to encode with)."""
    asked, dtype = resolve_runtime(setup.model, setup.device, runtime, precision)
    check_int8_option(dtype, int8)
    if dtype == FAST:
        return _choose_fast(setup, int8)
    quantization = _quantization(dtype, int8)
    loaded = setup.loaded(dtype, quantization)
    if asked == "exact":
        return recorded_exact(setup), loaded
    choice = RuntimeChoice(asked, dtype, asked, quantization)
    if choice.approximate:
        choice = _checked(setup, choice, loaded, warn=True)
    return choice, loaded


def _quantization(dtype: str, int8: str) -> dict[str, Any] | None:
    return int8_settings(int8, int8_cpu_class()) if dtype == "int8" else None


# ---- exact ---------------------------------------------------------------------------------------


def recorded_exact(setup: EncoderSetup) -> RuntimeChoice:
    """``exact`` as the cache records it for this architecture and machine (``exact_runtime``); pending
    when nothing is recorded, or when an ONNX choice was timed on another checkpoint and this one's
    vectors are not compared yet.
    """
    check = exact_runtime.load_choice(setup.cache_dir, setup.model, setup.device)
    if check is None:
        return RuntimeChoice("exact", "float32")
    active = check["runtime"]
    if active != exact_runtime.REFERENCE:
        verified = exact_runtime.load_verification(setup.cache_dir, setup.model, check)
        if verified is None:
            return RuntimeChoice("exact", "float32")
        check = {**check, "verified": verified}
        active = active if verified["equal"] else exact_runtime.REFERENCE
    log.info("exact runtime for %s: %s", setup.model.record.name, active)
    return RuntimeChoice("exact", "float32", active, exact_check=check)


def settle_exact(setup: EncoderSetup, loaded: LoadedModel) -> RuntimeChoice:
    """``exact`` settled: the recorded choice, else that of a check run now on ``loaded`` (the fp32 model
    the encoder then computes with) and recorded; a recorded ONNX choice this checkpoint was not timed
    with first has its vectors compared. Whatever the check built and the encoder does not compute
    with (sessions, graphs on disk) is freed before it returns.
    """
    choice = recorded_exact(setup)
    if choice.settled:
        return choice
    check = exact_runtime.load_choice(setup.cache_dir, setup.model, setup.device)
    if check is None:
        check = _run_exact_check(setup, loaded)
        if "key" not in check:  # not recorded: no onnxruntime, or not a CPU
            return RuntimeChoice("exact", "float32", check["runtime"], exact_check=check)
    if (
        check["runtime"] != exact_runtime.REFERENCE
        and exact_runtime.load_verification(setup.cache_dir, setup.model, check) is None
    ):
        _verify(setup, loaded, check)
    choice = recorded_exact(setup)
    loaded.keep_only(choice.active)
    return choice


# Which onnx session (plain or fused) each exact candidate computes with.
_FUSED = {"onnx": False, "onnx-fused": True}


def _run_exact_check(setup: EncoderSetup, loaded: LoadedModel) -> dict[str, Any]:
    """Torch fp32 against onnx (plain and fused) on the fixed sample, in interleaved timed rounds
    (``exact_runtime.run_exact_check``); recorded when it ran. The graphs are built first, one at a
    time, each giving its scratch memory back, then the rounds; a candidate out of the running has its
    session freed at once, and graphs made for runtimes not chosen are removed from the cache.
    """
    if setup.device != "cpu" or not onnxruntime_available():
        why = "onnxruntime is not installed" if setup.device == "cpu" else "onnx runs on the CPU only"
        return {"runtime": exact_runtime.REFERENCE, "reason": why}
    sample = runtime_checks.check_sample(setup.model.record)
    log.info("timing which runtime computes %s's torch fp32 vectors fastest", setup.model.record.name)
    folder = export_folder(setup.cache_dir, setup.model)[0]
    kept_before = _files(folder)
    probes = {name: setup.encoder(RuntimeChoice("exact", "float32", name), loaded) for name in CANDIDATES}
    runners = {name: _prepared_runner(probe, loaded, sample) for name, probe in probes.items()}
    outcome = exact_runtime.run_exact_check(runners, on_drop=partial(_free_session, loaded))
    del probes, runners
    check = exact_runtime.save_choice(
        setup.cache_dir, setup.model, setup.device, outcome, len(sample), setup.threads
    )
    chosen = check["runtime"]
    if chosen != exact_runtime.REFERENCE:
        error = outcome["candidates"][chosen]["relative_error"]
        exact_runtime.save_verification(setup.cache_dir, setup.model, check, error)
    _remove_unneeded_graphs(folder, kept_before, chosen)
    return check


def _prepared_runner(probe: Encoder, loaded: LoadedModel, sample: list[str]) -> Callable[[], np.ndarray]:
    """``probe`` encoding the sample; its graph is built now (export, fusion: the check's largest
    allocations, each given back before the next), or the error that stopped it is raised when it runs.
    """
    runtime = probe.choice.active
    if runtime in _FUSED:
        try:
            loaded.graph(fused=_FUSED[runtime])
        except HarnessError as error:
            failure = error

            def fail() -> np.ndarray:
                raise failure

            return fail
    batches = list(probe.tokenized_batches(sample))
    return partial(probe.encode_batches, batches, len(sample))


def _free_session(loaded: LoadedModel, dropped: str) -> None:
    """Free the onnx session of a candidate out of the running (keeping the other one)."""
    if dropped in _FUSED:
        loaded.drop_sessions(keep=not _FUSED[dropped])


def _verify(setup: EncoderSetup, loaded: LoadedModel, check: dict[str, Any]) -> dict[str, Any]:
    """This checkpoint's sample vectors under ``check``'s ONNX runtime against torch fp32, recorded; a
    checkpoint whose vectors differ (or cannot be computed) computes with torch, its graphs removed.
    """
    runtime = check["runtime"]
    log.info("comparing %s's vectors on %s with torch fp32", setup.model.record.name, runtime)
    folder = export_folder(setup.cache_dir, setup.model)[0]
    kept_before = _files(folder)
    sample = runtime_checks.check_sample(setup.model.record)
    reference = setup.encoder(TORCH_FP32, loaded)
    candidate = setup.encoder(RuntimeChoice("exact", "float32", runtime), loaded)
    batches = list(reference.tokenized_batches(sample))
    try:
        error = runtime_checks.relative_error(
            candidate.encode_batches(batches, len(sample)), reference.encode_batches(batches, len(sample))
        )
        verified = exact_runtime.save_verification(setup.cache_dir, setup.model, check, error)
    except HarnessError as failure:
        verified = exact_runtime.save_verification(setup.cache_dir, setup.model, check, None, str(failure))
    if not verified["equal"]:
        _remove_unneeded_graphs(folder, kept_before, exact_runtime.REFERENCE)
    return verified


def _files(folder: Path) -> set[str]:
    return {path.name for path in folder.iterdir()} if folder.is_dir() else set()


def _needed(name: str, chosen: str) -> bool:
    """Whether a file of an export folder is one ``chosen`` computes with (or the verification record)."""
    if name == EXACT_CHECK:
        return True
    if chosen == exact_runtime.REFERENCE:
        return False
    if name in ("model.onnx", EXPORT_RECORD):
        return True
    return chosen == "onnx-fused" and name.startswith(("model-fused-", "fused-"))


def _remove_unneeded_graphs(folder: Path, kept_before: set[str], chosen: str) -> None:
    """Remove what the check added to the export folder and ``chosen`` does not compute with: every
    graph when torch computes (and the folder, when nothing else is in it), the fused one for onnx.
    """
    for name in _files(folder) - kept_before:
        if not _needed(name, chosen):
            (folder / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty: other records or graphs live there
        folder.rmdir()


# ---- approximate precisions ----------------------------------------------------------------------


def _checked(setup: EncoderSetup, choice: RuntimeChoice, loaded: LoadedModel, *, warn: bool) -> RuntimeChoice:
    """``choice`` with its check against torch fp32: recorded, or run now and recorded. A setting that
    fails gets a warning naming its measured error (``warn``: it is what computes the vectors, not a
    candidate ``--precision fast`` weighs).
    """
    setting = choice.check_setting()
    check = runtime_checks.load_approximate_check(setup.cache_dir, setup.model, setup.device, setting)
    if check is None:
        check = _run_approximate_check(setup, choice, loaded)
    if warn and not check.get("passed"):
        log.warning(
            "%s moves %s's vectors by up to %s (relative L2; lowest cosine %s) against torch fp32 "
            "on the check sample, above the %s bound: expect nDCG@10 to move by more than 0.001 "
            "(scripts/bench_vector_noise.py measures how much; --precision fast only picks a "
            "setting that passes)",
            choice.label,
            setup.model.record.name,
            check.get("relative_error", check.get("error")),
            check.get("lowest_cosine"),
            check.get("tolerance"),
        )
    return replace(choice, precision_check=check)


def _run_approximate_check(setup: EncoderSetup, choice: RuntimeChoice, loaded: LoadedModel) -> dict[str, Any]:
    """The setting against torch fp32 (same weights where they can be shared) on the fixed sample."""
    sample = runtime_checks.check_sample(setup.model.record)
    candidate = setup.encoder(choice, loaded)
    batches = list(candidate.tokenized_batches(sample))
    reference = setup.encoder(TORCH_FP32, loaded.for_precision("float32"))
    log.info("checking %s against torch fp32 for %s", choice.label, setup.model.record.name)
    outcome = runtime_checks.run_approximate_check(
        partial(candidate.encode_batches, batches, len(sample)),
        partial(reference.encode_batches, batches, len(sample)),
    )
    return runtime_checks.save_approximate_check(
        setup.cache_dir,
        setup.model,
        setup.device,
        choice.check_setting(),
        outcome,
        len(sample),
        setup.threads,
    )


# ---- fast ----------------------------------------------------------------------------------------


def fast_candidates(device: str) -> list[tuple[str, str]]:
    """The approximate settings (runtime, precision) ``fast`` weighs against ``exact`` on ``device``."""
    import torch

    if device == "cpu":
        candidates = [("onnx", "int8")] if onnxruntime_available() else []
        return candidates + ([("torch", "bf16")] if runtimes.cpu_has_native_bf16() else [])
    candidates = [("torch", "fp16")]
    if device.startswith("cuda") and torch.cuda.is_bf16_supported():
        candidates.append(("torch", "bf16"))
    return candidates


def _choose_fast(setup: EncoderSetup, int8: str) -> tuple[RuntimeChoice, LoadedModel]:
    """``--precision fast``: settle ``exact``, read or run every candidate's check, and take the
    fastest setting that passes (``runtime_checks.choose_fast``), with the model its check loaded.
    """
    exact_loaded = setup.loaded("float32")
    exact = settle_exact(setup, exact_loaded)
    options = {"exact": (exact, exact_loaded)}
    checks: dict[str, dict[str, Any]] = {}
    for runtime, precision in fast_candidates(setup.device):
        asked, dtype = resolve_runtime(setup.model, setup.device, runtime, precision)
        quantization = _quantization(dtype, int8 if dtype == "int8" else "auto")
        loaded = exact_loaded.for_precision(dtype, quantization)
        candidate = _checked(setup, RuntimeChoice(asked, dtype, asked, quantization), loaded, warn=False)
        options[candidate.label] = (candidate, loaded)
        checks[candidate.label] = candidate.precision_check
    fast = runtime_checks.choose_fast(exact.exact_check or {}, checks)
    chosen, loaded = options[fast["chosen"]]
    weighed = "; ".join(
        f"{label}: {'pass' if check.get('passed') else 'fail'}, error {check.get('relative_error')}"
        for label, check in checks.items()
    )
    log.info(
        "--precision fast for %s: %s (%s)", setup.model.record.name, chosen.label, weighed or "no candidates"
    )
    return replace(chosen, fast=fast), loaded
