"""Preflight: where a model's record, its own saved configuration and mteb disagree about how to run it.

Three sources say how a model should be run on a dataset: its harness record; the files
sentence-transformers saved beside the weights (``modules.json``, the Pooling module's ``config.json``,
``sentence_bert_config.json``, ``config_sentence_transformers.json``); and, when mteb is installed, mteb's
``ModelMeta`` for the model with the task's own metadata (instruction, task type, identical-id rule).
Disagreements between them are the most common reason a published number does not reproduce (a prompt
lost, a pooling mode changed, a different max length). :func:`preflight` compares every setting that can
move a number and says, for each disagreement, how the record would read if it followed the other source
(the alternative that ``harness check-model --probe`` measures).
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.core.fileio import read_json, read_json_object
from harness.datasets.dataset_registry import dataset_registry
from harness.datasets.mteb_tasks import MtebTaskRecord, load_mteb_tasks
from harness.models.model_registry import ModelRecord
from harness.models.prompts import INSTRUCTION_KEY, ST_CONFIG, FolderPrompts, folder_prompts, resolve_prompts
from harness.models.resolve import ResolvedModel, pooling_from_config

log = logging.getLogger(__name__)

ROLES = ("query", "document")
# sentence-transformers' encode_document tries these prompt names in this order (SentenceTransformer).
DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")
# What a record setting is called in the report, and the record field an alternative changes.
PROMPT_SETTING = {"query": "query prompt", "document": "document prompt"}
DROP_IDENTICAL_IDS = "drop_identical_ids"  # an alternative for the evaluation, not for the record


@dataclass(frozen=True)
class SourceValue:
    """What one source says about one setting: ``source`` names the file or metadata it was read from."""

    source: str
    value: Any


@dataclass(frozen=True)
class SettingCheck:
    """One setting as the record states it, beside what every other source that states it says."""

    setting: str
    record: Any
    others: tuple[SourceValue, ...]
    # The record change (field -> value) that makes the record follow the first source that disagrees;
    # ``drop_identical_ids`` changes the evaluation, not the record.
    changes: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # why a disagreement matters less (or more) than it looks
    query_side: bool = False  # the change touches queries only (documents keep their vectors)

    @property
    def disagreements(self) -> list[SourceValue]:
        return [other for other in self.others if other.value != self.record]

    @property
    def agrees(self) -> bool:
        return not self.disagreements

    @property
    def alternative(self) -> Any:
        """The value the first disagreeing source gives (None when every source agrees)."""
        return self.disagreements[0].value if self.disagreements else None


@dataclass
class Preflight:
    """Every checked setting of one model on one dataset, and what could not be compared and why."""

    model: str
    dataset: str
    folder: str
    checks: list[SettingCheck]
    mteb_version: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def disagreements(self) -> list[SettingCheck]:
        return [check for check in self.checks if not check.agrees]


# ----------------------------------------------------------------------------- the model's own files


@dataclass(frozen=True)
class FolderConfig:
    """What a model folder's sentence-transformers files state; ``None`` where they state nothing."""

    prompts: dict[str, str] | None = None  # config_sentence_transformers.json "prompts"
    default_prompt_name: str | None = None
    similarity: str | None = None  # config_sentence_transformers.json "similarity_fn_name"
    pooling: str | None = None  # from the Pooling module's config.json
    pooling_file: str = ""
    include_prompt: bool | None = None  # the Pooling module's "include_prompt" (default true)
    normalize: bool | None = None  # a Normalize module in modules.json
    max_length: int | None = None  # sentence_bert_config.json "max_seq_length" (or the tokenizer's)
    max_length_file: str = ""

    def prompt(self, role: str) -> str | None:
        """The prompt sentence-transformers' ``encode_query``/``encode_document`` would prepend."""
        if self.prompts is None:
            return None
        default = self.prompts.get(self.default_prompt_name or "", "")
        names = ("query",) if role == "query" else DOCUMENT_PROMPT_NAMES
        return next((self.prompts[name] for name in names if name in self.prompts), default) or ""


def read_folder_config(folder: Path) -> FolderConfig:
    """The settings a model folder's sentence-transformers files state (none for a plain transformers folder)."""
    st_config = _object(folder / "config_sentence_transformers.json")
    bert_config = _object(folder / "sentence_bert_config.json")
    modules = read_json(folder / "modules.json") if (folder / "modules.json").is_file() else None
    pooling = pooling_file = include_prompt = normalize = None
    if isinstance(modules, list):
        normalize = any(str(module.get("type", "")).endswith("Normalize") for module in modules)
        for module in modules:
            if str(module.get("type", "")).endswith("Pooling"):
                pooling_file = f"{module.get('path') or '.'}/config.json"
                config = _object(folder / pooling_file) or {}
                pooling = pooling_from_config(config)
                include_prompt = bool(config.get("include_prompt", True))
    max_length, max_length_file = _max_length(folder, bert_config)
    return FolderConfig(
        prompts=dict((st_config or {}).get("prompts") or {}) if st_config is not None else None,
        default_prompt_name=(st_config or {}).get("default_prompt_name"),
        similarity=(st_config or {}).get("similarity_fn_name"),
        pooling=pooling,
        pooling_file=pooling_file or "",
        include_prompt=include_prompt,
        normalize=normalize,
        max_length=max_length,
        max_length_file=max_length_file,
    )


def _max_length(folder: Path, bert_config: dict[str, Any] | None) -> tuple[int | None, str]:
    """The folder's max sequence length and the file stating it: ``sentence_bert_config.json``'s
    ``max_seq_length``, or (sentence-transformers 6 saves it there) the tokenizer's ``model_max_length``
    when it is a real limit rather than transformers' "no limit" sentinel."""
    length = (bert_config or {}).get("max_seq_length")
    if isinstance(length, int) and length > 0:
        return length, "sentence_bert_config.json"
    if bert_config is not None:
        tokenizer_length = (_object(folder / "tokenizer_config.json") or {}).get("model_max_length")
        if isinstance(tokenizer_length, int) and 0 < tokenizer_length < 1_000_000:
            return tokenizer_length, "tokenizer_config.json (model_max_length)"
    return None, ""


def _object(path: Path) -> dict[str, Any] | None:
    return read_json_object(path) if path.is_file() else None


# ------------------------------------------------------------------------------------------- mteb


@dataclass(frozen=True)
class MtebView:
    """What mteb would run: its ModelMeta's settings and the prompt text per role for one task."""

    version: str
    revision: str | None
    similarity: str | None
    max_tokens: int | None
    prompts: dict[str, str]  # role -> the exact text mteb prepends for this task
    prompt_origin: str  # where mteb's prompts come from (ModelMeta, its instruction template, the model)


def mteb_view(model_id: str, task: str, folder_config: FolderConfig) -> MtebView | None:
    """mteb's settings for ``model_id`` on ``task``; None when mteb is not installed or lacks the model."""
    if importlib.util.find_spec("mteb") is None:
        return None
    import mteb  # optional dependency, imported only when installed (it takes seconds)

    try:
        meta = mteb.get_model_meta(model_id)
    except (KeyError, ValueError):
        return None
    metadata = mteb.get_task(task).metadata
    kwargs = mteb_loader_settings(meta)
    prompts, origin = _mteb_prompts(kwargs, metadata, folder_config)
    similarity = meta.similarity_fn_name
    return MtebView(
        version=mteb.__version__,
        revision=meta.revision,
        similarity=getattr(similarity, "value", similarity),
        max_tokens=int(meta.max_tokens) if meta.max_tokens else None,
        prompts=prompts,
        prompt_origin=origin,
    )


def mteb_loader_settings(meta: Any) -> dict[str, Any]:
    """The settings mteb's loader runs a model with: ``loader_kwargs``, plus what a loader function fixes
    in its own code (Qwen3-Embedding's ``q3e_instruct_loader`` passes its module's ``instruction_template``
    and ``apply_instruction_to_passages=False`` itself, so they are not in ``loader_kwargs``)."""
    settings = dict(meta.loader_kwargs or {})
    loader = meta.loader
    if not inspect.isfunction(loader) or "instruction_template" in settings:
        return settings
    source = inspect.getsource(loader)
    template = getattr(inspect.getmodule(loader), "instruction_template", None)
    if template is not None and "instruction_template=instruction_template" in source:
        settings["instruction_template"] = template
        passages = re.search(r"apply_instruction_to_passages=(True|False)", source)
        if passages:
            settings["apply_instruction_to_passages"] = passages.group(1) == "True"
    return settings


def _mteb_prompts(kwargs: dict[str, Any], metadata: Any, folder_config: FolderConfig) -> tuple[dict, str]:
    """The text mteb prepends per role: an instruction template (queries, and documents only when
    ``apply_instruction_to_passages``), else the prompt its ModelMeta names for the task in mteb's order
    (``{Task}-{role}``, ``{Task}``, ``{TaskType}-{role}``, ``{TaskType}``, ``{role}``), else the model's own
    prompts (mteb uses the model's config when ModelMeta gives none)."""
    from mteb.models.abs_encoder import get_prompt_name
    from mteb.types import PromptType

    template = kwargs.get("instruction_template")
    if template is not None:
        on_documents = kwargs.get("apply_instruction_to_passages", True)
        texts = {}
        for role in ROLES:
            prompt_type = PromptType(role)
            instruction = (metadata.prompt or {}).get(role, "") if isinstance(metadata.prompt, dict) else ""
            if role == "document" and not on_documents:
                texts[role] = ""
            elif callable(template):
                texts[role] = template(instruction, prompt_type)
            else:
                texts[role] = template.format(instruction=instruction) if instruction else ""
        return texts, "mteb ModelMeta instruction_template"
    model_prompts = kwargs.get("model_prompts")
    if model_prompts:
        texts = {}
        for role in ROLES:
            name = get_prompt_name(model_prompts, metadata, PromptType(role))
            texts[role] = model_prompts.get(name, "") if name else ""
        return texts, "mteb ModelMeta model_prompts"
    return {role: folder_config.prompt(role) or "" for role in ROLES}, "mteb (the model's own prompts)"


# ------------------------------------------------------------------------------------------- checks


def prompt_change(record: ModelRecord, role: str, key: str | None, text: str) -> dict[str, Any]:
    """The record change that makes ``role``'s prompt ``text``: the prompt that matched (or the role's
    plain one) rewritten, the shorthands folded into ``prompts``, an instruction template dropped."""
    prompts = record.role_prompts()
    prompts[role if key in (None, INSTRUCTION_KEY) else key] = text
    change: dict[str, Any] = {"prompts": prompts, "query_prefix": "", "doc_prefix": ""}
    if key == INSTRUCTION_KEY:
        change["instruction_template"] = None
    return change


def preflight(model: ResolvedModel, dataset: str) -> Preflight:
    """Every setting of ``model`` on ``dataset`` that its record, its folder's files and mteb state."""
    record = model.record
    folder = Path(model.source) if model.source else None
    config = read_folder_config(folder) if folder is not None else FolderConfig()
    task = load_mteb_tasks().datasets.get(dataset)
    view = None
    if task is not None and not record.is_lexical:
        view = mteb_view(record.model_id or record.name, task.task, config)
    found = Preflight(record.name, dataset, str(folder or ""), [], view.version if view else None)
    if view is None:
        found.notes.append(_no_mteb_note(record, dataset, task))
    resolved = resolve_prompts(record, dataset, folder_prompts(folder) if folder else FolderPrompts())
    for role in ROLES:
        mine = resolved["prompts"][role]
        others = [SourceValue(f"model {ST_CONFIG}", config.prompt(role))]
        if view is not None:
            others.append(SourceValue(f"{view.prompt_origin} ({task.task})", view.prompts[role]))
        check = _check(PROMPT_SETTING[role], mine["text"], others)
        if not check.agrees:
            changes = prompt_change(record, role, mine["key"], check.alternative)
            check = replace(check, changes=changes, query_side=role == "query")
        found.checks.append(check)
    found.checks += [
        _check(
            "pooling",
            record.pooling,
            [SourceValue(f"model {config.pooling_file}", config.pooling)],
            "pooling",
        ),
        _check(
            "normalize",
            record.normalize,
            [SourceValue("model modules.json (Normalize module)", config.normalize)],
            "normalize",
            note="rank-neutral under cosine similarity" if record.similarity == "cosine" else "",
        ),
        _check(
            "max length",
            record.max_length,
            [
                SourceValue(f"model {config.max_length_file}", config.max_length),
                SourceValue("mteb ModelMeta max_tokens", view.max_tokens if view else None),
            ],
            "max_length",
        ),
        _check(
            "similarity",
            record.similarity,
            [
                SourceValue(f"model {ST_CONFIG}", config.similarity),
                SourceValue("mteb ModelMeta", view.similarity if view else None),
            ],
            "similarity",
        ),
        _check(
            "revision",
            record.revision,
            [SourceValue("mteb ModelMeta", view.revision if view else None)],
            "revision",
        ),
    ]
    if task is not None:
        found.checks.append(_identical_ids_check(dataset, task))
    return found


def _check(
    setting: str, record_value: Any, others: list[SourceValue], field: str | None = None, note: str = ""
) -> SettingCheck:
    """A check against the sources that state the setting (a source that states nothing is left out);
    on a disagreement, ``field`` is the record field (or ``drop_identical_ids``) its alternative changes."""
    stated = tuple(other for other in others if other.value is not None)
    check = SettingCheck(setting, record_value, stated, note=note)
    if field is None or check.agrees:
        return check
    return replace(check, changes={field: check.alternative})


def _identical_ids_check(dataset: str, task: MtebTaskRecord) -> SettingCheck:
    registry = dataset_registry()
    harness_rule = registry[dataset].drop_identical_ids if dataset in registry else None
    return _check(
        "drop identical ids",
        harness_rule,
        [SourceValue(f"mteb task {task.task} ignore_identical_ids", task.ignore_identical_ids)],
        DROP_IDENTICAL_IDS,
        note="the dataset registry's rule (--drop-identical-ids overrides it)",
    )


def _no_mteb_note(record: ModelRecord, dataset: str, task: MtebTaskRecord | None) -> str:
    if task is None:
        return f"dataset {dataset} has no MTEB task (mteb_tasks.yaml): mteb's settings were not compared"
    if record.is_lexical:
        return "a lexical model: no prompts, pooling or folder files to compare"
    if importlib.util.find_spec("mteb") is None:
        return "mteb is not installed: its ModelMeta and task prompts were not compared"
    return f"mteb has no ModelMeta for {record.model_id or record.name}: compared with the model's files only"
