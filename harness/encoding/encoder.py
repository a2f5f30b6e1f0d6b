"""Encoders: text in, float32 vectors out, exactly as the model record says.

An ``Encoder`` computes as its ``RuntimeChoice`` says (runtime, precision, int8 settings and the
checks behind them), made before it is built by ``harness.encoding.runtime_choice``
(``build_encoder``); its ``settings`` and ``describe`` are read from that choice and from what it
has loaded, never measured. The model (``harness.encoding.loaded_model``) loads on first use.

Texts are tokenized once, by the model's own ``preprocess``, a window of batches at a time: the
window (taken from the longest-first order sentence-transformers uses) is sorted by token count and
cut into batches padded only to their own longest text. On a CPU a batch is also capped by tokens
(``CPU_BATCH_TOKENS``), and one batch per encoder thread runs at once, each single-threaded; the vectors do not
depend on any of this beyond float rounding (batching is not part of the cache key). Prompts (the
record's, resolved for the dataset by ``harness.models.prompts``) are prepended here, as
sentence-transformers prepends them, so the text encoded is exactly ``Encoder.document_text(doc)`` /
``query_prompt + query``; each batch also carries the prompt's token count (``prompt_length``, counted
as sentence-transformers counts it), which the model's Pooling uses to keep the prompt's tokens out of
the pooled vector when ``include_prompt`` is false (sentence-transformers' ``Pooling(include_prompt=False)``).
Vectors are always full-size: Matryoshka dimensions are views of them (``harness.encoding.embedding_cache``).
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from harness.encoding.cpu import int8_cpu_class, relevant_cpu_flags
from harness.encoding.loaded_model import LoadedModel
from harness.encoding.memory import trim_heap
from harness.encoding.runtime import (
    RuntimeChoice,
    current_torch_threads,
    pick_device,
    short_precision,
    torch_threads,
)
from harness.models.resolve import ResolvedModel

log = logging.getLogger(__name__)

# Texts are tokenized and sorted a window of this many batches at a time: long enough for batches of
# near-equal length, short enough to bound memory and to move the progress bar. Tokenizing a window
# briefly holds ~90 KB a text (the tokenizer's own encodings), so its size, not the shard's, sets the
# encode stage's peak: 512 texts (batch size 128) pad scifact 0.10% past its real tokens, 2,048 0.05%.
CHUNK_BATCHES = 4
# On a CPU a batch holds at most this many padded tokens (and at most ``batch_size`` texts): its
# activations then stay in cache. MiniLM on scifact, one thread: 20.3 docs/s at 1024 tokens, 19.6 at
# 2048, 15.1 for 128 texts of 256 tokens at once. GPUs want big batches and get ``batch_size`` only.
CPU_BATCH_TOKENS = 1024


Batch = tuple[np.ndarray, np.ndarray]  # (positions in the input, float32 vectors)
Features = tuple[np.ndarray, dict[str, Any]]  # (positions in the input, one batch's tokenizer output)
# Settles a pending ``exact`` choice (runs, or reads, its check) with the encoder's loaded model.
Settle = Callable[[LoadedModel], RuntimeChoice]


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


def check_encoder_arguments(model: ResolvedModel, batch_size: int, threads: int | None) -> None:
    """Refuse, before any work, what no encoder can do: a lexical model, no batch, no thread."""
    record = model.record
    if record.is_lexical:
        raise HarnessError(f"model {record.name} is lexical ({record.kind}); it has no dense encoder")
    if batch_size <= 0:
        raise HarnessError(f"batch size must be positive, not {batch_size}")
    if threads is not None and threads <= 0:
        raise HarnessError(f"thread count must be positive, not {threads}")


class Encoder:
    """Encodes queries and documents for one resolved model, as its ``RuntimeChoice`` says."""

    def __init__(
        self,
        model: ResolvedModel,
        choice: RuntimeChoice,
        *,
        device: str | None = None,
        batch_size: int = 64,
        cache_dir: str | Path | None = None,
        threads: int | None = None,
        loaded: LoadedModel | None = None,
        settle: Settle | None = None,
    ):
        """``choice``: how to compute (``harness.encoding.runtime_choice.build_encoder`` makes it).
        ``threads``: torch threads this encoder computes with (default: torch's count now). On a CPU
        that many single-threaded batches run at once; the count is recorded in ``describe``.
        ``loaded``: the model (and onnx sessions) to compute with, e.g. the one a check already loaded.
        ``settle``: for a pending ``exact`` choice, what runs its check before the first batch.
        """
        check_encoder_arguments(model, batch_size, threads)
        self.model = model
        self.device = pick_device(device)
        self.batch_size = batch_size
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.max_batch_tokens = CPU_BATCH_TOKENS if self.device == "cpu" else None
        self.threads = threads if threads is not None else current_torch_threads()
        self._choice = choice
        self._settle = settle
        if loaded is None:
            loaded = LoadedModel(model, self.device, choice.dtype, self.cache_dir, choice.quantization)
        self.loaded = loaded
        self._prompt_lengths: dict[str, int] = {}
        # A dual encoder's query model (``build_encoder`` sets it): it encodes the queries, this one the
        # documents. None: this encoder encodes both.
        self.query_encoder: Encoder | None = None
        # Read once here, so that ``describe`` reads nothing.
        self.cpu = (
            {"flags": relevant_cpu_flags(), "int8_class": int8_cpu_class()} if self.device == "cpu" else None
        )

    # ---- the choice ---------------------------------------------------------------------------

    @property
    def choice(self) -> RuntimeChoice:
        return self._choice

    @property
    def runtime(self) -> str:
        return self._choice.runtime

    @property
    def dtype(self) -> str:
        return self._choice.dtype

    @property
    def quantization(self) -> dict[str, Any] | None:
        return self._choice.quantization

    @property
    def approximate(self) -> bool:
        """True for a precision whose vectors differ from fp32 (int8, bf16, fp16)."""
        return self._choice.approximate

    def precision_check(self) -> dict[str, Any] | None:
        """The check of this approximate setting against torch fp32 (None for an exact one)."""
        return self._choice.precision_check

    def check_setting(self) -> dict[str, Any]:
        """What an approximate setting's check is about: runtime, precision, quantization."""
        return self._choice.check_setting()

    def resolve_runtime(self) -> str:
        """The runtime that computes the vectors. A pending ``exact`` choice is settled here, once (its
        check run, or read, and recorded in the cache): the first batch needs it, and pools call this
        before starting workers so that all of them read the one recorded choice.
        """
        if not self._choice.settled:
            if self._settle is None:
                raise HarnessError(
                    f"no runtime chosen for {self.model.record.name} (build it with build_encoder)"
                )
            self._choice = self._settle(self.loaded)
        return self._choice.active

    # ---- settings ---------------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        """Everything that changes a vector: the record's settings plus how this run computes them.

        ``runtime`` is the one asked for: ``exact`` vectors equal torch fp32 whichever runtime the
        check chose, so the choice itself is provenance (``describe``), not part of the key. An
        approximate precision adds its quantization settings and its check's verdict; ``fast`` gives
        the settings of the setting it chose.
        """
        vector_settings = self.model.record.vector_settings()
        vector_settings.pop("truncate_dim", None)  # the vectors are full-size; dimensions are views of them
        return {**vector_settings, **self._choice.settings()}

    def describe(self) -> dict[str, Any]:
        """How this run computes its vectors, for provenance and the result table."""
        choice = self._choice
        return {
            "runtime": choice.runtime,
            "resolved_runtime": choice.active,
            "precision": short_precision(choice.dtype),
            "label": choice.label,
            "device": self.device,
            "threads": self.threads,
            "streams": self.streams(),
            "max_batch_tokens": self.max_batch_tokens,
            "batch_size": self.batch_size,
            "exact_check": choice.exact_check,
            "quantization": choice.quantization,
            "precision_check": choice.precision_check if choice.approximate else None,
            "fast": choice.fast,
            "cpu": self.cpu,
            "onnx_export": {
                key: value for key, value in (self.loaded.onnx_export or {}).items() if key != "key_inputs"
            }
            or None,
            **({"query_encoder": self.query_encoder.describe()} if self.query_encoder is not None else {}),
        }

    def label(self, active: str | None = None) -> str:
        """``onnx fp32``, ``exact (onnx) fp32``, ``onnx int8 dynamic-7bit``, ``fast: torch bf16``: the
        runtime column of a result table (``active``: name that runtime for a pending ``exact``).
        """
        return (self._choice if active is None else dataclasses.replace(self._choice, active=active)).label

    @property
    def dim(self) -> int:
        model = self.load()
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    # ---- text -------------------------------------------------------------------------------

    @property
    def query_prompt(self) -> str:
        """The exact text put before every query (the record's prompt resolved for the dataset)."""
        return self.model.record.prompt_settings()["query_prefix"]

    @property
    def document_prompt(self) -> str:
        """The exact text put before every document."""
        return self.model.record.prompt_settings()["doc_prefix"]

    def document_text(self, doc: TextDocument) -> str:
        """The exact text encoded for a document: prompt + ``(title + join + text).strip()`` (beir's rule)."""
        record = self.model.record
        joined = f"{doc.title or ''}{record.title_join}{doc.text or ''}".strip()
        return f"{self.document_prompt}{joined}"

    def query_text(self, query: str) -> str:
        return f"{self.query_prompt}{query}"

    # ---- encoding ---------------------------------------------------------------------------

    def query_side(self) -> Encoder:
        """The encoder of the queries: the query model's for a dual encoder, else this one."""
        return self.query_encoder if self.query_encoder is not None else self

    def encode_queries(self, texts: Sequence[str], *, progress: Progress | None = None) -> np.ndarray:
        """float32 ``(n, dim)`` query vectors, query prompt applied (by the query model of a dual encoder)."""
        if self.query_encoder is not None:
            vectors = self.query_encoder.encode_queries(texts, progress=progress)
            self._check_query_dimension(vectors)
            return vectors
        texts = [self.query_text(text) for text in texts]
        return self.encode_texts(texts, progress=progress, prompt=self.query_prompt)

    def _check_query_dimension(self, vectors: np.ndarray) -> None:
        """A dual encoder's query vectors against its document model's size (when that model is loaded:
        resolution already compared the sizes the model folders state)."""
        model = self.loaded.weights.st_model
        if model is None or len(vectors) == 0 or vectors.shape[1] == self.dim:
            return
        record = self.model.record
        raise HarnessError(
            f"model record {record.name}: its query model {record.query_model_id} gives "
            f"{vectors.shape[1]}-d vectors but its document model {record.model_id} gives {self.dim}-d "
            "ones; a dual encoder's two models must share one vector size (check query_model_id)"
        )

    def encode_documents(
        self, docs: Sequence[TextDocument], *, progress: Progress | None = None
    ) -> np.ndarray:
        """float32 ``(n, dim)`` document vectors (title joined, document prompt applied)."""
        texts = DocumentTexts(docs, self.document_text)
        return self.encode_texts(texts, progress=progress, prompt=self.document_prompt)

    def encode_texts(
        self, texts: Sequence[str], *, progress: Progress | None = None, prompt: str = ""
    ) -> np.ndarray:
        """Encode final texts (``prompt`` already prepended to each), longest first, in the input order."""
        if len(texts) == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        self.resolve_runtime()
        return self.encode_batches(self.tokenized_batches(texts, prompt=prompt), len(texts), progress)

    def encode_batches(
        self, batches: Iterable[Features], count: int, progress: Progress | None = None
    ) -> np.ndarray:
        """float32 ``(count, dim)`` vectors of all batches (from ``tokenized_batches``), computed on the
        chosen runtime with torch's threads set for this encoder's streams for exactly as long as the
        batches run (and given back afterwards, even on an error). The runtime checks time this.
        """
        runtime = self._choice.active
        if runtime is None:
            raise HarnessError(f"the exact runtime of {self.model.record.name} is not settled yet")
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

    def prompt_length(self, prompt: str) -> int | None:
        """The prompt's token count as sentence-transformers counts it (``Transformer._get_prompt_length``):
        the prompt tokenized alone, less a trailing special token (its SEP/EOS is not in the joined text).
        The model's Pooling drops that many leading tokens when ``include_prompt`` is false.
        """
        if not prompt:
            return None
        if prompt not in self._prompt_lengths:
            model = self.load()
            tokenize = getattr(model, "preprocess", None) or model.tokenize
            ids = tokenize([prompt])["input_ids"]
            length = int(ids.shape[-1])
            if int(ids[..., -1].item()) in set(getattr(model.tokenizer, "all_special_ids", ())):
                length -= 1
            self._prompt_lengths[prompt] = length
        return self._prompt_lengths[prompt]

    def tokenized_batches(self, texts: Sequence[str], *, prompt: str = "") -> Iterator[Features]:
        """``(positions, features)`` per batch; every text tokenized exactly once. ``prompt``: the text
        each one starts with (its token count goes with every batch, for Pooling's ``include_prompt``).
        """
        prompt_length = self.prompt_length(prompt)
        model = self.load()
        right_padded = getattr(model.tokenizer, "padding_side", "right") != "left"
        tokenize = getattr(model, "preprocess", None) or model.tokenize  # renamed in sentence-transformers 6
        # The order sentence-transformers uses, over all texts, so windows hold texts of similar length.
        order = np.argsort([-len(text) for text in texts], kind="stable")
        window = self.batch_size * CHUNK_BATCHES
        for start in range(0, len(texts), window):
            positions = order[start : start + window]
            # A plain dict of its tensors: the tokenizer's own per-text encodings (tokens, offsets, the
            # truncated overflow) take ~40 KB a text and would stay alive as long as the window's batches;
            # the heap pages they (and the previous window) used go back to the OS before the next batches.
            features = dict(tokenize([texts[i] for i in positions]))
            if prompt_length is not None:
                features["prompt_length"] = prompt_length
            trim_heap()
            lengths = features["attention_mask"].sum(dim=1).numpy()
            for rows in token_batches(lengths, self.batch_size, self.max_batch_tokens):
                longest = int(lengths[rows].max())
                columns = slice(None, longest) if right_padded else slice(-longest, None)
                yield positions[rows], _take(features, rows, columns, len(positions))

    def streams(self) -> int:
        """Batches computed at once: on a CPU one single-threaded batch per encoder thread, else one."""
        return self.threads if self.device == "cpu" else 1

    def _run(self, runtime: str, batches: Iterable[Features]) -> Iterator[Batch]:
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
            session = self.loaded.session(fused=runtime == "onnx-fused")
            # Pooling, Dense, Normalize: the model's own modules, so ONNX keeps prompt tokens out of the
            # pooling (``prompt_length`` rides in the features) and pools the last token of left-padded
            # batches exactly as torch does; the graph itself only maps tokens to token embeddings
            # (tests/test_prompt_parity.py checks both against sentence-transformers on onnx).
            tail = list(model)[1:]

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

    # ---- loading ----------------------------------------------------------------------------

    def load(self):
        """The underlying ``SentenceTransformer`` (loaded once, from the resolved local folder)."""
        return self.loaded.load()

    def release(self) -> None:
        """Free the model and onnx sessions once the last batch is done (a later batch loads them again)."""
        self.loaded.release()
        if self.query_encoder is not None:
            self.query_encoder.release()


class DocumentTexts(Sequence[str]):
    """The texts of some documents, each made when it is read: a shard's texts are never all in memory
    at once beside its documents (the encoder reads each one twice, for its length and its window).
    """

    def __init__(self, docs: Sequence[TextDocument], text_of: Callable[[TextDocument], str]):
        self.docs = docs
        self.text_of = text_of

    def __len__(self) -> int:
        return len(self.docs)

    def __getitem__(self, index: int) -> str:  # type: ignore[override]  # ints only: no slices needed
        return self.text_of(self.docs[index])


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
