"""Prompts: the exact text put before each query and document, resolved per dataset as mteb resolves it.

A record's ``prompts`` use mteb's names; for a dataset (its MTEB task and task type from
``mteb_tasks.yaml``) the prompt of a role (query, document) is the first of ``{Task}-{role}``,
``{Task}``, ``{TaskType}-{role}``, ``{TaskType}``, ``{role}`` that the record names (mteb
``abs_encoder.get_prompt_name``). An ``instruction_template`` makes the query prompt the template
filled with the dataset's instruction (mteb's instruction models; documents keep their prompt).

A record that says nothing about prompts takes the model folder's own ``config_sentence_transformers.json``
(``prompts``, ``default_prompt_name``) as sentence-transformers' ``encode_query``/``encode_document`` do,
and ``include_prompt`` from its Pooling config. A record that contradicts the folder gets one warning
naming both (the record wins). ``bind_prompts`` returns the model with the resolution stored in its
record (``resolved_prompts``), so the texts reach the encoder, the cache key and the provenance.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.fileio import read_json, read_json_object
from harness.datasets.mteb_tasks import MtebTaskRecord, load_mteb_tasks
from harness.models.model_registry import PROMPT_ROLES, ModelRecord
from harness.models.resolve import ResolvedModel

log = logging.getLogger(__name__)

ST_CONFIG = "config_sentence_transformers.json"
# The prompt names sentence-transformers' encode_query / encode_document try, in order.
ST_ROLE_NAMES = {"query": ("query",), "document": ("document", "passage", "corpus")}
INSTRUCTION_KEY = "instruction_template"


@dataclass(frozen=True)
class FolderPrompts:
    """What a model folder's sentence-transformers files say about prompts and pooling."""

    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    include_prompt: bool | None = None  # the Pooling module's, when the folder has one

    def role_prompt(self, role: str) -> tuple[str, str | None]:
        """``(text, name)`` of the prompt sentence-transformers' encode_query/encode_document would use."""
        for name in ST_ROLE_NAMES[role]:
            if name in self.prompts:
                return self.prompts[name], name
        if self.default_prompt_name:
            return self.prompts[self.default_prompt_name], self.default_prompt_name
        return "", None


def folder_prompts(folder: str | Path) -> FolderPrompts:
    """The prompts and Pooling ``include_prompt`` of a sentence-transformers folder (empty when absent).

    A ``default_prompt_name`` that names no prompt is refused, as sentence-transformers refuses it.
    """
    folder = Path(folder) if folder else None
    if folder is None or not folder.is_dir():
        return FolderPrompts()
    config_path = folder / ST_CONFIG
    config = read_json_object(config_path) if config_path.is_file() else {}
    prompts = {
        str(name): str(text) for name, text in (config.get("prompts") or {}).items() if text is not None
    }
    default = config.get("default_prompt_name") or None
    if default is not None and default not in prompts:
        known = ", ".join(sorted(prompts)) or "none"
        raise HarnessError(
            f"{config_path}: default_prompt_name {default!r} names no prompt (prompts: {known}); "
            "fix default_prompt_name or add that prompt"
        )
    return FolderPrompts(prompts, default, _pooling_include_prompt(folder))


def _pooling_include_prompt(folder: Path) -> bool | None:
    modules_path = folder / "modules.json"
    modules = read_json(modules_path) if modules_path.is_file() else None
    if not isinstance(modules, list):
        return None
    for module in modules:
        if str(module.get("type", "")).endswith("Pooling"):
            config_path = folder / str(module.get("path", "")) / "config.json"
            config = read_json_object(config_path) if config_path.is_file() else {}
            return bool(config.get("include_prompt", True))
    return None


def prompt_name_for(prompts: dict[str, str], task: MtebTaskRecord | None, role: str) -> str | None:
    """The name of the prompt mteb uses for ``role`` on ``task``: ``{Task}-{role}``, ``{Task}``,
    ``{TaskType}-{role}``, ``{TaskType}``, ``{role}``, the first the prompts have (None: no prompt).
    """
    candidates = (
        [f"{task.task}-{role}", task.task, f"{task.task_type}-{role}", task.task_type] if task else []
    )
    return next((name for name in (*candidates, role) if name in prompts), None)


def resolve_prompts(record: ModelRecord, dataset: str | None, folder: FolderPrompts) -> dict[str, Any]:
    """``{dataset, task, source, include_prompt, prompts: {role: {text, key}}}`` for one dataset."""
    task = load_mteb_tasks().datasets.get(dataset) if dataset else None
    resolved: dict[str, dict[str, Any]] = {}
    if record.states_prompts:
        source, prompts = "record", record.role_prompts()
        for role in PROMPT_ROLES:
            key = prompt_name_for(prompts, task, role)
            resolved[role] = {"text": prompts[key] if key else "", "key": key}
        if record.instruction_template is not None and task is not None and task.instruction:
            text = record.instruction_template.format(instruction=task.instruction)
            resolved["query"] = {"text": text, "key": INSTRUCTION_KEY}
        _warn_on_contradiction(record, folder, resolved)
    else:
        source = ST_CONFIG
        for role in PROMPT_ROLES:
            key = prompt_name_for(folder.prompts, task, role)
            text, key = (folder.prompts[key], key) if key else folder.role_prompt(role)
            resolved[role] = {"text": text, "key": key}
    include_prompt = record.include_prompt
    if include_prompt is None:
        include_prompt = folder.include_prompt if folder.include_prompt is not None else True
    elif folder.include_prompt is not None and folder.include_prompt != include_prompt:
        warn_once(
            f"model record {record.name} says include_prompt={str(include_prompt).lower()} but its "
            f"folder's Pooling config says include_prompt={str(folder.include_prompt).lower()}; "
            "the record's is used"
        )
    return {
        "dataset": dataset,
        "task": task.task if task else None,
        "source": source,
        "include_prompt": include_prompt,
        "prompts": resolved,
    }


def _warn_on_contradiction(record: ModelRecord, folder: FolderPrompts, resolved: dict[str, Any]) -> None:
    """One warning per role whose record prompt differs from the folder's own (only when it has prompts)."""
    for role in PROMPT_ROLES:
        theirs, name = folder.role_prompt(role)
        mine = resolved[role]
        # An empty folder prompt is sentence-transformers' default saved ("no prompt"), not a statement;
        # a task-specific or instruction prompt is not what the folder's plain one is about.
        if not theirs or mine["key"] not in (None, role) or theirs == mine["text"]:
            continue
        warn_once(
            f"model record {record.name} gives the {role} prompt {mine['text']!r} but the model's "
            f"{ST_CONFIG} says {theirs!r} (prompts.{name}); the record's is used"
        )


@functools.cache
def warn_once(message: str) -> None:
    """A warning logged once per process (a model is bound once per dataset and per check)."""
    log.warning("%s", message)


def bind_record(record: ModelRecord, dataset: str | None, folder: str | Path | None) -> ModelRecord:
    """``record`` with its prompts resolved for ``dataset`` (lexical records are returned as they are)."""
    if record.is_lexical:
        return record
    resolved = resolve_prompts(record, dataset, folder_prompts(folder) if folder else FolderPrompts())
    return record.model_copy(update={"resolved_prompts": resolved})


def bind_prompts(model: ResolvedModel, dataset: str | None) -> ResolvedModel:
    """The resolved model with its record's prompts resolved for ``dataset`` (see the module docstring)."""
    record = bind_record(model.record, dataset, model.source)
    if record is model.record:
        return model
    return dataclasses.replace(model, record=record, assumed=list(model.assumed))
