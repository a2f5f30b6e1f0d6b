"""One reader for YAML files and for the records the harness ships (datasets, models, references, suites).

The records live in the package (``harness/records/``, read through ``importlib.resources``), so an
installed wheel has its registries. A user folder named by ``HARNESS_CONFIG_DIR`` has the same layout
and adds or overrides records: its ``datasets.yaml`` entries and ``models/*.yaml`` records replace
shipped ones of the same name, its ``references.yaml`` entries are added, its ``suites/NAME.yaml``
replaces the shipped suite ``NAME``.

Every record is validated by a pydantic schema that forbids unknown keys, so a typo is one error line
naming the file and the key.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from harness.core.errors import InputError
from harness.core.fileio import read_text

CONFIG_DIR_ENV = "HARNESS_CONFIG_DIR"

RecordT = TypeVar("RecordT", bound=BaseModel)


class Record(BaseModel):
    """Base of every record schema: unknown keys are errors, values are checked, records are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


def shipped_dir() -> Path:
    """The records shipped inside the package."""
    return Path(str(resources.files("harness") / "records"))


def user_dir() -> Path | None:
    """The user's folder of added or overriding records (``HARNESS_CONFIG_DIR``), if set."""
    value = os.environ.get(CONFIG_DIR_ENV, "").strip()
    return Path(value).expanduser() if value else None


def record_dirs() -> list[Path]:
    """Folders that hold records, lowest priority first: the shipped one, then the user's."""
    user = user_dir()
    return [shipped_dir(), *([user] if user is not None else [])]


def record_files(relative: str) -> list[Path]:
    """Every existing ``relative`` file (e.g. ``datasets.yaml``) in the record folders, lowest priority first."""
    return [folder / relative for folder in record_dirs() if (folder / relative).is_file()]


def record_folder_files(relative: str) -> dict[str, Path]:
    """``stem -> path`` of the ``*.yaml`` files in folder ``relative`` (e.g. ``models``); the user's win."""
    found: dict[str, Path] = {}
    for folder in record_dirs():
        directory = folder / relative
        if directory.is_dir():
            for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
                found[path.stem] = path
    return found


# Bounds that no harness file comes near: a "billion laughs" of aliases, or nesting that would exhaust
# the recursion of the YAML composer and of every reader after it, is refused before it is built.
MAX_YAML_DEPTH = 100
MAX_YAML_VALUES = 100_000


class RefusedYAML(yaml.MarkedYAMLError):
    """Valid YAML the harness refuses to load: a repeated key, aliases expanding past
    :data:`MAX_YAML_VALUES` values or referring to themselves, nesting deeper than :data:`MAX_YAML_DEPTH`."""

    def __init__(self, problem: str, mark: yaml.Mark | None, fix: str):
        super().__init__(problem=problem, problem_mark=mark)
        self.fix = fix


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing repeated keys and bounding nesting and alias expansion."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = False

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            self._aliases = True
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise RefusedYAML(f"nested deeper than {MAX_YAML_DEPTH} levels", mark, "flatten it")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None and self._aliases:
            _expanded_size(node, {}, set())
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # ``<<: *defaults`` merges; keys written here override it, as YAML intends
            key = self.construct_object(key_node, deep=True)
            try:
                seen = first.get(key)
            except TypeError:
                continue  # an unhashable key: the constructor reports it
            if seen is not None:
                raise RefusedYAML(
                    f"duplicate key {key!r}, first on line {seen.line + 1}",
                    key_node.start_mark,
                    "keep one of them: YAML keeps only the last",
                )
            first[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """How many values ``node`` stands for once every alias is expanded; refused past the bound."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_nodes:
        raise RefusedYAML(
            "an alias refers to the value that contains it", node.start_mark, "remove the alias"
        )
    open_nodes.add(id(node))
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, sizes, open_nodes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(
            _expanded_size(key, sizes, open_nodes) + _expanded_size(value, sizes, open_nodes)
            for key, value in node.value
        )
    open_nodes.discard(id(node))
    if size > MAX_YAML_VALUES:
        raise RefusedYAML(
            f"aliases expand to more than {MAX_YAML_VALUES:,} values", node.start_mark, "write the values out"
        )
    sizes[id(node)] = size
    return size


def load_yaml(text: str) -> Any:
    """The one YAML parser: ``text`` as a value (safe types only).

    Raises ``yaml.YAMLError``; :class:`RefusedYAML` for a repeated key, an alias bomb or deep nesting.
    """
    loader = _StrictLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file through :func:`load_yaml`; any problem (not UTF-8, a syntax error, a repeated
    key, aliases expanding past the bound) is one ``InputError`` naming the file and line."""
    path = Path(path)
    text = read_text(path)
    try:
        return load_yaml(text)
    except RefusedYAML as error:
        mark = error.problem_mark
        raise InputError(path, mark.line + 1 if mark else None, str(error.problem), error.fix) from None
    except yaml.reader.ReaderError as error:
        line = text.count("\n", 0, error.position) + 1
        raise InputError(
            path, line, f"not valid YAML (control character #x{error.character:04x} is not allowed)"
        ) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise InputError(
            path, mark.line + 1 if mark else None, f"not valid YAML ({problem})", "fix the syntax"
        ) from None


def read_mapping(path: str | Path, key: str | None = None) -> dict[str, Any]:
    """A YAML file's top-level mapping (or the mapping under ``key``); anything else is an error."""
    document = read_yaml(path)
    if key is not None:
        document = (document or {}).get(key) if isinstance(document, dict) else None
    if not isinstance(document, dict):
        where = f"a {key!r} mapping" if key else "a mapping"
        raise InputError(path, None, f"expected {where} at the top level")
    return document


def validate(schema: type[RecordT], data: Any, path: str | Path, where: str = "") -> RecordT:
    """``data`` as a ``schema`` record; the first problem becomes one ``InputError`` naming file and key."""
    try:
        return schema.model_validate(data)
    except ValidationError as error:
        raise InputError(path, None, _first_problem(error, where)) from None


def _first_problem(error: ValidationError, where: str) -> str:
    # A misspelt key is both unknown and missing under its right name: naming the misspelling helps more.
    problems = error.errors()
    problem = next((p for p in problems if p["type"] == "extra_forbidden"), problems[0])
    location = ".".join(str(part) for part in problem["loc"])
    prefix = f"{where}: " if where else ""
    if problem["type"] == "extra_forbidden":
        return f"{prefix}unknown key {location!r} (check its spelling)"
    if problem["type"] == "missing":
        return f"{prefix}missing key {location!r}"
    message = problem["msg"].removeprefix("Value error, ")
    return f"{prefix}{location}: {message}" if location else f"{prefix}{message}"
