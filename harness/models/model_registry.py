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
from harness.datasets.mteb_tasks import load_mteb_tasks

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

# What a record is: a dense encoder loaded through one of two libraries, a lexical (BM25) index, a learned
# sparse encoder (SPLADE, sentence-transformers' SparseEncoder) or a late-interaction one (ColBERT).
DENSE_KINDS = ("sentence-transformers", "transformers")
LEXICAL_KIND = "bm25"
SPARSE_KIND = "sparse"
MULTIVECTOR_KIND = "multivector"
KINDS = (*DENSE_KINDS, LEXICAL_KIND, SPARSE_KIND, MULTIVECTOR_KIND)
POOLINGS = ("mean", "cls", "last")
PADDING_SIDES = ("right", "left")
PROMPT_ROLES = ("query", "document")
# mteb's TaskMetadata.type values (mteb/abstasks/task_metadata.py TaskType): a bare prompt name may be one.
MTEB_TASK_TYPES = (
    "BitextMining",
    "Classification",
    "Clustering",
    "InstructionReranking",
    "InstructionRetrieval",
    "MultilabelClassification",
    "PairClassification",
    "Reranking",
    "Retrieval",
    "STS",
    "Summarization",
)
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
    # A dual encoder (DPR): queries are encoded by this model, documents by ``model_id``; both run with
    # the record's other settings (pooling, normalisation, prompts, max length). None: one model for both.
    query_model_id: str | None = None
    query_revision: str | None = None
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
    # How the model is prompted (issue 27; resolved per dataset by harness.models.prompts). ``prompts``
    # uses mteb's names: query, document, <Task>-query, <Task>, <TaskType>-document, <TaskType>, ...
    # ``query_prefix``/``doc_prefix`` are shorthands for prompts.query/prompts.document.
    prompts: dict[str, str] = {}
    instruction_template: str | None = None  # queries only; "{instruction}" is the dataset's instruction
    include_prompt: bool | None = None  # None: as the model folder's Pooling config says (else true)
    padding_side: str | None = None  # None: the tokenizer's own (last-token pooling wants left)
    truncate_dim: PositiveInt | tuple[PositiveInt, ...] | None = None  # Matryoshka dimension(s)
    sources: tuple[str, ...] = ()  # where the published settings come from (model card, mteb, paper)
    # Set by harness.models.prompts.bind_prompts for one dataset (never written in a record file): the
    # prompt text and the name that matched, per role, and the pooling settings taken from the folder.
    resolved_prompts: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        """Records written in code with the old spellings still build (``load_record`` names the file)."""
        return drop_deprecated_keys(data, "model record") if isinstance(data, dict) else data

    @model_validator(mode="before")
    @classmethod
    def _plain_prompts_are_the_prefixes(cls, data: Any) -> Any:
        """``prompts.query``/``prompts.document`` and ``query_prefix``/``doc_prefix`` name the same text:
        a record that writes one reads the same through the other (a prefix set beside a different
        prompt is refused after validation)."""
        if not isinstance(data, dict) or not isinstance(data.get("prompts"), dict):
            return data
        data = dict(data)
        for role, shorthand in (("query", "query_prefix"), ("document", "doc_prefix")):
            if role in data["prompts"] and not data.get(shorthand):
                data[shorthand] = data["prompts"][role]
        return data

    @field_validator("query_prefix", "doc_prefix", mode="before")
    @classmethod
    def _null_prefix_is_empty(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("prompts", mode="before")
    @classmethod
    def _null_prompts_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("prompts")
    @classmethod
    def _mteb_prompt_names(cls, prompts: dict[str, str]) -> dict[str, str]:
        for name in prompts:
            problem = prompt_name_problem(name)
            if problem:
                raise ValueError(problem)
        return prompts

    @field_validator("instruction_template")
    @classmethod
    def _template_has_placeholder(cls, value: str | None) -> str | None:
        if value is not None and "{instruction}" not in value:
            raise ValueError(
                f"instruction_template {value!r} lacks the {{instruction}} placeholder; write it where "
                "the dataset's instruction goes, e.g. 'Instruct: {instruction}\\nQuery:'"
            )
        return value

    @field_validator("padding_side")
    @classmethod
    def _known_padding_side(cls, value: str | None) -> str | None:
        if value is not None and value not in PADDING_SIDES:
            raise ValueError(f"padding_side {value!r} is not one of {', '.join(PADDING_SIDES)}")
        return value

    @field_validator("truncate_dim", mode="before")
    @classmethod
    def _dimension_list(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            if not value:
                return None
            if len(set(value)) != len(value):
                raise ValueError(f"truncate_dim {list(value)} repeats a dimension")
            return tuple(value)
        return value

    @field_validator("sources", mode="before")
    @classmethod
    def _sources_as_strings(cls, value: Any) -> Any:
        return () if value is None else tuple(str(source) for source in value)

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
        self._check_query_model()
        for role, prefix in (("query", self.query_prefix), ("document", self.doc_prefix)):
            if prefix and role in self.prompts and self.prompts[role] != prefix:
                shorthand = "query_prefix" if role == "query" else "doc_prefix"
                raise ValueError(
                    f"{shorthand} {prefix!r} and prompts.{role} {self.prompts[role]!r} disagree; keep one"
                )
        return self

    def _check_query_model(self) -> None:
        """A query model is a second dense encoder: it needs its hub id, and a dense kind to be one of."""
        if self.query_revision is not None and not self.query_model_id:
            raise ValueError(
                f"query_revision {self.query_revision!r} is set without query_model_id; name the query "
                "model (query_model_id: owner/name) or drop query_revision"
            )
        if self.query_model_id is not None and not self.query_model_id.strip():
            raise ValueError("query_model_id must not be empty; drop it to encode queries with model_id")
        if self.query_model_id and self.kind not in DENSE_KINDS:
            raise ValueError(
                f"query_model_id is for dense kinds ({', '.join(DENSE_KINDS)}), not kind {self.kind!r}"
                + (
                    "; a sparse record names its query encoder in params.query_encoder"
                    if self.is_sparse
                    else ""
                )
            )

    @property
    def is_dual_encoder(self) -> bool:
        """True when queries and documents are encoded by two different models (``query_model_id``)."""
        return bool(self.query_model_id)

    def query_side(self) -> ModelRecord:
        """The record that encodes the queries of a dual encoder: the same settings, ``model_id`` and
        ``revision`` those of the query model (itself when there is no separate query model)."""
        if not self.query_model_id:
            return self
        return self.model_copy(
            update={
                "model_id": self.query_model_id,
                "revision": self.query_revision,
                "query_model_id": None,
                "query_revision": None,
                "weights_package": None,  # a weights package ships the document model
            }
        )

    @property
    def truncate_dims(self) -> tuple[int, ...]:
        """The Matryoshka dimensions asked for (empty: the full size only)."""
        dims = self.truncate_dim
        return () if dims is None else (dims,) if isinstance(dims, int) else tuple(dims)

    def role_prompts(self) -> dict[str, str]:
        """``prompts`` with the ``query_prefix``/``doc_prefix`` shorthands folded in."""
        shorthands = {"query": self.query_prefix, "document": self.doc_prefix}
        return {**{role: text for role, text in shorthands.items() if text}, **self.prompts}

    @property
    def states_prompts(self) -> bool:
        """True when the record says how it is prompted (else the model folder's config is used)."""
        fields = {"prompts", "query_prefix", "doc_prefix", "instruction_template"}
        return bool(self.role_prompts() or self.instruction_template) or bool(fields & self.model_fields_set)

    @property
    def is_lexical(self) -> bool:
        """True for a lexical (BM25) record: no weights, no vectors, scored by an inverted index."""
        return self.kind == LEXICAL_KIND

    @property
    def is_sparse(self) -> bool:
        """True for a learned sparse record: one vocabulary-sized sparse vector per text."""
        return self.kind == SPARSE_KIND

    @property
    def is_multivector(self) -> bool:
        """True for a late-interaction record: one vector per token, scored by MaxSim."""
        return self.kind == MULTIVECTOR_KIND

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
            **self.prompt_settings(),
            "max_length": self.max_length,
            "title_join": self.title_join,
            "params": dict(self.params),
            **defaults,
        }

    def prompt_settings(self) -> dict[str, Any]:
        """The prompt texts used per role (``query_prefix``/``doc_prefix``: the exact text prepended), and,
        only when they are not the defaults (so that older cache keys stay valid), which prompt name
        matched, the instruction template, include_prompt, padding side and Matryoshka dimensions.

        Bound to a dataset (``harness.models.prompts.bind_prompts``), the texts are that dataset's;
        unbound, they are the plain ``query``/``document`` prompts.
        """
        resolved = self.resolved_prompts or {}
        prompts = resolved.get("prompts") or {
            role: {"text": text, "key": role}
            for role, text in self.role_prompts().items()
            if role in PROMPT_ROLES
        }
        query, document = prompts.get("query", {}), prompts.get("document", {})
        settings: dict[str, Any] = {
            "query_prefix": query.get("text", ""),
            "doc_prefix": document.get("text", ""),
        }
        keys = {role: entry["key"] for role, entry in prompts.items() if entry.get("text")}
        if keys and keys != {role: role for role in keys}:
            settings["prompt_keys"] = keys
        if self.instruction_template is not None and not resolved:
            settings["instruction_template"] = self.instruction_template
        include_prompt = resolved.get("include_prompt", self.include_prompt)
        if include_prompt is False:
            settings["include_prompt"] = False
        if self.padding_side is not None:
            settings["padding_side"] = self.padding_side
        if self.truncate_dim is not None:
            settings["truncate_dim"] = (
                list(self.truncate_dims) if len(self.truncate_dims) > 1 else self.truncate_dims[0]
            )
        return settings


def prompt_name_problem(name: str) -> str | None:
    """Why ``name`` is not an mteb prompt name (None when it is one): a role (query, document), a
    ``<Task or TaskType>-<role>``, or a bare task type or MTEB task name of ``mteb_tasks.yaml``.
    """
    head, _, role = name.rpartition("-")
    if name in PROMPT_ROLES or (head and role in PROMPT_ROLES):
        return None
    if name in MTEB_TASK_TYPES or name in known_task_names():
        return None
    return (
        f"unknown prompt name {name!r}: use query, document, <Task>-query, <Task>-document, <Task>, "
        f"<TaskType>-query, <TaskType>-document or <TaskType> (task types: {', '.join(MTEB_TASK_TYPES)})"
    )


@functools.cache
def known_task_names() -> frozenset[str]:
    """MTEB task names of ``mteb_tasks.yaml`` (shipped and the user's)."""
    return frozenset(record.task for record in load_mteb_tasks().datasets.values())


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


def record_file(record: ModelRecord) -> str:
    """The YAML file a registry record came from (shipped or the user's), for error lines; ``model record
    NAME`` for one built in code."""
    for path in record_folder_files("models").values():
        try:
            if read_mapping(path).get("name") == record.name:
                return str(path)
        except HarnessError:
            continue
    return f"model record {record.name}"


def load_record(path: str | Path) -> ModelRecord:
    """Read and validate one model YAML file; a bad or unknown key is one error naming the file and key."""
    data = drop_deprecated_keys(read_mapping(path), str(path))
    if "resolved_prompts" in data:
        raise InputError(
            path, None, "resolved_prompts is set by the harness per dataset", "write prompts instead"
        )
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
