"""What an encoder computes with once it has loaded it: the model's weights and the onnx sessions.

Two model kinds, both loaded as a sentence-transformers model:

* ``sentence-transformers``: the model folder's own modules (Transformer, Pooling, Dense, ...), with
  the record's max length enforced and its pooling and normalisation cross-checked.
* ``transformers``: a plain transformers checkpoint (e.g. Contriever) with the pooling the record
  names (mean over the attention mask, CLS, or last token) and nothing taken from the folder.

Loading is the slow part, so it happens on first use and the weights are shared between the
encoders that can use the same ones (on a CPU: all of them), e.g. the candidates a runtime check
times. Nothing here decides how to compute: that is the encoder's ``RuntimeChoice``.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.encoding import onnx_quantize
from harness.encoding.memory import give_memory_back
from harness.encoding.onnx_export import ensure_exported, transformer_module
from harness.encoding.onnx_session import OnnxTransformer
from harness.models.resolve import ResolvedModel

log = logging.getLogger(__name__)

_ST_POOLING = {"mean": "mean", "cls": "cls", "last": "lasttoken"}


@contextlib.contextmanager
def library_progress_bars(shown: bool) -> Iterator[None]:
    """transformers' and huggingface_hub's own bars (weight loading, downloads) hidden inside the block
    unless ``shown`` (``--no-progress`` hides them); each library's setting comes back after it.
    """
    if shown:
        yield
        return
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as transformers_logging

    hub_bars_were_on = not hub_utils.are_progress_bars_disabled()
    transformers_bars_were_on = transformers_logging.is_progress_bar_enabled()
    with warnings.catch_warnings():  # HF_HUB_DISABLE_PROGRESS_BARS=0 in the environment wins, silently
        warnings.simplefilter("ignore")
        hub_utils.disable_progress_bars()
        transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if hub_bars_were_on:
            hub_utils.enable_progress_bars()
        if transformers_bars_were_on:
            transformers_logging.enable_progress_bar()


def weights_dtype(device: str, dtype: str) -> str:
    """The dtype the weights are held in: GPUs hold half-precision weights; the CPU keeps fp32 ones
    (and autocasts to bf16), and int8 is onnx's, quantized from the fp32 export.
    """
    return dtype if dtype in ("float16", "bfloat16") and device != "cpu" else "float32"


class ModelWeights:
    """A resolved model as a ``SentenceTransformer`` on one device, loaded on first use (then shared)."""

    def __init__(self, model: ResolvedModel, device: str, dtype: str):
        """``dtype``: the precision of the encoder that asked (the weights are ``weights_dtype`` of it)."""
        self.model = model
        self.device = device
        self.dtype = dtype
        self.st_model = None  # set by ``load``

    def load(self):
        """The underlying ``SentenceTransformer`` (loaded once, from the resolved local folder)."""
        if self.st_model is None:
            # transformers draws a bar per weight-loading call; our own bar is over documents.
            try:
                with library_progress_bars(shown=False):
                    self.st_model = self._load()
            except HarnessError:
                raise
            except Exception as error:  # corrupt weights, unsupported architecture, remote code refused
                text = (str(error).strip() or type(error).__name__).splitlines()[0][:300]
                raise HarnessError(
                    f"could not load model {self.model.record.name} from {self.model.source}: {text}"
                ) from error
        return self.st_model

    def _load(self):
        from sentence_transformers import SentenceTransformer

        record = self.model.record
        log.info("loading %s (%s) on %s, %s", record.name, record.kind, self.device, self.dtype)
        if record.kind == "transformers":
            model = SentenceTransformer(modules=self._pooled_modules(), device=self.device)
        else:
            model = SentenceTransformer(
                self.model.source,
                device=self.device,
                trust_remote_code=record.trust_remote_code,
                local_files_only=True,
                model_kwargs=self._model_kwargs(),
            )
            model.max_seq_length = record.max_length
            # Our prompts are the only ones: a prompt saved with the model must not be added twice.
            model.default_prompt_name = None
            if not self.model.assumed:
                _check_against_folder(model, record)
            include_prompt = effective_include_prompt(record)
            if (
                include_prompt is not None
            ):  # else the folder's Pooling config stands, as in sentence-transformers
                model.set_pooling_include_prompt(include_prompt)
        if record.padding_side is not None:
            model.tokenizer.padding_side = record.padding_side
        _check_pad_token(model, record)
        model.eval()
        return model

    def _model_kwargs(self) -> dict[str, Any]:
        import torch

        kwargs: dict[str, Any] = {"trust_remote_code": self.model.record.trust_remote_code}
        if weights_dtype(self.device, self.dtype) != "float32":
            kwargs["dtype"] = getattr(torch, self.dtype)
        return kwargs

    def _pooled_modules(self) -> list:
        """A plain transformers checkpoint as Transformer + the record's Pooling (nothing from the folder)."""
        record = self.model.record
        trust = record.trust_remote_code
        transformer_cls, pooling_cls = _st_modules()
        transformer = transformer_cls(
            self.model.source,
            max_seq_length=record.max_length,
            model_kwargs=self._model_kwargs(),
            processor_kwargs={"trust_remote_code": trust},
            config_kwargs={"trust_remote_code": trust},
        )
        pooling = pooling_cls(
            transformer.get_embedding_dimension(),
            pooling_mode=_ST_POOLING[record.pooling],
            include_prompt=effective_include_prompt(record) is not False,
        )
        return [transformer, pooling]


class LoadedModel:
    """The weights one encoder computes with, and the onnx sessions it built from them (for its
    precision and int8 settings), with the records of the graphs behind them for provenance.
    """

    def __init__(
        self,
        model: ResolvedModel,
        device: str,
        dtype: str,
        cache_dir: str | Path,
        quantization: dict[str, Any] | None = None,
        weights: ModelWeights | None = None,
    ):
        """``weights``: already (or lazily) loaded weights to share; they must be ``weights_dtype``-equal."""
        self.model = model
        self.device = device
        self.dtype = dtype
        self.cache_dir = Path(cache_dir)
        self.quantization = quantization
        self.weights = weights if weights is not None else ModelWeights(model, device, dtype)
        self.onnx_export: dict[str, Any] | None = None  # export record (+ ``quantization``/``fused``)
        self._sessions: dict[bool, OnnxTransformer] = {}

    def load(self):
        """The ``SentenceTransformer`` (loaded on first use)."""
        return self.weights.load()

    def for_precision(self, dtype: str, quantization: dict[str, Any] | None = None) -> LoadedModel:
        """A ``LoadedModel`` for another precision of the same model and device: the weights are shared
        where they are the same (on a CPU always), the onnx sessions are its own.
        """
        same = weights_dtype(self.device, dtype) == weights_dtype(self.device, self.dtype)
        weights = self.weights if same else None
        return LoadedModel(self.model, self.device, dtype, self.cache_dir, quantization, weights)

    def graph(self, fused: bool = False) -> Path:
        """The onnx graph this precision computes with: the export, its int8 version, or (``fused``) its
        fused one, each made once and kept in the cache. Making one briefly holds several copies of the
        model (the fusion above all), so that memory is given back before anything else is loaded.
        """
        graph, export = ensure_exported(self.load(), self.model, self.cache_dir)
        self.onnx_export = {**export, **(self.onnx_export or {})}
        if self.dtype == "int8":
            graph, record = onnx_quantize.ensure_quantized(graph, self.quantization)
            self.onnx_export["quantization"] = record
        elif fused:
            config = transformer_config(self.load())
            graph, record = onnx_quantize.ensure_fused(graph, config.num_attention_heads, config.hidden_size)
            self.onnx_export["fused"] = record
        give_memory_back()
        return graph

    def session(self, fused: bool = False) -> OnnxTransformer:
        """The onnxruntime session over ``graph(fused)``, built on first use and shared by every stream."""
        if fused not in self._sessions:
            self._sessions[fused] = OnnxTransformer(self.graph(fused))
        return self._sessions[fused]

    @property
    def sessions(self) -> list[str]:
        """The onnx sessions built and not freed: ``onnx`` (plain) and/or ``onnx-fused``."""
        return [("onnx-fused" if fused else "onnx") for fused in sorted(self._sessions)]

    def drop_sessions(self, keep: bool | None = None) -> None:
        """Free the onnx sessions (all but the ``keep`` one: True for the fused session, False for the
        plain one), e.g. those a runtime check built for the runtimes it did not choose.
        """
        for fused in [fused for fused in self._sessions if fused is not keep]:
            del self._sessions[fused]
        give_memory_back()

    def keep_only(self, runtime: str) -> None:
        """Free what was built for runtimes other than ``runtime`` (torch, onnx or onnx-fused): the other
        onnx sessions, and their graphs' records, which provenance would otherwise list.
        """
        fused = {"onnx": False, "onnx-fused": True}.get(runtime)
        self.drop_sessions(keep=fused)
        if fused is None:
            self.onnx_export = None
        elif not fused and self.onnx_export is not None:
            self.onnx_export.pop("fused", None)

    def release(self) -> None:
        """Free the weights and sessions (after the last batch; a later use loads them again)."""
        self._sessions.clear()
        self.weights.st_model = None
        give_memory_back()


def transformer_config(st_model):
    """The transformers config of a sentence-transformers model's first (transformer) module."""
    return transformer_module(st_model).auto_model.config


def _st_modules():
    """Transformer and Pooling modules (their import path moved in sentence-transformers 6)."""
    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Pooling, Transformer
    return Transformer, Pooling


def effective_include_prompt(record) -> bool | None:
    """Whether prompt tokens enter pooling: as resolved for the dataset, else as the record says (None:
    the record is silent, and the model folder's own Pooling config decides)."""
    resolved = record.resolved_prompts or {}
    return resolved.get("include_prompt", record.include_prompt)


def _check_pad_token(model, record) -> None:
    """Batches are padded: a tokenizer with no pad token (a decoder's, often) cannot batch at all."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None and getattr(tokenizer, "pad_token", "") is None:
        raise HarnessError(
            f"model {record.name}: its tokenizer has no pad token, so texts cannot be batched; set "
            "pad_token in the model folder's tokenizer_config.json (decoders usually reuse their EOS "
            "token, with padding_side: left in the model record)"
        )


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
