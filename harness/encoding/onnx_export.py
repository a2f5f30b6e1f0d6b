"""ONNX export: a model's transformer exported once with ``torch.onnx``, kept in the cache.

Only the transformer (token ids -> token embeddings) is exported. Pooling, Dense and Normalize stay
the model's own sentence-transformers modules, run on onnxruntime's output, so the ONNX path differs
from the torch one in the kernels and nothing else. The graph is traced with eager attention (plain
MatMul/Softmax), which onnxruntime runs faster than a traced SDPA graph.

An export lives in the cache beside the embeddings, keyed by the model's identity (weight hashes)
and loader, the opset, and the torch/transformers versions that produced the graph::

    <cache>/onnx/<model-slug>__<key16>/
        model.onnx         the graph (renamed into place only when complete)
        export.json        key inputs, input names, seconds (written last: "finished")
        model-int8-<key>.onnx   ``--precision int8``: weights quantized one way (``onnx_quantize``)
        int8-<key>.json         how it was quantized, by which onnxruntime (written last)
        model-fused-<key>.onnx  fp32 with onnxruntime's transformer fusions (``onnx_quantize.ensure_fused``)
        fused-<key>.json        the fusion settings and what got fused
        exact-check.json        this model's vectors under the ``exact`` runtime's ONNX choice, compared
                                with torch fp32 (``exact_runtime``; the choice itself is kept per
                                architecture in ``<cache>/onnx/exact-runtime-<arch>__<key16>/``)
        check-<setting>.json    an approximate setting's check against torch fp32 (``runtime_checks``)

When the ``exact`` check chooses torch, the graphs it exported for its candidates are removed again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import warnings
from collections.abc import Iterator
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.core.artifacts import CorruptArtifact, check_files, record_files
from harness.core.cache import EXACT_CHECK, EXPORT_RECORD, CacheLayout, digest_of
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write_json, read_json_or_none

log = logging.getLogger(__name__)

EXPORT_FORMAT = 1
OPSET = 17


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


def package_version(package: str) -> str | None:
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
        "torch": package_version("torch"),
        "transformers": package_version("transformers"),
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
