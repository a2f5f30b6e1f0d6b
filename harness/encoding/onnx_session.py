"""The onnxruntime session over an exported (or derived) transformer graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from harness.core.errors import HarnessError
from harness.encoding.onnx_export import require_onnxruntime


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
