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
from harness.core.fileio import open_text

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


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file; a syntax error is one ``InputError`` naming the file and line."""
    path = Path(path)
    try:
        with open_text(path) as handle:
            return yaml.safe_load(handle)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise InputError(
            path, mark.line + 1 if mark else None, f"not valid YAML ({problem})", "fix the syntax"
        ) from None
    except OSError as error:
        raise InputError(path, None, f"cannot read ({error.strerror or error})") from None


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
