"""Encoders: text in, float32 vectors out, exactly as the model record says.

Two model kinds, both loaded as a sentence-transformers model:

* ``sentence-transformers``: the model folder's own modules (Transformer, Pooling, Dense, ...), with
  the record's max length and prefixes enforced and its pooling and normalisation cross-checked.
* ``transformers``: a plain transformers checkpoint (e.g. Contriever) with the pooling the record
  names (mean over the attention mask, CLS, or last token) and nothing taken from the folder.

run by one of three runtimes (``--runtime`` torch, onnx or exact; see ``harness.encoding.runtime``).
An approximate precision (int8, bf16, fp16) is checked once per model against torch fp32 on a fixed
sample, and its verdict joins the settings (the cache key); ``--precision fast`` is the fastest setting
whose check passes.

Texts are tokenized once, by the model's own ``preprocess``, a window of batches at a time: the
window (taken from the longest-first order sentence-transformers uses) is sorted by token count and
cut into batches padded only to their own longest text. On a CPU a batch is also capped by tokens
(``CPU_BATCH_TOKENS``), and one batch per encoder thread runs at once, each single-threaded; the vectors do not
depend on any of this beyond float rounding (batching is not part of the cache key). Prefixes are
prepended here, never through sentence-transformers prompts, so the text encoded is exactly
``Encoder.document_text(doc)`` / ``query_prefix + query``.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.errors import HarnessError
from harness.core.paths import default_cache_dir
from harness.core.protocols import Progress, TextDocument
from harness.encoding import onnx as onnx_runtime
from harness.encoding import runtime as runtime_choices
from harness.encoding.cpu import int8_cpu_class, relevant_cpu_flags
from harness.encoding.runtime import (
    FAST,
    current_torch_threads,
    pick_device,
    resolve_runtime,
    short_precision,
    torch_threads,
)
from harness.models.resolve import ResolvedModel

log = logging.getLogger(__name__)

# Texts are tokenized and sorted a window of this many batches at a time: long enough for batches of
# near-equal length, short enough to bound memory and to move the progress bar.
CHUNK_BATCHES = 16
# On a CPU a batch holds at most this many padded tokens (and at most ``batch_size`` texts): its
# activations then stay in cache. MiniLM on scifact, one thread: 20.3 docs/s at 1024 tokens, 19.6 at
# 2048, 15.1 for 128 texts of 256 tokens at once. GPUs want big batches and get ``batch_size`` only.
CPU_BATCH_TOKENS = 1024

_ST_POOLING = {"mean": "mean", "cls": "cls", "last": "lasttoken"}


Batch = tuple[np.ndarray, np.ndarray]  # (positions in the input, float32 vectors)


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
        threads: int | None = None,
        int8: str = "auto",
    ):
        """``threads``: torch threads this encoder computes with (default: torch's count now). On a CPU
        that many single-threaded batches run at once; the count is recorded in ``describe``.
        ``int8``: the quantization variant of ``--precision int8`` (``auto``: the one for this CPU;
        see ``harness.encoding.onnx.INT8_VARIANTS``).
        """
        record = model.record
        if record.is_lexical:
            raise HarnessError(f"model {record.name} is lexical ({record.kind}); it has no dense encoder")
        if batch_size <= 0:
            raise HarnessError(f"batch size must be positive, not {batch_size}")
        if threads is not None and threads <= 0:
            raise HarnessError(f"thread count must be positive, not {threads}")
        self.model = model
        self.device = pick_device(device)
        self.batch_size = batch_size
        self.runtime, self.dtype = resolve_runtime(model, self.device, runtime, precision)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.max_batch_tokens = CPU_BATCH_TOKENS if self.device == "cpu" else None
        self.threads = threads if threads is not None else current_torch_threads()
        self._st_model = None
        self._onnx = None
        self._onnx_export: dict[str, Any] | None = None
        self._active: str | None = None if self.runtime == "exact" else self.runtime
        self._exact_check: dict[str, Any] | None = None
        runtime_choices.check_int8_option(self.dtype, int8)
        self.int8 = int8
        self.quantization = (
            onnx_runtime.int8_settings(int8, int8_cpu_class()) if self.dtype == "int8" else None
        )
        self._precision_check: dict[str, Any] | None = None
        self._fast: dict[str, Any] | None = None

    # ---- settings ---------------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        """Everything that changes a vector: the record's settings plus how this run computes them.

        ``runtime`` is the one asked for: ``exact`` vectors equal torch fp32 whichever runtime the
        check chose, so the choice itself is provenance (``describe``), not part of the key. An
        approximate precision adds its quantization settings and its check's verdict (running the check
        if none is recorded); ``fast`` gives the settings of the setting it chose.
        """
        self._settle_fast()
        settings = {**self.model.record.vector_settings(), "runtime": self.runtime, "precision": self.dtype}
        if self.quantization is not None:
            settings["quantization"] = self.quantization
        if self.approximate:
            settings["check"] = "pass" if self.precision_check().get("passed") else "fail"
        return settings

    @property
    def approximate(self) -> bool:
        """True for a precision whose vectors differ from fp32 (int8, bf16, fp16)."""
        return self.dtype not in ("float32", FAST)

    def describe(self) -> dict[str, Any]:
        """How this run computes its vectors, for provenance and the result table."""
        self._settle_fast()
        active = self._active
        check = self._exact_check
        if self.runtime == "exact" and check is None:
            check = onnx_runtime.load_exact_check(self.cache_dir, self.model, self.device)
            active = active or (check or {}).get("runtime")
        return {
            "runtime": self.runtime,
            "resolved_runtime": active,
            "precision": short_precision(self.dtype),
            "label": self.label(active),
            "device": self.device,
            "threads": self.threads,
            "streams": self.streams(),
            "max_batch_tokens": self.max_batch_tokens,
            "batch_size": self.batch_size,
            "exact_check": check,
            "quantization": self.quantization,
            "precision_check": self.precision_check() if self.approximate else None,
            "fast": self._fast,
            "cpu": {"flags": relevant_cpu_flags(), "int8_class": int8_cpu_class()} if self.device == "cpu" else None,
            "onnx_export": {
                key: value for key, value in (self._onnx_export or {}).items() if key != "key_inputs"
            }
            or None,
        }

    def label(self, active: str | None = None) -> str:
        """``onnx fp32``, ``exact (onnx) fp32``, ``onnx int8 dynamic-7bit``, ``fast: torch bf16``: the
        runtime column of a result table.
        """
        active = active or self._active
        runtime = f"exact ({active})" if self.runtime == "exact" and active else self.runtime
        label = f"{runtime} {short_precision(self.dtype)}"
        if self.quantization is not None:
            label += f" {self.quantization['variant']}"
        return f"fast: {label}" if self._fast is not None else label

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
        return self._encode_batches(self.resolve_runtime(), self._batches(texts), len(texts), progress)

    def _encode_batches(
        self,
        runtime: str,
        batches: Iterable[tuple[np.ndarray, dict[str, Any]]],
        count: int,
        progress: Progress | None = None,
    ) -> np.ndarray:
        """float32 ``(count, dim)`` vectors of all batches, with torch's threads set for this encoder's
        streams for exactly as long as the batches run (and given back afterwards, even on an error).
        """
        vectors: np.ndarray | None = None
        with self._stream_threads():
            for positions, encoded in self._run(runtime, batches):
                if vectors is None:
                    vectors = np.empty((count, encoded.shape[1]), dtype=np.float32)
                vectors[positions] = encoded
                if progress is not None:
                    progress.update(len(positions))
        return vectors

    def _stream_threads(self) -> contextlib.AbstractContextManager:
        """One torch thread per stream when several run at once, else this encoder's thread count."""
        return torch_threads(1 if self.streams() > 1 else self.threads)

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
        """The runtime that computes the vectors: for ``exact``, the recorded (or now run) check's choice;
        for ``fast``, the runtime of the setting it chose.
        """
        self._settle_fast()
        if self._active is None:
            self._exact_check = self._run_exact_check()
            self._active = self._exact_check["runtime"]
            log.info("exact runtime for %s: %s", self.model.record.name, self._active)
        return self._active

    def streams(self) -> int:
        """Batches computed at once: on a CPU one single-threaded batch per encoder thread, else one."""
        return self.threads if self.device == "cpu" else 1

    def _run(self, runtime: str, batches: Iterable[tuple[np.ndarray, dict[str, Any]]]) -> Iterator[Batch]:
        """``(positions, float32 vectors)`` for each batch, in order, computed on ``runtime``.

        On a CPU with n threads, n batches run at once, each single-threaded: with the small batches
        made here, MiniLM encodes faster than as one n-thread stream (2 cores: 41 vs 34 docs/s on an
        AMD EPYC, 29.8 vs 28.8 on an Intel Xeon). Called inside ``_stream_threads``, which sets torch's
        (process-wide) thread count to one per stream.
        """
        compute = self._compute(runtime)
        streams = self.streams()
        if streams == 1:
            for positions, features in batches:
                yield positions, compute(features)
            return
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

    def _compute(self, runtime: str) -> Callable[[dict[str, Any]], np.ndarray]:
        """A function from one batch's features to its float32 vectors (safe to call from threads)."""
        import torch

        model = self.load()
        normalize = self.model.record.normalize
        autocast = self.device == "cpu" and self.dtype == "bfloat16"
        onnx = runtime in ("onnx", "onnx-fused")
        if onnx:
            session = self._onnx_session(fused=runtime == "onnx-fused")
            tail = list(model)[1:]  # Pooling, Dense, Normalize: the model's own modules

        def compute(features: dict[str, Any]) -> np.ndarray:
            # inference_mode and autocast are per thread: entered here, in the thread that computes.
            with torch.inference_mode():
                if onnx:
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

    def _onnx_session(self, fused: bool = False):
        """The onnxruntime session: the exported graph, its int8 version, or (``fused``) its fused one."""
        sessions = self._onnx if self._onnx is not None else {}
        self._onnx = sessions
        if fused not in sessions:
            graph, export = onnx_runtime.ensure_exported(self.load(), self.model, self.cache_dir)
            self._onnx_export = {**export, **(self._onnx_export or {})}
            if self.dtype == "int8":
                graph, record = onnx_runtime.ensure_quantized(graph, self.quantization)
                self._onnx_export["quantization"] = record
            elif fused:
                config = transformer_config(self.load())
                graph, record = onnx_runtime.ensure_fused(graph, config.num_attention_heads, config.hidden_size)
                self._onnx_export["fused"] = record
            sessions[fused] = onnx_runtime.OnnxTransformer(graph)
        return sessions[fused]

    def _run_exact_check(self) -> dict[str, Any]:
        """Torch fp32 against onnx on a fixed sample, once per model (the outcome is kept in the cache)."""
        recorded = onnx_runtime.load_exact_check(self.cache_dir, self.model, self.device)
        if recorded is not None:
            return recorded
        if self.device != "cpu" or not onnx_runtime.onnxruntime_available():
            why = "onnxruntime is not installed" if self.device == "cpu" else "onnx runs on the CPU only"
            return {"runtime": "torch", "reason": why}
        sample = self._check_sample()
        batches = list(self._batches(sample))

        def runner(runtime: str) -> Callable[[], np.ndarray]:
            def run() -> np.ndarray:
                return self._encode_batches(runtime, batches, len(sample))  # the first onnx run exports

            return run

        log.info("checking which runtime computes %s's torch fp32 vectors fastest", self.model.record.name)
        names = ("torch", "onnx", "onnx-fused")
        outcome = onnx_runtime.run_exact_check({name: runner(name) for name in names})
        return onnx_runtime.save_exact_check(
            self.cache_dir, self.model, self.device, outcome, len(sample), self.threads
        )

    def _check_sample(self) -> list[str]:
        """The fixed sample: short texts as queries, long ones as documents (prefixes and truncation)."""
        return [
            self.query_text(text) if len(text) < 200 else self.model.record.doc_prefix + text
            for text in onnx_runtime.exact_sample_texts()
        ]

    # ---- approximate precisions -------------------------------------------------------------

    def check_setting(self) -> dict[str, Any]:
        """What an approximate setting's check is about: runtime, precision, quantization."""
        return {"runtime": self.runtime, "precision": self.dtype, "quantization": self.quantization}

    def precision_check(self, *, warn: bool = True) -> dict[str, Any]:
        """This approximate setting against torch fp32 on the fixed sample, run once per model and
        recorded; a setting that fails gets a warning naming its measured error (``warn``: it is what
        computes the vectors, not a candidate ``--precision fast`` weighs).
        """
        if self._precision_check is None:
            setting = self.check_setting()
            check = onnx_runtime.load_approximate_check(self.cache_dir, self.model, self.device, setting)
            if check is None:
                check = self._run_precision_check(setting)
            self._precision_check = check
            if warn and not check.get("passed"):
                log.warning(
                    "%s moves %s's vectors by up to %s (relative L2; lowest cosine %s) against torch fp32 "
                    "on the check sample, above the %s bound: expect nDCG@10 to move by more than 0.001 "
                    "(scripts/bench_vector_noise.py measures how much; --precision fast only picks a "
                    "setting that passes)",
                    self.label(),
                    self.model.record.name,
                    check.get("relative_error", check.get("error")),
                    check.get("lowest_cosine"),
                    check.get("tolerance"),
                )
        return self._precision_check

    def _run_precision_check(self, setting: dict[str, Any]) -> dict[str, Any]:
        sample = self._check_sample()
        batches = list(self._batches(sample))
        reference = self.sibling("torch", "fp32")
        log.info("checking %s against torch fp32 for %s", self.label(), self.model.record.name)
        outcome = onnx_runtime.run_approximate_check(
            lambda: self._encode_batches(self.runtime, batches, len(sample)),
            lambda: reference._encode_batches("torch", batches, len(sample)),
        )
        return onnx_runtime.save_approximate_check(
            self.cache_dir, self.model, self.device, setting, outcome, len(sample), self.threads
        )

    def sibling(self, runtime: str, precision: str) -> Encoder:
        """An encoder of the same model, device, batching and cache with another runtime and precision
        (sharing the loaded model where the weights are the same: always on a CPU).
        """
        other = Encoder(
            self.model,
            device=self.device,
            batch_size=self.batch_size,
            runtime=runtime,
            precision=precision,
            cache_dir=self.cache_dir,
            threads=self.threads,
            int8=self.int8 if precision == "int8" else "auto",
        )
        if self.device == "cpu" or (self.dtype == other.dtype and self._st_model is not None):
            other._st_model = self._st_model or self.load()
        return other

    def _fast_candidates(self) -> list[tuple[str, str]]:
        """The approximate settings ``fast`` weighs against ``exact`` on this device."""
        import torch

        if self.device == "cpu":
            candidates = [("onnx", "int8")] if onnx_runtime.onnxruntime_available() else []
            return candidates + ([("torch", "bf16")] if runtime_choices.cpu_has_native_bf16() else [])
        candidates = [("torch", "fp16")]
        if self.device.startswith("cuda") and torch.cuda.is_bf16_supported():
            candidates.append(("torch", "bf16"))
        return candidates

    def _settle_fast(self) -> None:
        """For ``--precision fast``: run (or read) the exact check and every candidate's check, and
        become the fastest setting that passes. A no-op for every other precision.
        """
        if self.dtype != FAST:
            return
        exact = self.sibling("exact", "fp32")
        exact.resolve_runtime()
        checks: dict[str, dict[str, Any]] = {}
        siblings: dict[str, Encoder] = {"exact": exact}
        for runtime, precision in self._fast_candidates():
            candidate = self.sibling(runtime, precision)
            siblings[candidate.label()] = candidate
            checks[candidate.label()] = candidate.precision_check(warn=False)
        choice = onnx_runtime.choose_fast(exact._exact_check or {}, checks)
        chosen = siblings[choice["chosen"]]
        weighed = "; ".join(
            f"{label}: {'pass' if check.get('passed') else 'fail'}, error {check.get('relative_error')}"
            for label, check in checks.items()
        )
        log.info("--precision fast for %s: %s (%s)", self.model.record.name, chosen.label(), weighed or "no candidates")
        self._adopt(chosen)
        self._fast = choice

    def _adopt(self, chosen: Encoder) -> None:
        """Compute exactly as ``chosen`` does (its runtime, precision, checks and loaded state)."""
        for name in (
            "runtime", "dtype", "quantization", "_active", "_exact_check", "_precision_check",
            "_st_model", "_onnx", "_onnx_export",
        ):  # fmt: skip
            setattr(self, name, getattr(chosen, name))

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


def transformer_config(st_model):
    """The transformers config of a sentence-transformers model's first (transformer) module."""
    return onnx_runtime.transformer_module(st_model).auto_model.config


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
                    f"sentence-transformers config pools {mode!r}; fix its model record (harness/records/models/ or HARNESS_CONFIG_DIR/models/)"
                )
    has_normalize = any(type(module).__name__ == "Normalize" for module in modules)
    if has_normalize and not record.normalize:
        raise HarnessError(
            f"model record {record.name} says normalize=false but the model ends with a Normalize module; "
            "fix its model record (harness/records/models/ or HARNESS_CONFIG_DIR/models/)"
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
