"""Graphs derived from an export, each made once and kept beside it: int8 versions (``--precision
int8``) and the fp32 graph with onnxruntime's transformer fusions (a candidate of the ``exact`` check).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.core.cache import digest_of
from harness.core.errors import HarnessError
from harness.core.fileio import atomic_write_json, read_json_or_none
from harness.encoding.onnx_export import package_version

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
    "nbits8": {
        "method": "matmul_nbits",
        "bits": 8,
        "block_size": 32,
        "symmetric": True,
        "accuracy_level": 4,
        "keep_fp32": [],
    },
    "nbits8-b128": {
        "method": "matmul_nbits",
        "bits": 8,
        "block_size": 128,
        "symmetric": True,
        "accuracy_level": 4,
        "keep_fp32": [],
    },
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
    wanted = {**settings, "onnxruntime": package_version("onnxruntime"), "source_bytes": graph.stat().st_size}

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
        "onnxruntime": package_version("onnxruntime"),
        "source_bytes": graph.stat().st_size,
    }

    def fuse(target: Path) -> dict[str, Any]:
        optimized = _fused_model(graph, num_heads, hidden_size)
        fusions = {name: count for name, count in optimized.get_fused_operator_statistics().items() if count}
        optimized.save_model_to_file(str(target))
        return {"fusions": fusions}

    failure = f"could not fuse {graph} with onnxruntime's transformer optimizer"
    return _derived_graph(graph, "fused", wanted, fuse, failure)


# Weights above this size are left out of the copies shape inference works on: it needs their shapes,
# never their values (those it reads, e.g. a Reshape's target shape or a bias it folds, are small).
SHAPES_ONLY_ABOVE_BYTES = 64 * 1024


def _fused_model(graph: Path, num_heads: int, hidden_size: int):
    """onnxruntime's transformer optimizer on ``graph`` (``FUSION_SETTINGS``), with shape inference run
    on copies without the large weights (``_shapes_only``): the fusions infer shapes several times and
    keep each copy, which with the weights in them held ~4x the graph (MiniLM: +540 MB, against +175).
    Should shape inference fail on such a copy, the optimizer's own way runs instead (same graph).
    """
    import onnx
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    options = FusionOptions(FUSION_SETTINGS["model_type"])
    options.enable_gelu_approximation = FUSION_SETTINGS["gelu_approximation"]
    model_class = optimizer.MODEL_TYPES[FUSION_SETTINGS["model_type"]][0]

    class ShapesWithoutWeights(model_class):
        def infer_runtime_shape(self, dynamic_axis_mapping=None, update=False):
            if self.enable_shape_infer and (self.shape_infer_helper is None or update):
                from shape_infer_helper import SymbolicShapeInferenceHelper  # onnxruntime.transformers' path

                self.shape_infer_helper = SymbolicShapeInferenceHelper(_shapes_only(self.model))
            return super().infer_runtime_shape(dynamic_axis_mapping or {}, update=False)

    fused = ShapesWithoutWeights(onnx.load(str(graph)), num_heads, hidden_size)
    fused.optimize(options)
    if not fused.enable_shape_infer:  # it failed on a copy without weights: the optimizer's own way
        del fused
        return optimizer.optimize_model(
            str(graph),
            model_type=FUSION_SETTINGS["model_type"],
            num_heads=num_heads,
            hidden_size=hidden_size,
            optimization_options=options,
            opt_level=FUSION_SETTINGS["opt_level"],
            use_gpu=False,
        )
    fused.topological_sort()
    return fused


def _shapes_only(model):
    """A copy of ``model`` whose initializers above ``SHAPES_ONLY_ABOVE_BYTES`` keep their name, type
    and shape but no values (marked external, never loaded): enough for shape inference.
    """
    import onnx

    lean = onnx.ModelProto()
    lean.ir_version = model.ir_version
    lean.opset_import.extend(model.opset_import)
    lean.functions.extend(model.functions)
    graph, source = lean.graph, model.graph
    graph.name = source.name
    for field in ("node", "input", "output", "value_info", "sparse_initializer"):
        getattr(graph, field).extend(getattr(source, field))
    for tensor in source.initializer:
        if tensor.ByteSize() <= SHAPES_ONLY_ABOVE_BYTES:
            graph.initializer.append(tensor)
            continue
        stub = graph.initializer.add()
        stub.name, stub.data_type = tensor.name, tensor.data_type
        stub.dims.extend(tensor.dims)
        stub.data_location = onnx.TensorProto.EXTERNAL
        stub.external_data.add(key="location", value="values-not-loaded")
    return lean
