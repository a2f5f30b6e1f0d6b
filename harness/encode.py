"""Encoders: text in, float32 vectors out, exactly as the model record says.

Both backends run on sentence-transformers' inference loop (length-sorted batches, no per-batch
overhead of ours), so the harness encodes as fast as a bare ``SentenceTransformer.encode``:

* ``sentence-transformers``: the model folder's own modules (Transformer, Pooling, Dense, ...), with
  the record's max length and prefixes enforced and its pooling and normalisation cross-checked.
* ``transformers``: a plain transformers checkpoint (e.g. Contriever) with the pooling the record
  names (mean over the attention mask, CLS, or last token) and nothing taken from the folder.

Prefixes are prepended here, never through sentence-transformers prompts, so the text that was
encoded is exactly ``Encoder.document_text(doc)`` / ``query_prefix + query``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from harness.errors import HarnessError
from harness.models import DENSE_BACKENDS, ResolvedModel

log = logging.getLogger(__name__)

# Documents are handed to sentence-transformers in length-sorted chunks of this many batches: the
# batches are the same as for one big call, and the progress bar moves between chunks.
CHUNK_BATCHES = 16

_ST_POOLING = {"mean": "mean", "cls": "cls", "last": "lasttoken"}


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


def effective_dtype(record_dtype: str, device: str) -> str:
    """Half precision only on CUDA and only when the record allows it; float32 everywhere else."""
    if not device.startswith("cuda") or record_dtype == "float32":
        return "float32"
    if record_dtype == "bfloat16":
        import torch

        if not torch.cuda.is_bf16_supported():
            return "float16"
    return record_dtype


class Encoder:
    """Encodes queries and documents for one resolved model. The model loads on first use."""

    def __init__(self, model: ResolvedModel, *, device: str | None = None, batch_size: int = 64):
        record = model.record
        if record.backend not in DENSE_BACKENDS:
            raise HarnessError(
                f"model {record.name} uses the {record.backend} backend, which has no dense encoder"
            )
        if batch_size <= 0:
            raise HarnessError(f"batch size must be positive, not {batch_size}")
        self.model = model
        self.device = pick_device(device)
        self.batch_size = batch_size
        self.dtype = effective_dtype(record.dtype, self.device)
        self._st_model = None

    # ---- settings ---------------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        """Everything that changes a vector: the record's settings plus how this run computes them."""
        return {**self.model.record.vector_settings(), "runtime": "torch", "precision": self.dtype}

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
        model = self.load()
        if len(texts) == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        # The same ordering sentence-transformers uses internally, done once over all texts so that
        # chunking (for progress) does not change which texts share a batch.
        order = np.argsort([-len(text) for text in texts], kind="stable")
        chunk = self.batch_size * CHUNK_BATCHES
        vectors: np.ndarray | None = None
        for start in range(0, len(texts), chunk):
            positions = order[start : start + chunk]
            encoded = model.encode(
                [texts[i] for i in positions],
                batch_size=self.batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
                normalize_embeddings=self.model.record.normalize,
            )
            if vectors is None:
                vectors = np.empty((len(texts), encoded.shape[1]), dtype=np.float32)
            vectors[positions] = encoded
            if progress is not None:
                progress.update(len(positions))
        return vectors

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
        if self.dtype != "float32":
            model_kwargs["dtype"] = getattr(torch, self.dtype)
        log.info("loading %s (%s backend) on %s, %s", record.name, record.backend, self.device, self.dtype)

        if record.backend == "transformers":
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
