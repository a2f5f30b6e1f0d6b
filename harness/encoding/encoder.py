"""Encoders: text in, float32 vectors out, exactly as the model record says.

Two model backends, both loaded as a sentence-transformers model:

* ``sentence-transformers``: the model folder's own modules (Transformer, Pooling, Dense, ...), with
  the record's max length and prefixes enforced and its pooling and normalisation cross-checked.
* ``transformers``: a plain transformers checkpoint (e.g. Contriever) with the pooling the record
  names (mean over the attention mask, CLS, or last token) and nothing taken from the folder.

and three runtimes for the forward pass (``--backend``; part of the cache key):

* ``torch``: PyTorch, in the chosen ``precision`` (fp32; bf16 by autocast on CPUs with native bf16
  or on GPUs; fp16 on GPUs).
* ``onnx``: the transformer exported once with ``torch.onnx`` and run by onnxruntime
  (``harness.encoding.onnx``); pooling and normalisation stay the model's own modules. fp32, or
  int8 (the export's weights quantized by onnxruntime's dynamic quantization; approximate).
* ``exact`` (the default): the fastest of the two whose vectors equal torch fp32 within a tight
  tolerance, decided once per model by a recorded check on a fixed sample.

Texts are tokenized once, by the model's own ``preprocess``, a window of batches at a time: the
window (taken from the longest-first order sentence-transformers uses) is sorted by token count and
cut into batches padded only to their own longest text. On a CPU a batch is also capped by tokens
(``CPU_BATCH_TOKENS``), and one batch per core runs at once, each single-threaded; the vectors do not
depend on any of this beyond float rounding (batching is not part of the cache key). Prefixes are
prepended here, never through sentence-transformers prompts, so the text encoded is exactly
``Encoder.document_text(doc)`` / ``query_prefix + query``.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from harness.core.errors import HarnessError
from harness.core.paths import default_cache_dir
from harness.models.registry import PRECISIONS, RUNTIMES
from harness.models.resolve import ResolvedModel

log = logging.getLogger(__name__)

# Texts are tokenized and sorted a window of this many batches at a time: long enough for batches of
# near-equal length, short enough to bound memory and to move the progress bar.
CHUNK_BATCHES = 16
DEFAULT_RUNTIME = "exact"
# On a CPU a batch holds at most this many padded tokens (and at most ``batch_size`` texts): its
# activations then stay in cache. MiniLM on scifact, one thread: 20.3 docs/s at 1024 tokens, 19.6 at
# 2048, 15.1 for 128 texts of 256 tokens at once. GPUs want big batches and get ``batch_size`` only.
CPU_BATCH_TOKENS = 1024

_ST_POOLING = {"mean": "mean", "cls": "cls", "last": "lasttoken"}
# ``--precision`` names -> torch dtype names (the names used in settings).
# ``int8`` is not a torch dtype: it names onnxruntime's dynamically quantized graph.
_DTYPE_OF = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}
_SHORT_OF = {dtype: short for short, dtype in _DTYPE_OF.items()}


Batch = tuple[np.ndarray, np.ndarray]  # (positions in the input, float32 vectors)


class TextDocument(Protocol):
    title: str
    text: str


class Progress(Protocol):
    def update(self, n: int) -> Any: ...


def pick_device(requested: str | None = None) -> str:
    """``cuda`` > ``mps`` > ``cpu``, unless a device is requested (then it must exist)."""
    import torch

    wanted = (requested or "").strip().lower()
    if wanted in ("", "auto"):
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        return "mps" if mps is not None and mps.is_available() else "cpu"
    if wanted == "cpu":
        return "cpu"
    if wanted == "cuda" or wanted.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise HarnessError(
                f"device {requested!r} requested but no CUDA GPU is available (use --device cpu)"
            )
        index = wanted.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise HarnessError(
                f"device {requested!r}: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
        return wanted
    if wanted == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise HarnessError("device 'mps' requested but Apple MPS is not available (use --device cpu)")
        return "mps"
    raise HarnessError(f"unknown device {requested!r} (use auto, cpu, cuda, cuda:N or mps)")


# ---- precision -------------------------------------------------------------------------------


def cpu_has_native_bf16() -> bool:
    """True when this CPU computes bf16 in hardware (AVX512-BF16, AMX, or Arm's BF16 extension).

    Without it torch still runs bf16, emulated, and slower than fp32: not worth offering.
    """
    import torch

    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        check = getattr(torch.cpu, probe, None)
        if check is not None and check():
            return True
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            flags = {
                word
                for line in handle
                if line.lower().startswith(("flags", "features"))
                for word in line.split()
            }
    except OSError:
        return False
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def precision_dtype(precision: str) -> str:
    """``fp32``/``bf16``/``fp16`` (or the torch names) -> ``float32``/``bfloat16``/``float16``."""
    value = precision.strip().lower()
    if value in _DTYPE_OF:
        return _DTYPE_OF[value]
    if value in _SHORT_OF:
        return value
    raise HarnessError(f"unknown precision {precision!r} (use {', '.join(PRECISIONS)})")


def check_precision(dtype: str, device: str) -> None:
    """One line, before any work, when the device cannot compute in ``dtype``."""
    import torch

    short = _SHORT_OF[dtype]
    if dtype in ("float32", "int8"):  # int8 is onnx's, which resolve_runtime keeps on the CPU
        return
    if device.startswith("cuda"):
        if dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
            raise HarnessError(f"precision bf16 is not supported on {device} (use --precision fp16 or fp32)")
        return
    if device == "mps":
        if dtype == "bfloat16":
            raise HarnessError("precision bf16 is not supported on mps (use --precision fp16 or fp32)")
        return
    if dtype == "float16":
        raise HarnessError(
            f"precision {short} runs on a GPU only; on {device} use --precision fp32"
            + (" or bf16" if cpu_has_native_bf16() else "")
        )
    if not cpu_has_native_bf16():
        raise HarnessError(
            "precision bf16 needs a CPU with native bf16 (AVX512-BF16 or AMX); this one would emulate it, "
            "slower than fp32 (use --precision fp32)"
        )


def resolve_runtime(
    model: ResolvedModel, device: str, runtime: str | None, precision: str | None
) -> tuple[str, str]:
    """``(runtime, dtype)`` from the arguments, else the record's defaults, else ``exact`` fp32.

    Asking for bf16/fp16 without a runtime means torch, int8 means onnx (``exact`` is fp32 only).
    """
    record = model.record
    precision = precision or record.precision
    dtype = precision_dtype(precision) if precision else "float32"
    chosen = (runtime or record.runtime or "").strip().lower()
    if not chosen:
        chosen = {"float32": DEFAULT_RUNTIME, "int8": "onnx"}.get(dtype, "torch")
    if chosen not in RUNTIMES:
        raise HarnessError(f"unknown backend {chosen!r} (use {', '.join(RUNTIMES)})")
    short = _SHORT_OF[dtype]
    if chosen == "exact" and dtype != "float32":
        owner = "onnx" if dtype == "int8" else "torch"
        raise HarnessError(
            f"--backend exact means vectors equal to torch fp32; for {short} use --backend {owner} --precision {short}"
        )
    if chosen == "onnx" and dtype not in ("float32", "int8"):
        raise HarnessError(
            f"--backend onnx runs fp32 or int8; for {short} use --backend torch --precision {short}"
        )
    if chosen == "torch" and dtype == "int8":
        raise HarnessError("--backend torch has no int8; use --backend onnx --precision int8")
    if chosen == "onnx":
        from harness.encoding.onnx import require_onnxruntime

        require_onnxruntime()
        if device != "cpu":
            raise HarnessError(f"the onnx backend runs on the CPU only; on {device} use --backend torch")
    check_precision(dtype, device)
    return chosen, dtype


def check_encoder_options(model: ResolvedModel, device: str | None, options: dict[str, Any]) -> None:
    """Refuse a backend/precision the device cannot run, before any work (no-op for BM25 models)."""
    if not model.record.is_lexical:
        resolve_runtime(model, pick_device(device), options.get("runtime"), options.get("precision"))


# ---- batching --------------------------------------------------------------------------------


def token_batches(lengths: np.ndarray, batch_size: int, max_tokens: int | None = None) -> list[np.ndarray]:
    """Positions into ``lengths``, longest first, cut into batches of at most ``batch_size`` texts and,
    when ``max_tokens`` is given, at most that many padded tokens (batch count x its longest text).
    """
    order = np.argsort(-lengths, kind="stable")
    batches: list[np.ndarray] = []
    start = 0
    while start < len(order):
        longest = max(int(lengths[order[start]]), 1)
        size = batch_size if max_tokens is None else max(1, min(batch_size, max_tokens // longest))
        batches.append(order[start : start + size])
        start += size
    return batches


class Encoder:
    """Encodes queries and documents for one resolved model. The model loads on first use."""

    def __init__(
        self,
        model: ResolvedModel,
        *,
        device: str | None = None,
        batch_size: int = 64,
        runtime: str | None = None,
        precision: str | None = None,
        cache_dir: str | Path | None = None,
    ):
        record = model.record
        if record.is_lexical:
            raise HarnessError(f"model {record.name} is lexical ({record.kind}); it has no dense encoder")
        if batch_size <= 0:
            raise HarnessError(f"batch size must be positive, not {batch_size}")
        self.model = model
        self.device = pick_device(device)
        self.batch_size = batch_size
        self.runtime, self.dtype = resolve_runtime(model, self.device, runtime, precision)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.max_batch_tokens = CPU_BATCH_TOKENS if self.device == "cpu" else None
        self._st_model = None
        self._onnx = None
        self._onnx_export: dict[str, Any] | None = None
        self._active: str | None = None if self.runtime == "exact" else self.runtime
        self._exact_check: dict[str, Any] | None = None

    # ---- settings ---------------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        """Everything that changes a vector: the record's settings plus how this run computes them.

        ``runtime`` is the one asked for: ``exact`` vectors equal torch fp32 whichever runtime the
        check chose, so the choice itself is provenance (``describe``), not part of the key.
        """
        return {**self.model.record.vector_settings(), "runtime": self.runtime, "precision": self.dtype}

    def describe(self) -> dict[str, Any]:
        """How this run computes its vectors, for provenance and the result table."""
        import torch

        active = self._active
        check = self._exact_check
        if self.runtime == "exact" and check is None:
            from harness.encoding.onnx import load_exact_check

            check = load_exact_check(self.cache_dir, self.model, self.device)
            active = active or (check or {}).get("runtime")
        return {
            "runtime": self.runtime,
            "resolved_runtime": active,
            "precision": _SHORT_OF[self.dtype],
            "label": self.label(active),
            "device": self.device,
            "threads": torch.get_num_threads(),
            "streams": self.streams(),
            "max_batch_tokens": self.max_batch_tokens,
            "batch_size": self.batch_size,
            "exact_check": check,
            "onnx_export": {
                key: value for key, value in (self._onnx_export or {}).items() if key != "key_inputs"
            }
            or None,
        }

    def label(self, active: str | None = None) -> str:
        """``onnx fp32``, ``torch bf16``, ``exact (onnx) fp32``: the runtime column of a result table."""
        active = active or self._active
        runtime = f"exact ({active})" if self.runtime == "exact" and active else self.runtime
        return f"{runtime} {_SHORT_OF[self.dtype]}"

    @property
    def dim(self) -> int:
        model = self.load()
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    # ---- text -------------------------------------------------------------------------------

    def document_text(self, doc: TextDocument) -> str:
        """The exact text encoded for a document: prefix + ``(title + join + text).strip()`` (beir's rule)."""
        record = self.model.record
        joined = f"{doc.title or ''}{record.title_join}{doc.text or ''}".strip()
        return f"{record.doc_prefix}{joined}"

    def query_text(self, query: str) -> str:
        return f"{self.model.record.query_prefix}{query}"

    # ---- encoding ---------------------------------------------------------------------------

    def encode_queries(self, texts: Sequence[str], *, progress: Progress | None = None) -> np.ndarray:
        """float32 ``(n, dim)`` query vectors, query prefix applied."""
        return self.encode_texts([self.query_text(text) for text in texts], progress=progress)

    def encode_documents(
        self, docs: Sequence[TextDocument], *, progress: Progress | None = None
    ) -> np.ndarray:
        """float32 ``(n, dim)`` document vectors (title joined, document prefix applied)."""
        return self.encode_texts([self.document_text(doc) for doc in docs], progress=progress)

    def encode_texts(self, texts: Sequence[str], *, progress: Progress | None = None) -> np.ndarray:
        """Encode final texts (prefixes already applied), longest first, in the input order."""
        if len(texts) == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        vectors: np.ndarray | None = None
        for positions, encoded in self._run(self.resolve_runtime(), self._batches(texts)):
            if vectors is None:
                vectors = np.empty((len(texts), encoded.shape[1]), dtype=np.float32)
            vectors[positions] = encoded
            if progress is not None:
                progress.update(len(positions))
        return vectors

    def _batches(self, texts: Sequence[str]) -> Iterator[tuple[np.ndarray, dict[str, Any]]]:
        """``(positions, features)`` per batch; every text tokenized exactly once."""
        model = self.load()
        right_padded = getattr(model.tokenizer, "padding_side", "right") != "left"
        tokenize = getattr(model, "preprocess", None) or model.tokenize  # renamed in sentence-transformers 6
        # The order sentence-transformers uses, over all texts, so windows hold texts of similar length.
        order = np.argsort([-len(text) for text in texts], kind="stable")
        window = self.batch_size * CHUNK_BATCHES
        for start in range(0, len(texts), window):
            positions = order[start : start + window]
            features = tokenize([texts[i] for i in positions])
            lengths = features["attention_mask"].sum(dim=1).numpy()
            for rows in token_batches(lengths, self.batch_size, self.max_batch_tokens):
                longest = int(lengths[rows].max())
                columns = slice(None, longest) if right_padded else slice(-longest, None)
                yield positions[rows], _take(features, rows, columns, len(positions))

    def resolve_runtime(self) -> str:
        """The runtime that computes the vectors: for ``exact``, the recorded (or now run) check's choice."""
        if self._active is None:
            self._exact_check = self._run_exact_check()
            self._active = self._exact_check["runtime"]
            log.info("exact runtime for %s: %s", self.model.record.name, self._active)
        return self._active

    def streams(self) -> int:
        """Batches computed at once: on a CPU one single-threaded batch per torch thread, else one."""
        import torch

        return torch.get_num_threads() if self.device == "cpu" else 1

    def _run(self, runtime: str, batches: Iterable[tuple[np.ndarray, dict[str, Any]]]) -> Iterator[Batch]:
        """``(positions, float32 vectors)`` for each batch, in order, computed on ``runtime``.

        On a CPU with n threads, n batches run at once, each single-threaded: with the small batches
        made here, MiniLM encodes faster than as one n-thread stream (2 cores: 41 vs 34 docs/s on an
        AMD EPYC, 29.8 vs 28.8 on an Intel Xeon).
        """
        import torch

        compute = self._compute(runtime)
        streams = self.streams()
        if streams == 1:
            for positions, features in batches:
                yield positions, compute(features)
            return
        from concurrent.futures import ThreadPoolExecutor

        torch.set_num_threads(1)  # torch's thread count is per process: each stream gets one core
        try:
            with ThreadPoolExecutor(streams, thread_name_prefix="encode") as pool:
                pending: deque = deque()
                for positions, features in batches:
                    pending.append((positions, pool.submit(compute, features)))
                    if len(pending) > streams:  # keep every stream fed, tokenize no further ahead
                        done, future = pending.popleft()
                        yield done, future.result()
                while pending:
                    done, future = pending.popleft()
                    yield done, future.result()
        finally:
            torch.set_num_threads(streams)

    def _compute(self, runtime: str) -> Callable[[dict[str, Any]], np.ndarray]:
        """A function from one batch's features to its float32 vectors (safe to call from threads)."""
        import torch

        model = self.load()
        normalize = self.model.record.normalize
        autocast = self.device == "cpu" and self.dtype == "bfloat16"
        if runtime == "onnx":
            session = self._onnx_session()
            tail = list(model)[1:]  # Pooling, Dense, Normalize: the model's own modules

        def compute(features: dict[str, Any]) -> np.ndarray:
            # inference_mode and autocast are per thread: entered here, in the thread that computes.
            with torch.inference_mode():
                if runtime == "onnx":
                    out = {**features, "token_embeddings": torch.from_numpy(session(features))}
                    for module in tail:
                        out = module(out)
                else:
                    on_device = {
                        key: value.to(self.device) if isinstance(value, torch.Tensor) else value
                        for key, value in features.items()
                    }
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                        out = model(on_device)
                embeddings = out["sentence_embedding"].float()
                if normalize:
                    embeddings = torch.nn.functional.normalize(embeddings, p=2, dim=1)
                return embeddings.cpu().numpy()

        return compute

    def _onnx_session(self):
        if self._onnx is None:
            from harness.encoding.onnx import OnnxTransformer, ensure_exported

            graph, self._onnx_export = ensure_exported(self.load(), self.model, self.cache_dir)
            if self.dtype == "int8":
                from harness.encoding.onnx import ensure_quantized

                graph, quantization = ensure_quantized(graph)
                self._onnx_export = {**self._onnx_export, "quantization": quantization}
            self._onnx = OnnxTransformer(graph)
        return self._onnx

    def _run_exact_check(self) -> dict[str, Any]:
        """Torch fp32 against onnx on a fixed sample, once per model (the outcome is kept in the cache)."""
        from harness.encoding import onnx as onnx_backend

        recorded = onnx_backend.load_exact_check(self.cache_dir, self.model, self.device)
        if recorded is not None:
            return recorded
        if self.device != "cpu" or not onnx_backend.onnxruntime_available():
            why = "onnxruntime is not installed" if self.device == "cpu" else "onnx runs on the CPU only"
            return {"runtime": "torch", "reason": why}
        # Short texts as queries, long ones as documents: both prefixes and truncation are exercised.
        texts = onnx_backend.exact_sample_texts()
        sample = [
            self.query_text(text) if len(text) < 200 else self.model.record.doc_prefix + text
            for text in texts
        ]
        batches = list(self._batches(sample))

        def runner(runtime: str) -> Callable[[], np.ndarray]:
            def run() -> np.ndarray:
                vectors = np.empty((len(sample), self.dim), dtype=np.float32)
                for positions, encoded in self._run(runtime, batches):  # the first onnx run exports
                    vectors[positions] = encoded
                return vectors

            return run

        log.info("checking which runtime computes %s's torch fp32 vectors fastest", self.model.record.name)
        outcome = onnx_backend.run_exact_check({"torch": runner("torch"), "onnx": runner("onnx")})
        return onnx_backend.save_exact_check(self.cache_dir, self.model, self.device, outcome, len(sample))

    # ---- loading ----------------------------------------------------------------------------

    def load(self):
        """The underlying ``SentenceTransformer`` (loaded once, from the resolved local folder)."""
        if self._st_model is None:
            from transformers.utils import logging as transformers_logging

            # transformers draws a bar per weight-loading call; our own bar is over documents.
            bars_were_on = transformers_logging.is_progress_bar_enabled()
            transformers_logging.disable_progress_bar()
            try:
                self._st_model = self._load()
            except HarnessError:
                raise
            except Exception as error:  # corrupt weights, unsupported architecture, remote code refused
                text = (str(error).strip() or type(error).__name__).splitlines()[0][:300]
                raise HarnessError(
                    f"could not load model {self.model.record.name} from {self.model.source}: {text}"
                ) from error
            finally:
                if bars_were_on:
                    transformers_logging.enable_progress_bar()
        return self._st_model

    def _load(self):
        import torch
        from sentence_transformers import SentenceTransformer

        record = self.model.record
        trust = record.trust_remote_code
        model_kwargs: dict[str, Any] = {"trust_remote_code": trust}
        if self.dtype in ("float16", "bfloat16") and self.device != "cpu":
            # GPUs hold half-precision weights; the CPU keeps fp32 weights and autocasts to bf16.
            model_kwargs["dtype"] = getattr(torch, self.dtype)
        log.info("loading %s (%s) on %s, %s", record.name, record.kind, self.device, self.dtype)

        if record.kind == "transformers":
            transformer_cls, pooling_cls = _st_modules()
            transformer = transformer_cls(
                self.model.source,
                max_seq_length=record.max_length,
                model_kwargs=model_kwargs,
                processor_kwargs={"trust_remote_code": trust},
                config_kwargs={"trust_remote_code": trust},
            )
            pooling = pooling_cls(
                transformer.get_embedding_dimension(), pooling_mode=_ST_POOLING[record.pooling]
            )
            model = SentenceTransformer(modules=[transformer, pooling], device=self.device)
        else:
            model = SentenceTransformer(
                self.model.source,
                device=self.device,
                trust_remote_code=trust,
                local_files_only=True,
                model_kwargs=model_kwargs,
            )
            model.max_seq_length = record.max_length
            # Our prefixes are the only ones: a prompt saved with the model must not be added twice.
            model.default_prompt_name = None
            if not self.model.assumed:
                _check_against_folder(model, record)
        model.eval()
        return model


def _st_modules():
    """Transformer and Pooling modules (their import path moved in sentence-transformers 6)."""
    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Pooling, Transformer
    return Transformer, Pooling


def _check_against_folder(model, record) -> None:
    """A registry record that disagrees with the model's own modules is a wrong record: stop."""
    _, pooling_cls = _st_modules()
    modules = list(model)
    for module in modules:
        if isinstance(module, pooling_cls):
            mode = module.pooling_mode if hasattr(module, "pooling_mode") else module.get_pooling_mode_str()
            mode = "+".join(mode) if isinstance(mode, (tuple, list)) else str(mode)
            if mode != _ST_POOLING.get(record.pooling, record.pooling):
                raise HarnessError(
                    f"model record {record.name} says pooling={record.pooling} but the model's "
                    f"sentence-transformers config pools {mode!r}; fix its file in configs/models/"
                )
    has_normalize = any(type(module).__name__ == "Normalize" for module in modules)
    if has_normalize and not record.normalize:
        raise HarnessError(
            f"model record {record.name} says normalize=false but the model ends with a Normalize module; "
            "fix its file in configs/models/"
        )


def _take(features: dict[str, Any], rows: np.ndarray, columns: slice, count: int) -> dict[str, Any]:
    """The features of some rows of a tokenized window, cut to ``columns`` (other values kept as they are)."""
    import torch

    index = torch.from_numpy(np.asarray(rows, dtype=np.int64))
    return {
        key: value[index][:, columns]
        if isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape[0] == count
        else value
        for key, value in features.items()
    }
