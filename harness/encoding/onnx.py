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
        model-int8-<key>.onnx   ``--precision int8``: weights quantized one way (``ensure_quantized``)
        int8-<key>.json         how it was quantized, by which onnxruntime (written last)
        model-fused-<key>.onnx  fp32 with onnxruntime's transformer fusions (``ensure_fused``)
        fused-<key>.json        the fusion settings and what got fused
        exact-check.json        the ``exact`` runtime's check for this model (see ``run_exact_check``)
        check-<setting>.json    an approximate setting's check against torch fp32 (``run_approximate_check``)

The ``exact`` check runs once per model: the torch fp32 and ONNX vectors of a fixed sample of texts
are compared and timed, and ``exact`` then means the fastest runtime whose vectors equal torch fp32
within ``EXACT_TOLERANCE``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
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
from harness.encoding.cpu import int8_cpu_class

log = logging.getLogger(__name__)

EXPORT_FORMAT = 1
OPSET = 17
# Largest relative L2 error ||v_onnx - v_torch|| / ||v_torch|| over the sample for ``exact``. ONNX
# Runtime fp32 is ~1e-6 on MiniLM; bf16 is ~1e-2, so the two are far apart.
EXACT_TOLERANCE = 1e-5
EXACT_CHECK_FORMAT = 2
APPROXIMATE_CHECK_FORMAT = 1
# An approximate setting (int8, bf16, fp16) passes its check when no sample vector moves further than
# this from torch fp32 (relative L2; for unit vectors 0.005 is a cosine of 0.9999875). Measured by
# scripts/bench_vector_noise.py (all-MiniLM-L6-v2, scifact, 100 trials of every vector moved by exactly
# this much): median |change in nDCG@10| 0.0006, within 0.001 in 63% of trials, Recall@100 within 0.002
# in 98% (at 0.04: 0.0016, 39%, 55%). No bound promises "within 0.001" on 300 queries: one query
# swapping two documents near its top moves nDCG@10 by about 0.001, and noise of 0.001 already moves it
# further in 11% of trials.
APPROXIMATE_TOLERANCE = 0.005
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

# onnxruntime's dynamic quantization: int8 weights, activations quantized per batch at run time, only
# MatMuls with a constant weight (the attention products of two activations stay fp32). The variants:
#   dynamic          every weight MatMul int8, one weight scale per output channel, 8-bit weights: for
#                    CPUs with an int8 dot product
#   dynamic-7bit     the same with 7-bit weights (``reduce_range``): for CPUs without one, whose 16-bit
#                    pair sums saturate on 8-bit weights (ONNX Runtime's advice)
#   ffn32, ffn32-7bit  the same, leaving each layer's feed-forward output product in fp32: its input,
#                    after GELU, has the outlier activations that one activation scale per batch
#                    quantizes worst (MiniLM on a scifact sample: the largest vector error 0.124 -> 0.091;
#                    no other product moves it more than 0.01). A third of the weights stay fp32.
#   per-tensor       one scale per weight matrix: deliberately poor (MiniLM moves by ~45%)
# and onnxruntime's MatMulNBits with 8-bit weights, one scale per block of 32 (or 128) input rows, at
# accuracy level 4: the activations are quantized to int8 per block of each row too, not one scale per
# batch, so an outlier token or channel costs only its own block (MiniLM on a scifact sample: largest
# vector error 0.033, against 0.124 for ``dynamic``, at ~80% of its speed):
#   nbits8, nbits8-b128
# ``keep_fp32`` holds regular expressions of the node names left in fp32 (BERT-style exports).
# Only the MatMuls: quantize_dynamic would also store the embedding tables in 8 bits (Gather), which
# saves no time (a lookup) yet alone moves all-MiniLM-L6-v2's vectors by 0.036 (relative L2).
_DYNAMIC: dict[str, Any] = {
    "method": "quantize_dynamic",
    "op_types": ["MatMul"],
    "weight_type": "QInt8",
    "per_channel": True,
    "reduce_range": False,
    "keep_fp32": [],
    "extra_options": {"MatMulConstBOnly": True},
}
_FFN_OUTPUT = r"layer\.\d+/output/dense/"
INT8_VARIANTS: dict[str, dict[str, Any]] = {
    "dynamic": _DYNAMIC,
    "dynamic-7bit": {**_DYNAMIC, "reduce_range": True},
    "ffn32": {**_DYNAMIC, "keep_fp32": [_FFN_OUTPUT]},
    "ffn32-7bit": {**_DYNAMIC, "reduce_range": True, "keep_fp32": [_FFN_OUTPUT]},
    "per-tensor": {**_DYNAMIC, "per_channel": False},
    "nbits8": {"method": "matmul_nbits", "bits": 8, "block_size": 32, "symmetric": True, "accuracy_level": 4, "keep_fp32": []},
    "nbits8-b128": {"method": "matmul_nbits", "bits": 8, "block_size": 128, "symmetric": True, "accuracy_level": 4, "keep_fp32": []},
}
# The variant ``--precision int8`` uses on each CPU class (``harness.encoding.cpu.int8_cpu_class``).
# nbits8 on both: its s8 x s8 blocks cannot saturate 16-bit pair sums (|127 * 127 * 2| < 2^15), so it
# needs no 7-bit weights without VNNI; ``dynamic`` without VNNI needs ``dynamic-7bit``.
INT8_DEFAULT_VARIANT = {"vnni": "nbits8", "no-vnni": "nbits8"}


def int8_settings(variant: str, cpu_class: str) -> dict[str, Any]:
    """The quantization settings of an int8 ``variant`` (``auto``: the one for ``cpu_class``)."""
    name = INT8_DEFAULT_VARIANT.get(cpu_class, "nbits8") if variant == "auto" else variant
    if name not in INT8_VARIANTS:
        raise HarnessError(f"unknown int8 variant {variant!r} (use auto, {', '.join(INT8_VARIANTS)})")
    return {"variant": name, **INT8_VARIANTS[name]}


def _nodes_kept_fp32(graph: Path, patterns: list[str]) -> list[str]:
    if not patterns:
        return []
    import onnx

    nodes = onnx.load(str(graph), load_external_data=False).graph.node
    return [node.name for node in nodes if any(re.search(pattern, node.name) for pattern in patterns)]


def _derived_graph(
    graph: Path, kind: str, wanted: dict[str, Any], build: Callable[[Path], dict[str, Any]], failure: str
) -> tuple[Path, dict[str, Any]]:
    """A graph derived from the exported ``graph`` once and kept beside it as ``model-<kind>-<key>.onnx``
    with its record ``<kind>-<key>.json``, keyed by ``wanted``.

    ``build(target)`` writes the derived graph to ``target`` and returns the record's own fields; it runs
    with library warnings muted (quantizer and optimizer chatter), into a temporary file renamed in place,
    and any error becomes one line starting with ``failure``.
    """
    folder = graph.parent
    key = digest_of(wanted)[:16]
    derived, record_path = folder / f"model-{kind}-{key}.onnx", folder / f"{kind}-{key}.json"
    record = read_json_or_none(record_path)
    if derived.is_file() and record is not None and record.get("settings") == wanted:
        return derived, record
    started = time.perf_counter()
    partial = folder / f".model-{kind}-{os.getpid()}.onnx.tmp"
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        fields = build(partial)
        os.replace(partial, derived)
    except Exception as error:
        text = (str(error).strip() or type(error).__name__).splitlines()[0][:300]
        raise HarnessError(f"{failure}: {text}") from error
    finally:
        logging.disable(previous)
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    record = {
        "key": key,
        "settings": wanted,
        **fields,
        "seconds": round(time.perf_counter() - started, 3),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    atomic_write_json(record_path, record)
    return derived, record


def ensure_quantized(graph: Path, settings: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The int8 version of an exported graph with ``settings`` (``int8_settings``), quantized once and
    kept beside it under a name keyed by the settings, the source graph and the quantizer's version.
    """
    wanted = {**settings, "onnxruntime": _version("onnxruntime"), "source_bytes": graph.stat().st_size}

    def quantize(target: Path) -> dict[str, Any]:
        kept = _nodes_kept_fp32(graph, settings["keep_fp32"])
        method = _quantize_nbits if settings["method"] == "matmul_nbits" else _quantize_dynamic
        method(graph, target, settings, kept)
        return {"kept_fp32": len(kept), "bytes": target.stat().st_size}

    return _derived_graph(graph, "int8", wanted, quantize, f"could not quantize {graph} to int8")


def _quantize_dynamic(graph: Path, target: Path, settings: dict[str, Any], kept: list[str]) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(graph),
        str(target),
        weight_type=getattr(QuantType, settings["weight_type"]),
        per_channel=settings["per_channel"],
        reduce_range=settings["reduce_range"],
        nodes_to_exclude=kept,
        op_types_to_quantize=list(settings["op_types"]),
        extra_options=dict(settings["extra_options"]),
    )


def _quantize_nbits(graph: Path, target: Path, settings: dict[str, Any], kept: list[str]) -> None:
    import onnx
    from onnxruntime.quantization import matmul_nbits_quantizer as nbits

    options = {
        "bits": settings["bits"],
        "block_size": settings["block_size"],
        "is_symmetric": settings["symmetric"],
        "accuracy_level": settings["accuracy_level"],
    }
    quantizer = nbits.MatMulNBitsQuantizer(
        onnx.load(str(graph)),
        nodes_to_exclude=kept,
        algo_config=nbits.DefaultWeightOnlyQuantConfig(**options),
        **options,
    )
    quantizer.process()
    quantizer.model.save_model_to_file(str(target), False)


# --------------------------------------------------------------------------------------------
# fp32 with onnxruntime's transformer fusions
# --------------------------------------------------------------------------------------------

# onnxruntime's transformer optimizer fuses each layer's attention into one Attention kernel (no
# padded-key work beyond the mask), LayerNorm + residual into SkipLayerNormalization, and bias + GELU
# into BiasGelu. The exact erf GELU is kept (no tanh approximation), so the vectors stay fp32-equal;
# the exact check times this graph as a third candidate and records whether it wins on this machine.
FUSION_SETTINGS: dict[str, Any] = {"model_type": "bert", "opt_level": 0, "gelu_approximation": False}


def ensure_fused(graph: Path, num_heads: int, hidden_size: int) -> tuple[Path, dict[str, Any]]:
    """The fused fp32 version of an exported graph, optimized once and kept beside it (keyed)."""
    wanted = {
        **FUSION_SETTINGS,
        "num_heads": num_heads,
        "hidden_size": hidden_size,
        "onnxruntime": _version("onnxruntime"),
        "source_bytes": graph.stat().st_size,
    }

    def fuse(target: Path) -> dict[str, Any]:
        from onnxruntime.transformers import optimizer
        from onnxruntime.transformers.fusion_options import FusionOptions

        options = FusionOptions(FUSION_SETTINGS["model_type"])
        options.enable_gelu_approximation = FUSION_SETTINGS["gelu_approximation"]
        optimized = optimizer.optimize_model(
            str(graph),
            model_type=FUSION_SETTINGS["model_type"],
            num_heads=num_heads,
            hidden_size=hidden_size,
            optimization_options=options,
            opt_level=FUSION_SETTINGS["opt_level"],
            use_gpu=False,
        )
        fusions = {name: count for name, count in optimized.get_fused_operator_statistics().items() if count}
        optimized.save_model_to_file(str(target))
        return {"fusions": fusions}

    failure = f"could not fuse {graph} with onnxruntime's transformer optimizer"
    return _derived_graph(graph, "fused", wanted, fuse, failure)


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
        "cpu": int8_cpu_class() if device == "cpu" else None,
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

    Timed by ``_timed_rounds`` (a first, untimed warm-up round); a runner that raises a ``HarnessError``
    (e.g. an export that fails) is recorded as not usable.
    Returns ``{"runtime": chosen, "candidates": {name: {seconds, relative_error, equal, error}}}``.
    """
    results, vectors = _timed_rounds(runners, repeats, clock)
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
        raise HarnessError(f"the precision check could not run torch fp32: {results['reference'].get('error')}")
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
