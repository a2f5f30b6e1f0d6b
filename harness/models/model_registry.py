"""Model records: how each model must be run to reproduce its published numbers, and finding them by name.

A record (one YAML file per model in ``harness/records/models/``, or in ``HARNESS_CONFIG_DIR/models/``,
which adds records and overrides shipped ones of the same file name) pins everything that changes a
vector: kind, pooling, normalisation, prefixes, max length, title joining, plus the hub id and revision
the numbers were published with. Precision is not a record setting: it comes from ``--precision``.
"""

from __future__ import annotations

import difflib
import functools
import sys
from pathlib import Path
from typing import Any

from pydantic import PositiveInt, ValidationInfo, field_validator, model_validator

from harness.core.config import Record, read_mapping, record_folder_files, user_dir, validate
from harness.core.errors import HarnessError, InputError

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

# What a record is: a dense encoder loaded through one of two libraries, or a lexical (BM25) index.
DENSE_KINDS = ("sentence-transformers", "transformers")
LEXICAL_KIND = "bm25"
KINDS = (*DENSE_KINDS, LEXICAL_KIND)
POOLINGS = ("mean", "cls", "last")
SIMILARITIES = ("dot", "cosine")
# How the forward pass runs (``--runtime``) and in what precision (``--precision``); see harness.encoding.runtime.
RUNTIMES = ("torch", "onnx", "exact")
PRECISIONS = ("fp32", "bf16", "fp16", "int8", "fast")

_REQUIRED_DENSE = ("model_id", "pooling", "normalize", "similarity", "max_length")
_ALLOWED = {"kind": KINDS, "similarity": SIMILARITIES, "runtime": RUNTIMES, "precision": PRECISIONS}
DTYPE_IGNORED = "dtype is ignored; precision comes from --precision (fp32 default)"


class ModelRecord(Record):
    """How one model must be run to reproduce its published numbers."""

    name: str
    aliases: tuple[str, ...] = ()
    model_id: str = ""
    revision: str | None = None
    kind: str = "sentence-transformers"
    pooling: str = "mean"
    normalize: bool = False
    similarity: str = "cosine"
    query_prefix: str = ""
    doc_prefix: str = ""
    max_length: PositiveInt = 512
    title_join: str = " "
    weights_package: str | None = None
    trust_remote_code: bool = False
    params: dict[str, Any] = {}
    runtime: str | None = None  # default --runtime (None: exact)
    precision: str | None = None  # default --precision (None: fp32)

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        """Records written in code with the old spellings still build (``load_record`` names the file)."""
        return drop_deprecated_keys(data, "model record") if isinstance(data, dict) else data

    @field_validator("query_prefix", "doc_prefix", mode="before")
    @classmethod
    def _null_prefix_is_empty(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("aliases", mode="before")
    @classmethod
    def _aliases_as_strings(cls, value: Any) -> Any:
        return () if value is None else tuple(str(alias) for alias in value)

    @field_validator("kind", "similarity", "runtime", "precision")
    @classmethod
    def _one_of_the_known_values(cls, value: str | None, info: ValidationInfo) -> str | None:
        allowed = _ALLOWED[info.field_name]
        if value is not None and value not in allowed:
            raise ValueError(f"{info.field_name} {value!r} is not one of {', '.join(allowed)}")
        return value

    @field_validator("params", mode="before")
    @classmethod
    def _null_params_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @model_validator(mode="after")
    def _dense_settings(self) -> ModelRecord:
        if self.kind == "transformers" and self.pooling not in POOLINGS:
            raise ValueError(f"pooling {self.pooling!r} is not one of {', '.join(POOLINGS)}")
        if not self.name.strip():
            raise ValueError("name must not be empty")
        return self

    @property
    def is_lexical(self) -> bool:
        """True for a lexical (BM25) record: no weights, no vectors, scored by an inverted index."""
        return self.kind == LEXICAL_KIND

    def vector_settings(self) -> dict[str, Any]:
        """Every record setting that changes a stored vector (part of the cache key and the provenance).

        ``similarity`` is left out on purpose: it changes how vectors are compared, not the vectors.
        ``runtime``/``precision`` appear only when the record sets them.
        """
        defaults = {key: getattr(self, key) for key in ("runtime", "precision") if getattr(self, key)}
        return {
            "kind": self.kind,
            "pooling": self.pooling,
            "normalize": self.normalize,
            "query_prefix": self.query_prefix,
            "doc_prefix": self.doc_prefix,
            "max_length": self.max_length,
            "title_join": self.title_join,
            "params": dict(self.params),
            **defaults,
        }


@functools.cache
def note_once(message: str) -> None:
    """Print a deprecation note on stderr, once per process and message."""
    print(f"note: {message}", file=sys.stderr)


def drop_deprecated_keys(data: dict[str, Any], where: str) -> dict[str, Any]:
    """``data`` with ``backend`` renamed to ``kind`` and ``dtype`` dropped, one note each naming ``where``."""
    data = dict(data)
    if "backend" in data:
        note_once(f"{where}: 'backend' is deprecated, use 'kind'")
        backend = data.pop("backend")
        data.setdefault("kind", backend)
    if "dtype" in data:
        note_once(f"{where}: {DTYPE_IGNORED}")
        data.pop("dtype")
    return data


def load_record(path: str | Path) -> ModelRecord:
    """Read and validate one model YAML file; a bad or unknown key is one error naming the file and key."""
    data = drop_deprecated_keys(read_mapping(path), str(path))
    if data.get("kind", "sentence-transformers") in DENSE_KINDS:
        missing = [key for key in _REQUIRED_DENSE if key not in data]
        if missing:
            problem = f"dense model record lacks {', '.join(missing)}"
            raise InputError(path, None, problem, "state them explicitly")
    return validate(ModelRecord, data, path)


def models_config_dir() -> Path:
    """Where a user adds model records: ``HARNESS_CONFIG_DIR/models`` (shown in hints)."""
    user = user_dir()
    return user / "models" if user is not None else Path("$HARNESS_CONFIG_DIR/models")


def model_registry(directory: str | Path | None = None) -> dict[str, ModelRecord]:
    """All model records by name (shipped, then the user's overlay); names and aliases must be unique."""
    if directory is not None:
        folder = Path(directory)
        files = {path.stem: path for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])}
    else:
        files = record_folder_files("models")
    records: dict[str, ModelRecord] = {}
    claimed: dict[str, Path] = {}
    for path in files.values():
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


def unknown_model_error(spec: str, registry: dict[str, ModelRecord] | None, why: str) -> HarnessError:
    """One line for a model nobody knows, with the registry names it may have meant."""
    matches = close_matches(spec, registry)
    suggestion = f"; did you mean {', '.join(matches)}?" if matches else ""
    return HarnessError(
        f"unknown model {spec!r}: {why}{suggestion} (registry: {models_config_dir()}; "
        "a local checkpoint folder or a hub id such as BAAI/bge-small-en-v1.5 also works)"
    )
