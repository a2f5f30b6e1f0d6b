"""An experiment file: its schema, shared parameters, ``--set`` overrides, and its resolved steps.

An experiment is YAML::

    name: scifact-dense-vs-bm25          # default: the file's stem
    output: experiments/scifact          # default: experiments/<name> (relative to the working folder)
    params:                              # shared values; a step refers to one as ${name}
      mirror: ../shared/data/beir
    steps:
      - kind: eval                       # a command that runs as a step (harness.api.commands.STEP_KINDS)
        id: eval                         # default: the kind (kind-2, kind-3 when it repeats)
        dataset: scifact
        model: [bm25, minilm]
        mirror: ${mirror}

``${name}`` that is a whole value keeps the parameter's type (a list stays a list); inside a longer string it
is replaced by its text. A parameter may use the ones above it and the built-in ``${data_dir}``,
``${cache_dir}``, ``${results_dir}`` (the harness's folders: env ``HARNESS_*_DIR`` or ``data/``, ``cache/``,
``results/``); steps may also use ``${output}`` (the experiment's folder). Relative paths are relative to the working
folder, as on the command line.

``--set NAME=VALUE`` (VALUE read as YAML: ``10``, ``[bm25, minilm]``) replaces parameter NAME or the
top-level ``name``/``output``; ``--set STEP.OPTION=VALUE`` sets one option of the step with that id. An
UltraRAG parameter file takes dotted paths into the file (``--set evaluation.save_path=out.json``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import field_validator

from harness.core.config import Record, RefusedYAML, load_yaml, read_mapping, validate
from harness.core.credentials import redacted
from harness.core.errors import HarnessError, InputError
from harness.core.options import OptionsRecord
from harness.core.output_guard import check_output
from harness.core.paths import default_cache_dir, default_data_dir, default_results_dir
from harness.experiments import ultrarag

_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_-]*)\}")
_PLAIN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
DEFAULT_OUTPUT_ROOT = "experiments"
# The experiment folder's own files (the resolved experiment, what each step did): no step folder may take
# one of their names.
RESOLVED_FILE = "experiment.yaml"
SUMMARY_FILE = "steps.json"
TOP_LEVEL_SETTABLE = ("name", "output")
# Command options a step does not take: a step writes into its own folder.
NOT_STEP_OPTIONS = ("output",)


class StepResult(Protocol):
    """What running a step gives back (``harness.api.command_result.StepOutcome``)."""

    outputs: list[Path]
    summary: list[str]
    reused: bool
    exit_code: int


class StepKind(Protocol):
    """A command that runs as a step: its name, its options record, how it runs, what it reads.

    ``step_inputs`` is None when the stage's own cache decides reuse (eval, reproduce).
    """

    name: str
    options: type[OptionsRecord]
    step: Callable[[Any, Path], StepResult]
    step_inputs: Callable[[Any], dict[str, str | Path]] | None


class ExperimentRecord(Record):
    """The top of an experiment file; each step is checked against its kind's schema afterwards."""

    name: str | None = None
    description: str | None = None
    output: str | None = None
    params: dict[str, Any] = {}
    steps: list[dict[str, Any]]

    @field_validator("steps")
    @classmethod
    def _not_empty(cls, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not steps:
            raise ValueError("an experiment needs at least one step")
        return steps


@dataclass(frozen=True)
class Step:
    """One resolved step: its id, kind, checked options and output folder."""

    id: str
    kind: StepKind
    options: OptionsRecord
    directory: Path

    def options_json(self, *, exclude_defaults: bool = False) -> dict[str, Any]:
        """The step's options as JSON values (those of its command a step does not take left out), a URL's
        credentials redacted: these values are written and printed."""
        return redacted(
            self.options.model_dump(
                mode="json", exclude=set(NOT_STEP_OPTIONS), exclude_defaults=exclude_defaults
            )
        )

    def resolved(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind.name, **self.options_json()}


@dataclass(frozen=True)
class Experiment:
    """An experiment with every parameter substituted and every step checked."""

    name: str
    source: Path
    output: Path
    params: dict[str, Any]
    steps: list[Step]
    overrides: list[str]
    origin: str  # "experiment" or "ultrarag"

    def resolved(self) -> dict[str, Any]:
        """What is written to ``<output>/experiment.yaml``: the experiment as it ran."""
        return {
            "name": self.name,
            "source": str(self.source),
            "origin": self.origin,
            # A URL's credentials in a value (a judge's base URL) are never written.
            "overrides": redacted(list(self.overrides)),
            "output": str(self.output),
            "params": redacted(self.params),
            "steps": [step.resolved() for step in self.steps],
        }


def parse_overrides(pairs: list[str]) -> list[tuple[str, Any]]:
    """``["k=v", ...]`` as ``[(k, YAML value of v), ...]``."""
    parsed = []
    for pair in pairs:
        key, equals, text = pair.partition("=")
        if not equals or not key.strip():
            raise HarnessError(f"--set {pair!r}: expected KEY=VALUE")
        try:
            value = load_yaml(text) if text.strip() else ""
        except RefusedYAML as error:
            raise HarnessError(f"--set {key.strip()}: {error.problem} ({error.fix})") from None
        except yaml.YAMLError:
            value = text  # not YAML: the text itself (``--set name=a: b``)
        parsed.append((key.strip(), value))
    return parsed


def load_experiment(
    path: str | Path, overrides: list[str] | None, kinds: Mapping[str, StepKind]
) -> Experiment:
    """Read, override, substitute and validate an experiment file (or an UltraRAG parameter file).

    ``kinds``: the commands a step may name, by kind.
    """
    path = Path(path)
    overrides = list(overrides or [])
    document = read_mapping(path)
    pairs = parse_overrides(overrides)
    if ultrarag.is_ultrarag(document):
        top = [(key, value) for key, value in pairs if key in TOP_LEVEL_SETTABLE]
        for key, value in pairs:
            if key not in TOP_LEVEL_SETTABLE:
                _set_path(document, key, value, path)
        document = {"name": path.stem, "steps": ultrarag.steps_from_parameters(path, document)}
        origin = "ultrarag"
        pairs = top
    else:
        origin = "experiment"
    record = validate(ExperimentRecord, document, path)
    raw_steps = _with_ids(record.steps, path, kinds)
    params = dict(record.params)
    top_level = {"name": record.name or path.stem, "output": record.output}
    for key, value in pairs:
        _override(key, value, params, top_level, raw_steps, path)
    _check_steps(raw_steps, path, kinds)  # again: ``--set STEP.id`` / ``STEP.kind`` may have changed them
    experiment_name = _plain_name(top_level["name"], path)
    if top_level["output"] is not None and not isinstance(top_level["output"], str):
        raise InputError(path, None, f"output {top_level['output']!r} is not a folder path", "give a path")

    known = {
        "data_dir": str(default_data_dir()),
        "cache_dir": str(default_cache_dir()),
        "results_dir": str(default_results_dir()),
    }
    for name, value in params.items():
        known[name] = substitute(value, known, path, f"params.{name}")
    output_text = substitute(
        top_level["output"] or f"{DEFAULT_OUTPUT_ROOT}/{experiment_name}", known, path, "output"
    )
    known["output"] = str(output_text)
    output = check_output(Path(known["output"]), f"the output of {path}")  # never inside a result folder
    steps = [_step(kinds[raw["kind"]], raw, known, output, path) for raw in raw_steps]
    resolved_params = {name: known[name] for name in params}
    return Experiment(experiment_name, path, output, resolved_params, steps, overrides, origin)


def _set_path(document: dict[str, Any], dotted: str, value: Any, path: Path) -> None:
    """``evaluation.save_path`` -> ``document["evaluation"]["save_path"] = value`` (sections must exist)."""
    *parents, last = dotted.split(".")
    node: Any = document
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise HarnessError(f"--set {dotted}: {path} has no section {part!r}")
    node[last] = value


def _with_ids(steps: list[dict[str, Any]], path: Path, kinds: Mapping[str, StepKind]) -> list[dict[str, Any]]:
    """Each step as a dict with an ``id`` (the kind, ``kind-2`` when it repeats), checked by :func:`_check_steps`."""
    seen: dict[str, int] = {}
    named = []
    for raw in steps:
        kind = str(raw.get("kind"))  # an unknown or malformed kind is refused by _check_steps
        seen[kind] = seen.get(kind, 0) + 1
        named.append(
            {**raw, "id": str(raw.get("id") or (kind if seen[kind] == 1 else f"{kind}-{seen[kind]}"))}
        )
    _check_steps(named, path, kinds)
    return named


def _check_steps(steps: list[dict[str, Any]], path: Path, kinds: Mapping[str, StepKind]) -> None:
    """Every step has a known kind and its own folder: a plain id, unique even ignoring case (folders on
    macOS and Windows), and not the name of one of the experiment folder's own files."""
    folders: dict[str, str] = {}
    for number, raw in enumerate(steps, start=1):
        kind = raw.get("kind")
        if not isinstance(kind, str) or kind not in kinds:
            problem = "missing key 'kind'" if kind is None else f"unknown kind {kind!r}"
            raise InputError(path, None, f"steps[{number}]: {problem}", f"choose one of {', '.join(kinds)}")
        step_id = raw["id"]
        if not isinstance(step_id, str) or not _PLAIN_ID.fullmatch(step_id):
            raise InputError(
                path,
                None,
                f"steps[{number}]: id {step_id!r} is not a plain name",
                "use letters, digits, -, _, .",
            )
        if step_id.lower() in (RESOLVED_FILE, SUMMARY_FILE):
            raise InputError(
                path,
                None,
                f"steps[{number}]: id {step_id!r} is the name of the experiment's own file",
                "rename it",
            )
        if step_id.lower() in folders:
            raise InputError(
                path,
                None,
                f"steps[{number}]: id {step_id!r} is repeated (step {folders[step_id.lower()]!r} has that folder)",
                "give each step its own id",
            )
        folders[step_id.lower()] = step_id


def _plain_name(name: Any, path: Path) -> str:
    """The experiment's name, which names its folder under ``experiments/``: one plain folder name."""
    if (
        not isinstance(name, str)
        or not name.strip()
        or name in (".", "..")
        or any(char in name for char in "/\\")
        or not name.isprintable()
    ):
        raise InputError(
            path,
            None,
            f"name {name!r} is not a plain folder name",
            f"the experiment's folder is {DEFAULT_OUTPUT_ROOT}/<name>: no '/', '\\' or '..' (or set `output`)",
        )
    return name


def _override(
    key: str, value: Any, params: dict[str, Any], top: dict[str, Any], steps: list[dict[str, Any]], path: Path
) -> None:
    if key in params:
        params[key] = value
    elif key in TOP_LEVEL_SETTABLE:
        top[key] = value
    elif "." in key and (step := next((s for s in steps if s["id"] == key.split(".")[0]), None)):
        step[key.split(".", 1)[1].replace("-", "_")] = value
    else:
        ids = ", ".join(step["id"] for step in steps)
        raise HarnessError(
            f"--set {key}: {path} has no parameter {key!r} (parameters: {', '.join(params) or 'none'}; "
            f"steps: {ids}; or name, output)"
        )


def substitute(value: Any, known: dict[str, Any], path: Path, where: str) -> Any:
    """``value`` with every ``${name}`` replaced (recursively through lists and mappings)."""
    if isinstance(value, list):
        return [substitute(item, known, path, where) for item in value]
    if isinstance(value, dict):
        return {key: substitute(item, known, path, f"{where}.{key}") for key, item in value.items()}
    if not isinstance(value, str):
        return value
    whole = _REFERENCE.fullmatch(value)
    if whole:
        return _lookup(whole.group(1), known, path, where)
    return _REFERENCE.sub(lambda match: str(_lookup(match.group(1), known, path, where)), value)


def _lookup(name: str, known: dict[str, Any], path: Path, where: str) -> Any:
    if name not in known:
        raise InputError(
            path, None, f"{where}: unknown parameter ${{{name}}}", f"known: {', '.join(sorted(known))}"
        )
    return known[name]


def _step(kind: StepKind, raw: dict[str, Any], known: dict[str, Any], output: Path, path: Path) -> Step:
    where = f"step {raw['id']!r} ({kind.name})"
    values = {key: value for key, value in raw.items() if key not in ("id", "kind")}
    for key in values:
        if str(key).replace("-", "_") in NOT_STEP_OPTIONS:
            raise InputError(path, None, f"{where}: unknown key {key!r} (check its spelling)")
    options = validate(kind.options, substitute(values, known, path, where), path, where)
    return Step(raw["id"], kind, options, output / raw["id"])
