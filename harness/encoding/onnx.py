"""The onnx runtime: a model's transformer exported once with ``torch.onnx`` and run by onnxruntime.

Only the transformer (token ids -> token embeddings) is exported. Pooling, Dense and Normalize stay
the model's own sentence-transformers modules, run on onnxruntime's output, so the ONNX path differs
from the torch one in the kernels and nothing else. The graph is traced with eager attention (plain
MatMul/Softmax), which onnxruntime runs faster than a traced SDPA graph.

An export lives in the cache beside the embeddings, keyed by the model's identity (weight hashes)
and loader, the opset, and the torch/transformers versions that produced the graph::

    <cache>/onnx/<model-slug>__<key16>/
        model.onnx         the graph (renamed into place only when complete)
        export.json        key inputs, input names, seconds (written last: "finished")
        model-int8.onnx    ``--precision int8``: the graph with weights quantized (``ensure_quantized``)
        int8.json          how it was quantized, by which onnxruntime (written last)
        exact-check.json   the ``exact`` runtime's check for this model (see ``exact_check``)

The ``exact`` check runs once per model: the torch fp32 and ONNX vectors of a fixed sample of texts
are compared and timed, and ``exact`` then means the fastest runtime whose vectors equal torch fp32
within ``EXACT_TOLERANCE``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import warnings
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.artifacts import CorruptArtifact, check_files, record_files
from harness.core.cache import EXACT_CHECK, EXPORT_RECORD, CacheLayout, digest_of
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write_json, read_json_or_none

log = logging.getLogger(__name__)

EXPORT_FORMAT = 1
OPSET = 17
# Largest relative L2 error ||v_onnx - v_torch|| / ||v_torch|| over the sample for ``exact``. ONNX
# Runtime fp32 is ~1e-6 on MiniLM; bf16 is ~1e-2, so the two are far apart.
EXACT_TOLERANCE = 1e-5
EXACT_CHECK_FORMAT = 1
# Another runtime replaces the reference only when this much faster on the sample: on a near-tie the
# reference's own vectors win, and timing noise on a busy machine does not flip the choice.
EXACT_MIN_SPEEDUP = 1.1


def onnxruntime_available() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def require_onnxruntime() -> None:
    if not onnxruntime_available():
        raise HarnessError(
            "the onnx runtime needs onnxruntime: pip install 'beir-harness[onnx]' (or use --runtime torch)"
        )


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------------------------
# Where an export lives
# --------------------------------------------------------------------------------------------


def export_key_inputs(model) -> dict[str, Any]:
    """Everything an exported graph depends on: the model's identity, how it is loaded, the exporter.

    Record settings that never reach the graph (pooling, normalisation, prefixes, max length: the
    sequence axis is dynamic) are left out, so a model is exported and checked once, not once per
    prefix or length variant.
    """
    settings = model.record.vector_settings()
    return {
        "format": EXPORT_FORMAT,
        "model": model.identity,
        "settings": {"kind": settings["kind"], "params": settings["params"]},
        "opset": OPSET,
        "torch": _version("torch"),
        "transformers": _version("transformers"),
    }


def export_folder(cache_dir: str | Path, model) -> tuple[Path, str, dict[str, Any]]:
    """``(folder, key, key inputs)`` of a model's export under ``<cache>/onnx/``."""
    inputs = export_key_inputs(model)
    key = digest_of(inputs)
    return CacheLayout(Path(cache_dir)).onnx_export(model.slug, key), key, inputs


# --------------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------------


def ensure_exported(st_model, model, cache_dir: str | Path) -> tuple[Path, dict[str, Any]]:
    """The model's ONNX graph and its export record, exporting it first if the cache has none."""
    folder, key, inputs = export_folder(cache_dir, model)
    graph, record_path = folder / "model.onnx", folder / EXPORT_RECORD
    record = read_json_or_none(record_path)
    if graph.is_file() and record is not None and record.get("key") == key:
        try:  # exports recorded before file checksums existed carry none: nothing to check
            check_files(folder, record.get("files") or {}, fix="exporting it again")
            return graph, record
        except CorruptArtifact as error:
            log.warning("%s", error)
    log.info("exporting %s to ONNX (once; kept in %s)", model.record.name, folder)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        details = _export(st_model, folder, graph)
    except HarnessError:
        raise
    except Exception as error:  # an architecture the exporter cannot trace, a missing onnx package, ...
        text = (str(error).strip() or type(error).__name__).splitlines()[0][:300]
        raise HarnessError(f"could not export {model.record.name} to ONNX: {text}") from error
    record = {
        "key": key,
        "key_inputs": inputs,
        **details,
        # Checked on every later use: a graph changed or truncated since is exported again.
        "files": {
            name: entry
            for name, entry in record_files(folder).items()
            if name not in (EXPORT_RECORD, EXACT_CHECK)
        },
        "seconds": round(time.perf_counter() - started, 3),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    atomic_write_json(record_path, record)
    return graph, record


def transformer_module(st_model):
    """The sentence-transformers Transformer module whose text forward the ONNX graph replaces."""
    first = list(st_model)[0]
    config = getattr(first, "modality_config", {"text": {"method": "forward"}}).get("text") or {}
    output = config.get("method_output_name", "last_hidden_state")
    inner = getattr(first, "auto_model", None)
    if (
        inner is None
        or config.get("method", "forward") != "forward"
        or output not in ("last_hidden_state", ("last_hidden_state",), ["last_hidden_state"])
        or getattr(first, "module_output_name", "token_embeddings") != "token_embeddings"
    ):
        raise HarnessError(
            f"the onnx runtime supports models whose first module is a text transformer; "
            f"this one starts with {type(first).__name__} (use --runtime torch)"
        )
    return first


def model_input_names(st_model, features: dict[str, Any]) -> list[str]:
    """The tokenizer outputs that the transformer's forward takes, in the tokenizer's order."""
    import inspect

    inner = transformer_module(st_model).auto_model
    accepted = set(inspect.signature(inner.forward).parameters)
    return [name for name, value in features.items() if name in accepted and hasattr(value, "shape")]


def _token_embeddings_module(inner, names: list[str]):
    """``(input_ids, attention_mask, ...) -> last_hidden_state`` as a module the exporter can trace."""
    import torch

    class TokenEmbeddings(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *tensors):
            return self.inner(**dict(zip(names, tensors, strict=True)), return_dict=True).last_hidden_state

    return TokenEmbeddings().eval()


@contextlib.contextmanager
def _attention(inner, implementation: str | None) -> Iterator[None]:
    """Temporarily switch the attention implementation (eager attention is what ORT can fuse)."""
    config = getattr(inner, "config", None)
    previous = getattr(config, "_attn_implementation", None)
    switch = implementation and previous != implementation and hasattr(inner, "set_attn_implementation")
    if switch:
        inner.set_attn_implementation(implementation)
    try:
        yield
    finally:
        if switch:
            inner.set_attn_implementation(previous)


def _export(st_model, folder: Path, graph: Path) -> dict[str, Any]:
    import torch

    inner = transformer_module(st_model).auto_model
    # Two texts of different lengths, so the traced graph sees padding and a real attention mask.
    tokenize = getattr(st_model, "preprocess", None) or st_model.tokenize
    sample = tokenize(["an example sentence to trace the exported graph", "short"])
    names = model_input_names(st_model, sample)
    axes = {name: {0: "batch", 1: "sequence"} for name in [*names, "token_embeddings"]}
    partial = folder / f".model-{os.getpid()}.onnx.tmp"
    try:
        # Eager attention traces to plain MatMul/Softmax, which onnxruntime runs faster than the
        # traced SDPA graph (MiniLM: 20.4 vs 17.8 docs/s, one thread). Fusing it further with
        # onnxruntime's transformer optimizer measured no faster here (19.8), so it is not done.
        with _attention(inner, "eager"), warnings.catch_warnings(), torch.inference_mode():
            # TorchScript-exporter deprecation and tracer notes are not the user's concern.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _token_embeddings_module(inner, names),
                tuple(sample[name] for name in names),
                str(partial),
                input_names=names,
                output_names=["token_embeddings"],
                dynamic_axes=axes,
                opset_version=OPSET,
                dynamo=False,
            )
        os.replace(partial, graph)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return {
        "input_names": names,
        "opset": OPSET,
        "model_type": getattr(inner.config, "model_type", None),
        "attention": "eager",
        "bytes": graph.stat().st_size,
    }


# --------------------------------------------------------------------------------------------
# int8
# --------------------------------------------------------------------------------------------

# onnxruntime's dynamic quantization: int8 weights with one scale per output channel, activations
# quantized per batch at run time, only MatMuls with a constant weight (the attention products of
# two activations stay fp32). Per-tensor weight scales move MiniLM's vectors by 45% (relative L2);
# per-channel by 13%, which on scifact leaves nDCG@10 within 0.001 of fp32 (see the README).
INT8_SETTINGS: dict[str, Any] = {
    "method": "quantize_dynamic",
    "weight_type": "QInt8",
    "per_channel": True,
    "reduce_range": False,
    "extra_options": {"MatMulConstBOnly": True},
}


def ensure_quantized(graph: Path) -> tuple[Path, dict[str, Any]]:
    """The int8 version of an exported graph, quantized once and kept beside it."""
    folder = graph.parent
    quantized, record_path = folder / "model-int8.onnx", folder / "int8.json"
    wanted = {**INT8_SETTINGS, "onnxruntime": _version("onnxruntime"), "source_bytes": graph.stat().st_size}
    record = read_json_or_none(record_path)
    if quantized.is_file() and record is not None and record.get("settings") == wanted:
        return quantized, record
    from onnxruntime.quantization import QuantType, quantize_dynamic

    started = time.perf_counter()
    partial = folder / f".model-int8-{os.getpid()}.onnx.tmp"
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # the quantizer advises "pre-processing" at WARNING on every call
    try:
        quantize_dynamic(
            str(graph),
            str(partial),
            weight_type=getattr(QuantType, INT8_SETTINGS["weight_type"]),
            per_channel=INT8_SETTINGS["per_channel"],
            reduce_range=INT8_SETTINGS["reduce_range"],
            extra_options=dict(INT8_SETTINGS["extra_options"]),
        )
        os.replace(partial, quantized)
    except Exception as error:
        text = (str(error).strip() or type(error).__name__).splitlines()[0][:300]
        raise HarnessError(f"could not quantize {graph} to int8: {text}") from error
    finally:
        logging.disable(previous)
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    record = {
        "settings": wanted,
        "bytes": quantized.stat().st_size,
        "seconds": round(time.perf_counter() - started, 3),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    atomic_write_json(record_path, record)
    return quantized, record


# --------------------------------------------------------------------------------------------
# Inference
# --------------------------------------------------------------------------------------------


class OnnxTransformer:
    """An onnxruntime session over an exported transformer: token features in, token embeddings out.

    Single-threaded by default: the encoder runs one batch per core at once (the session is
    thread-safe and releases the GIL while it runs), which beats one multi-threaded stream on the
    small, cache-friendly batches the encoder makes.
    """

    def __init__(self, graph: str | Path, *, threads: int = 1):
        require_onnxruntime()
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only: ORT's notes about fused shapes are noise here
        try:
            self.session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        except Exception as error:
            raise HarnessError(
                f"{graph}: onnxruntime cannot load the exported model ({str(error).splitlines()[0][:200]}); "
                "`harness cache clear` and rerun"
            ) from error
        self.input_names = [item.name for item in self.session.get_inputs()]

    def __call__(self, features: dict[str, Any]) -> np.ndarray:
        feeds = {}
        for name in self.input_names:
            value = features[name]
            value = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
            feeds[name] = np.ascontiguousarray(value, dtype=np.int64)
        try:
            return self.session.run(None, feeds)[0]
        except Exception as error:  # onnxruntime raises its own Fail/InvalidArgument types
            text = (str(error).strip() or type(error).__name__).splitlines()[0][:300]
            raise HarnessError(
                f"onnxruntime failed on a batch of {len(feeds[self.input_names[0]])}: {text}"
            ) from error


# --------------------------------------------------------------------------------------------
# The ``exact`` runtime
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


def exact_check_path(cache_dir: str | Path, model) -> Path:
    return CacheLayout.exact_check(export_folder(cache_dir, model)[0])


def check_environment(device: str) -> dict[str, Any]:
    """What a recorded check is valid for: another device or library version means a new check.

    Thread counts are left out on purpose: workers that split the cores share the driver's check.
    """
    return {
        "device": device.split(":")[0],
        "onnxruntime": _version("onnxruntime"),
        "torch": _version("torch"),
    }


def load_exact_check(cache_dir: str | Path, model, device: str) -> dict[str, Any] | None:
    """The recorded check for this model, device kind and library versions, if there is one."""
    record = read_json_or_none(exact_check_path(cache_dir, model))
    if record is None or record.get("format") != EXACT_CHECK_FORMAT:
        return None
    if record.get("environment") != check_environment(device):
        return None
    return record


def relative_error(candidate: np.ndarray, reference: np.ndarray) -> float:
    """max over rows of ||candidate - reference|| / ||reference||."""
    norms = np.maximum(np.linalg.norm(reference, axis=1), np.finfo(np.float32).tiny)
    return float((np.linalg.norm(candidate - reference, axis=1) / norms).max())


def run_exact_check(
    runners: dict[str, Callable[[], np.ndarray]],
    *,
    reference: str = "torch",
    repeats: int = 2,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Time each runner on the sample (interleaved, best of ``repeats``) and compare it to the reference;
    choose the fastest runner whose vectors equal the reference's, the reference unless another is at
    least ``EXACT_MIN_SPEEDUP`` times faster.

    The first round is a warm-up and is not timed (it exports the model, builds sessions and kernels).
    A runner that raises a ``HarnessError`` (e.g. an export that fails) is recorded as not usable.
    Returns ``{"runtime": chosen, "candidates": {name: {seconds, relative_error, equal, error}}}``.
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
    if reference not in vectors:
        raise HarnessError(f"the exact check could not run the {reference} reference: {results[reference]}")
    for name, result in results.items():
        if name in vectors:
            error = relative_error(vectors[name], vectors[reference])
            result["relative_error"] = error
            result["equal"] = bool(error <= EXACT_TOLERANCE)
        else:
            result["equal"] = False

    def effective_seconds(name: str) -> float:
        seconds = results[name]["seconds"]
        return seconds if name == reference else seconds * EXACT_MIN_SPEEDUP

    usable = [name for name, result in results.items() if result["equal"]]
    chosen = min(usable, key=effective_seconds)
    return {
        "runtime": chosen,
        "tolerance": EXACT_TOLERANCE,
        "min_speedup": EXACT_MIN_SPEEDUP,
        "candidates": results,
    }


def save_exact_check(
    cache_dir: str | Path, model, device: str, outcome: dict[str, Any], sample_size: int, threads: int
) -> dict[str, Any]:
    """Record the check's outcome; ``threads`` is the torch thread count the timed runs used."""
    record = {
        "format": EXACT_CHECK_FORMAT,
        "model": model.record.name,
        "environment": check_environment(device),
        "threads": threads,
        "sample_size": sample_size,
        **outcome,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    atomic_write_json(exact_check_path(cache_dir, model), record)
    return record
